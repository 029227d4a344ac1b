"""aider (pip aider-chat, pinned, in a virtualenv of its own) end to end: the packaged
remote_aider.yaml's command runs the real program in a real bwrap sandbox, through a per-rollout
recording proxy, on chat completions (through LiteLLM).

With a scripted engine: a first reply that breaks the file's syntax gets aider's lint errors back, the
second reply fixes the file. aider removes the format reminder from the earlier user message, so its
second call rewrites the history: two sequences, the split labelled history_rewritten, each exactly as
sampled, and the trainer forwards the prefix they share once. With the real model the calls must be
recorded token-exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from coderl.agents import get_loop
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.scripted import ScriptedEngine
from coderl.tasks import grade, load_tasks
from coderl.train.ledger import SampledLedger
from coderl.train.packing import pack
from tests.agent_programs import AIDER, assert_recorded_token_exactly, recipe_ctx
from tests.test_tasks import BUGGY, make_native

RECIPE = "remote_aider.yaml"
BAD = "calc.py\n```\ndef add(a, b):\n    return a + b +\n```"  # a syntax error: aider's lint catches it
GOOD = "calc.py\n```\n" + BUGGY.replace("a - b", "a + b") + "```"


async def test_aider_rewrites_its_history_and_the_two_sequences_share_their_prefix(
    tmp_path: Path, tokenizer: Any
) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    engine = ScriptedEngine([BAD, GOOD], tokenizer, name="scripted")
    traj = await get_loop("remote").run(task, recipe_ctx(RECIPE, AIDER, engine, tokenizer, max_tokens=256))
    assert traj.exit_status == "submitted", traj.error
    assert all(c.params.temperature == 1.0 for c in engine.calls)  # the recipe's model settings: sampling
    assert traj.metrics["proxy_calls"] == 2 and traj.metrics["proxy_splits/history_rewritten"] == 1
    first, second = engine.calls
    assert "To suggest changes to a file you MUST return" in tokenizer.decode(first.prompt_ids)
    assert "invalid syntax" in tokenizer.decode(second.prompt_ids)  # the lint errors went back to the model
    # two sequences, each exactly as sampled: the longer reply is the trajectory, the first its part
    [part] = traj.parts
    sampled = [[t for t, m in zip(s.response_ids, s.response_mask, strict=True) if m] for s in (part, traj)]
    assert [tokenizer.decode(s) for s in sampled] == [BAD + "<|im_end|>", GOOD + "<|im_end|>"]
    assert (traj.prompt_ids, part.prompt_ids) == (second.prompt_ids, first.prompt_ids)
    # they share the system prompt, aider's examples and the file: forwarded once when trained
    seqs = [s.prompt_ids + s.response_ids for s in traj.sequences()]
    starts = [len(s.prompt_ids) for s in traj.sequences()]
    shared = pack(seqs, starts, torch.device("cpu"), share_prefix=True).num_tokens
    plain = pack(seqs, starts, torch.device("cpu")).num_tokens
    common = next(i for i, (a, b) in enumerate(zip(first.prompt_ids, second.prompt_ids, strict=False)) if a != b)
    assert common > len(first.prompt_ids) / 2 and plain - shared == common
    assert "+    return a + b" in traj.patch and ".aider" not in traj.patch
    assert (await grade(task, traj.patch)).resolved


@pytest.mark.slow
async def test_aider_with_the_real_model_is_recorded_token_exactly(
    tmp_path: Path, tokenizer: Any, engine: EmbeddedEngine
) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    ledger = SampledLedger(engine)
    traj = await get_loop("remote").run(task, recipe_ctx(RECIPE, AIDER, ledger, tokenizer, max_tokens=24))
    assert_recorded_token_exactly(traj, ledger)
