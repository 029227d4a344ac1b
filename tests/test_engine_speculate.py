"""Speculative decoding from the context (engine.speculate): prompt-lookup drafts, their verification
(the tokens and their distribution are the model's own), and the engine on the real model."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from coderl.config import EngineConfig, ModelConfig
from coderl.engine import SamplingParams
from coderl.engine.draft import NGramDraft
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.sampler import SampleRequest, _truncated, verify_draft
from coderl.errors import ConfigError
from tests.conftest import hf_logprobs


def test_draft_follows_the_latest_earlier_occurrence_of_the_tail() -> None:
    d = NGramDraft([1, 2, 3, 4, 5, 9, 2, 3])
    assert d.propose(3) == [4, 5, 9]  # "2 3" occurred before, followed by 4 5 9
    d.extend([7])
    assert d.propose(3) == []  # "3 7" never occurred before
    d.extend([1, 2, 3])  # "1 2 3": the 3-gram wins over the 2-gram "2 3" (latest: ... 9 2 3 7)
    assert d.propose(2) == [4, 5]
    assert d.propose(0) == []
    assert NGramDraft([5]).propose(4) == []  # too short for any n-gram
    assert NGramDraft([1, 2, 1, 2]).propose(8) == [1, 2]  # what exists, no more


def test_greedy_verification_keeps_the_argmax_prefix() -> None:
    logits = torch.full((4, 10), -5.0)
    for row, best in enumerate([3, 4, 6, 8]):
        logits[row, best] = 5.0
    greedy = SampleRequest(SamplingParams(temperature=0), torch.Generator().manual_seed(0))
    tokens, lps = verify_draft(logits, [3, 4, 5], greedy)
    assert tokens == [3, 4, 6]  # the third draft token is not the argmax: replaced, and the rest dropped
    assert lps == pytest.approx(torch.log_softmax(logits[:3], -1)[[0, 1, 2], [3, 4, 6]].tolist())
    assert verify_draft(logits, [3, 4, 6], greedy)[0] == [3, 4, 6, 8]  # all kept, one more from the last row


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.8), SamplingParams(temperature=1.0, top_p=0.7),
                                    SamplingParams(temperature=1.0, top_k=3)])  # fmt: skip
def test_sampled_verification_draws_from_the_models_distribution(params: SamplingParams) -> None:
    """The first token a verification returns is distributed as the model's (truncated) distribution,
    whatever the draft: a likely draft token, an unlikely one, one outside the top-k."""
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.2, -1.0, -3.0], [0.0] * 6])
    p = _truncated(torch.log_softmax(logits[0] / params.temperature, -1), params)
    n = 20000
    for draft_token in (0, 2, 5):
        gen = torch.Generator().manual_seed(draft_token)
        counts = Counter(verify_draft(logits, [draft_token], SampleRequest(params, gen))[0][0] for _ in range(n))
        for tok in range(6):
            expected = float(p[tok]) * n
            assert abs(counts[tok] - expected) <= 5 * (expected + 1) ** 0.5, (draft_token, tok, counts, expected)


@pytest.mark.slow
async def test_engine_with_drafts_generates_what_it_generates_without(
    tokenizer: Any, hf_model: Any
) -> None:
    """A copying prompt on the real model: greedy output with drafts is the same tokens as without,
    most tokens come from accepted drafts, the logprobs are the model's, and a session's next turn
    (prefix cache) still lines up with the cache."""
    text = "def area(width, height):\n    if width < 0 or height < 0:\n        raise ValueError('negative')\n    return width * height\n"
    messages = [{"role": "user", "content": f"Copy this function exactly:\n{text}"}]
    prompt = list(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    )
    params = SamplingParams(max_tokens=60, temperature=0)
    outs = {}
    for speculate in (0, 4):
        eng = EmbeddedEngine(EngineConfig(max_batch_size=4, speculate=speculate), ModelConfig())
        await eng.start()
        try:
            first = await eng.generate(prompt, params, session_id="s")
            copied = eng.stats()
            second = await eng.generate(prompt + first.token_ids + [2], params, session_id="s")
            sampled = await eng.generate(prompt, SamplingParams(max_tokens=40, temperature=0.8, seed=3))
            outs[speculate] = (first, second, sampled, copied)
        finally:
            await eng.stop()
    plain, drafted = outs[0], outs[4]
    assert drafted[0].token_ids == plain[0].token_ids and len(plain[0].token_ids) > 20
    assert drafted[1].token_ids == plain[1].token_ids
    assert drafted[0].finish_reason == plain[0].finish_reason
    stats = drafted[3]
    assert plain[3]["draft_tokens"] == 0
    assert stats["accepted_draft_tokens"] > stats["generated_tokens"] / 2  # the copy came mostly from drafts
    assert stats["steps"] < plain[3]["steps"] / 2
    for c, temperature in ((drafted[0], 1.0), (drafted[2], 0.8)):
        ref = hf_logprobs(hf_model, prompt, c.token_ids, temperature)
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref, strict=True)) < 1e-4


def test_bench_replays_each_model_turn_with_its_context(tmp_path: Path) -> None:
    from coderl.bench.speculate import trajectory_requests

    path = tmp_path / "trajectories.jsonl"
    rows = [
        {"prompt_ids": [1, 2], "response_ids": [10, 11, 50, 51, 12], "response_mask": [1, 1, 0, 0, 1]},
        {"prompt_ids": [3], "response_ids": [60, 13], "response_mask": [0, 1]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert trajectory_requests(path, 10) == [([1, 2], 2), ([1, 2, 10, 11, 50, 51], 1), ([3, 60], 1)]
    assert trajectory_requests(path, 1) == [([1, 2], 2)]
    with pytest.raises(ConfigError, match="no such file"):
        trajectory_requests(tmp_path / "nope.jsonl", 10)
    (tmp_path / "empty.jsonl").write_text(json.dumps({**rows[0], "response_mask": [0] * 5}) + "\n")
    with pytest.raises(ConfigError, match="no model turn"):
        trajectory_requests(tmp_path / "empty.jsonl", 10)


def test_bench_copy_workload_asks_to_copy_bundled_functions(tokenizer: Any) -> None:
    from coderl.bench.speculate import copy_requests

    requests = copy_requests(tokenizer, 5, 99)
    assert len(requests) == 5 and all(m == 99 for _, m in requests)
    text = tokenizer.decode(requests[0][0])
    assert "Copy this function exactly" in text and "def " in text
