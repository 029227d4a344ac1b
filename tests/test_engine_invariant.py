"""Batch invariance (``engine.batch_invariant``): a greedy request's tokens and logprobs are the same
bits alone and in a busy batch, on the real default model in bfloat16 (where a row's sums change with
how many rows share a matmul) and in float32 (what ``model.dtype=auto`` picks on a CPU without native
bfloat16), the latter with its linear layers on oneDNN's packed weights (the default) and on MKL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from coderl.config import EngineConfig, ModelConfig
from coderl.engine import SamplingParams
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.row_probe import CANDIDATES
from coderl.engine.runner import ROW_BLOCK, _invariant_segments
from coderl.engine.scheduler import prefill_piece


def test_a_prompts_pieces_end_at_multiples_of_the_chunk_whatever_it_has_done() -> None:
    assert prefill_piece(0, 1000, 512) == 512
    assert prefill_piece(512, 488, 512) == 488
    assert prefill_piece(300, 1000, 512) == 212  # a cached prefix of 300: up to the next boundary
    assert prefill_piece(300, 100, 512) == 100


def test_long_chunks_are_segments_of_their_own_and_short_ones_go_in_blocks() -> None:
    assert ROW_BLOCK == 32
    assert _invariant_segments([1] * 24) == [24]
    assert _invariant_segments([5] * 10) == [32, 18]  # 50 draft-verifying rows: a block and the rest
    assert _invariant_segments([1, 1, 512, 3, 100]) == [2, 512, 3, 100]
    assert _invariant_segments([40]) == [40]
    assert sum(_invariant_segments([7, 33, 32, 1, 2])) == 75


def test_a_short_segment_is_padded_to_the_dtypes_fewest_rows_and_only_its_rows_come_back() -> None:
    import torch

    from coderl.engine.runner import LEAST_ROWS, _in_segments

    assert LEAST_ROWS[torch.bfloat16] == 1 and LEAST_ROWS.get(torch.float32, ROW_BLOCK) == ROW_BLOCK
    seen: list[int] = []

    def double(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(x.shape[0])
        return 2 * x, x + y

    x, y = torch.arange(10.0).reshape(5, 2), torch.ones(5, 2)
    a, b = _in_segments(double, [3, 2], x, y, least=4)
    assert seen == [4, 4] and torch.equal(a, 2 * x) and torch.equal(b, x + 1)  # each padded, then cut
    seen.clear()
    (a,) = _in_segments(lambda t: t * 3, [5], x, least=1)
    assert torch.equal(a, 3 * x)


def test_the_setting_reads_a_bare_off_and_names_the_choices_on_a_bad_one() -> None:
    from coderl.config import load_config
    from coderl.errors import ConfigError

    assert load_config(None, ["engine.batch_invariant=off"]).engine.batch_invariant == "off"  # YAML's false
    assert load_config(None, ["engine.batch_invariant=greedy"]).engine.batch_invariant == "greedy"
    with pytest.raises(ConfigError, match="'off', 'greedy' or 'all'"):
        load_config(None, ["engine.batch_invariant=sampled"])


SYSTEM = "You fix bugs in Python code. Read the function, find the wrong line, and write it out again. " * 6


def _prompts(tokenizer: Any, growth: int = 1) -> list[list[int]]:
    """Four prompts of one system prompt (~130 tokens: two 64-token pieces the sessions can share), the
    i-th with 1 + growth x i copies of a short function."""
    words = "def parse(line):\n    key, _, value = line.partition('=')\n    return key.strip(), value.strip()\n"
    return [
        list(
            tokenizer.apply_chat_template(
                [{"role": "system", "content": SYSTEM},
                 {"role": "user", "content": f"Explain, step {i}:\n" + words * (1 + growth * i)}],
                add_generation_prompt=True, tokenize=True, return_dict=False,
            )
        )
        for i in range(4)
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("dtype", "packed"), [("bfloat16", True), ("float32", True), ("float32", False)])
async def test_greedy_turns_come_out_the_same_bits_alone_and_in_a_busy_batch(
    tokenizer: Any, dtype: str, packed: bool
) -> None:
    # small prefill pieces (64) so the prompts (~170-260 tokens) are prefilled in several; drafts on.
    # float32 packed: oneDNN with single rows unpadded; not packed: MKL with short segments padded.
    # Busy (first, with only sampled sessions of the same prompts in the cache: their KV is computed in
    # other pieces), the sessions take the system prompt's two whole pieces from the one that computes
    # them first, waiting for it; alone, each computes its whole prompt (share_prompts off).
    config = EngineConfig(
        max_batch_size=8, prefill_chunk=64, speculate=4, batch_invariant="greedy", pack_weights=packed
    )  # fmt: skip
    engine = EmbeddedEngine(config, ModelConfig(dtype=dtype))
    await engine.start()
    try:
        prompts = _prompts(tokenizer)
        greedy = SamplingParams(max_tokens=12, temperature=0)
        follow = tokenizer.encode("\nNow shorter.", add_special_tokens=False)

        async def two_turns(i: int, tag: str) -> list[Any]:
            first = await engine.generate(prompts[i], greedy, session_id=f"{tag}{i}")
            second = await engine.generate(prompts[i] + first.token_ids + follow, greedy, session_id=f"{tag}{i}")
            return [first, second]

        for i, p in enumerate(prompts):  # the cache holds every prompt's KV, sampled: not pieces to take
            await engine.generate(p, SamplingParams(max_tokens=8, temperature=1.0, seed=i), session_id=f"sampled{i}")
        busy = await asyncio.gather(
            *(two_turns(i, "busy") for i in range(len(prompts))),
            *(  # sampled requests share the steps too
                engine.generate(p, SamplingParams(max_tokens=20, temperature=1.0, seed=i))
                for i, p in enumerate(prompts)
            ),
        )
        assert sorted(b[0].cached_tokens for b in busy[:4]) == [0, 128, 128, 128]  # one computed, three took
        shared = engine.stats()["shared_prompt_tokens"]
        engine.cfg = config.model_copy(update={"share_prompts": False})  # (invariant_chunk unchanged)
        alone = [await two_turns(i, "alone") for i in range(len(prompts))]
        assert engine.stats()["shared_prompt_tokens"] == shared
        assert [a[0].cached_tokens for a in alone] == [0] * 4
        for a, b in zip(alone, busy, strict=False):
            for x, y in zip(a, b, strict=True):
                assert x.token_ids == y.token_ids
                assert x.logprobs == y.logprobs  # bit for bit, not close
        for a, b in zip(alone, busy, strict=False):  # second turns reused their session's KV, alike
            assert a[1].cached_tokens == b[1].cached_tokens > 0
        # the padding the engine measured on this CPU when it started (coderl/engine/row_probe.py)
        assert engine.runner.least_rows in CANDIDATES and engine.runner.least_rows <= (16 if packed else 32)
        stats = engine.stats()
        assert stats["invariant_steps"] > 0
        assert stats["accepted_draft_tokens"] > 0  # drafts were verified and kept
    finally:
        await engine.stop()


async def test_an_invariant_request_does_not_wait_for_a_prefix_nobody_computes_in_whole_pieces() -> None:
    # session A's first turn is sampled, so its KV holds no whole invariant piece; its greedy second turn
    # runs long. B (greedy) shares A's first 130 tokens: it takes nothing from A (not the same bits) and
    # must not wait for A to finish either, as it would for a request still prefilling those pieces.
    from tests.tiny import tiny_checkpoint

    engine = EmbeddedEngine(
        EngineConfig(max_batch_size=4, prefill_chunk=64, batch_invariant="greedy"),
        ModelConfig(path=str(tiny_checkpoint()), dtype="float32"),
    )
    await engine.start()
    try:
        common = [100 + i % 50 for i in range(130)]
        first = await engine.generate(common + [7, 8], SamplingParams(max_tokens=4, temperature=1.0, seed=0), session_id="a")
        started = asyncio.Event()
        a = asyncio.create_task(
            engine.generate_streaming(
                common + [7, 8] + first.token_ids + [9],
                SamplingParams(max_tokens=400, temperature=0, ignore_eos=True),
                lambda tokens, logprobs: started.set(),
                session_id="a",
            )
        )
        await started.wait()
        b = await engine.generate(common + [11, 12], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True), session_id="b")
        assert not a.done()  # B ended while A still decoded
        assert b.cached_tokens == 0 and engine.stats()["shared_prompt_tokens"] == 0
        await a
    finally:
        await engine.stop()


@pytest.mark.slow
async def test_a_sessions_own_decoded_tokens_are_not_swapped_for_another_sessions_whole_pieces(tokenizer: Any) -> None:
    # a second turn reuses its session's KV: the first prompt's pieces, a partial piece and the decoded
    # reply. Another session that prefilled the very same history in whole pieces holds other bits for
    # it (bfloat16), so taking those would make the turn depend on what else the engine ran.
    engine = EmbeddedEngine(
        EngineConfig(max_batch_size=4, prefill_chunk=64, batch_invariant="greedy"), ModelConfig(dtype="bfloat16")
    )
    await engine.start()
    try:
        prompt = _prompts(tokenizer, growth=2)[1]
        greedy = SamplingParams(max_tokens=90, temperature=0, ignore_eos=True)
        follow = tokenizer.encode("\nNow shorter, and name each step." * 10, add_special_tokens=False)  # a whole piece more

        async def second_turn(tag: str, other: bool) -> Any:
            first = await engine.generate(prompt, greedy, session_id=tag)
            history = prompt + first.token_ids + follow
            if other:  # the same history, prefilled from nothing in whole pieces by another session
                await engine.generate(history, SamplingParams(max_tokens=1, temperature=0), session_id=f"{tag}-copy")
            return await engine.generate(history, greedy, session_id=tag)

        engine.cfg = engine.cfg.model_copy(update={"share_prompts": False})
        alone = await second_turn("alone", other=False)
        engine.cfg = engine.cfg.model_copy(update={"share_prompts": True})
        beside = await second_turn("beside", other=True)
        assert beside.cached_tokens == alone.cached_tokens  # its own KV, not the copy's longer pieces
        assert (beside.token_ids, beside.logprobs) == (alone.token_ids, alone.logprobs)
    finally:
        await engine.stop()
