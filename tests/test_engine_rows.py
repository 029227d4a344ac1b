"""Batched decode attention: the running batch's KV as rows of one tensor, one attention call per
layer for every decoding sequence, and the padded, bucketed decode step that CUDA graphs replay
(run eagerly here, on the CPU), each checked against an independent Hugging Face forward pass."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from coderl.config import EngineConfig, ModelConfig
from coderl.engine import SamplingParams
from coderl.engine.cuda_graphs import DecodeGraphs, bucket
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.kv_cache import KVLayout, KVRows, SequenceKV
from coderl.engine.runner import Chunk, ModelRunner
from coderl.errors import EngineError
from tests.conftest import hf_logprobs


def _layout() -> KVLayout:
    return KVLayout(num_layers=2, num_kv_heads=3, head_dim=4, dtype=torch.float32, device=torch.device("cpu"))


def _filled(length: int, value: float) -> SequenceKV:
    kv = SequenceKV(_layout(), tokens=list(range(length)))
    kv.reserve(length)
    assert kv.data is not None
    kv.data[:, :, :, :length] = value
    return kv


def test_rows_keep_a_sequences_kv_through_bind_grow_and_release() -> None:
    rows = KVRows(_layout(), rows=2, max_len=2000)
    a, b = _filled(10, 1.0), _filled(3, 2.0)
    rows.bind(a)
    rows.bind(b)
    assert (a.row, b.row) == (0, 1) and rows.capacity == 256 and len(rows) == 2
    assert a.data is not None and bool((a.data[:, :, :, :10] == 1.0).all())
    with pytest.raises(RuntimeError, match="all 2 KV rows are taken"):
        rows.bind(_filled(1, 0.0))
    generation = rows.generation
    a.reserve(300)  # a sequence in a row grows every row, and every row keeps what it held
    assert rows.capacity == 512 and rows.generation == generation + 1
    assert a.data is not None and b.data is not None and a.data.shape[3] == 512
    assert bool((a.data[:, :, :, :10] == 1.0).all()) and bool((b.data[:, :, :, :3] == 2.0).all())
    assert rows.data is not None and a.data.data_ptr() == rows.data[:, :, 0].data_ptr()
    rows.release(b, keep=True)  # leaves with a copy of its own, sized to its length
    assert b.rows is None and b.data is not None and b.data.shape[3] == 3 and bool((b.data == 2.0).all())
    rows.release(a, keep=False)
    assert a.data is None and len(rows) == 0 and rows.capacity == 512  # capacity stays: no re-capture
    with pytest.raises(ValueError, match="exceed the rows' limit of 2000"):
        rows.grow(2001)
    rows.bind(b)
    with pytest.raises(RuntimeError, match="1 sequences still live"):
        rows.free()
    rows.release(b, keep=False)
    rows.free()  # storage gone, and whatever held its address told so; the next bind allocates again
    assert rows.data is None and rows.capacity == 0 and rows.generation == generation + 2
    rows.bind(_filled(5, 3.0))
    assert rows.capacity == 256 and rows.generation == generation + 3


def test_rows_grown_in_inference_mode_take_a_sequence_bound_outside_it() -> None:
    # the engine grows rows inside its inference-mode forward pass and binds a session's cached KV
    # (itself made in inference mode) outside it; torch refuses in-place writes to inference tensors
    # outside inference mode, which once killed the engine thread on a GPU
    rows = KVRows(_layout(), rows=2, max_len=2000)
    first = _filled(3, 1.0)
    rows.bind(first)
    with torch.inference_mode():
        first.reserve(300)
        cached = _filled(7, 3.0)
    rows.bind(cached)
    assert cached.data is not None and bool((cached.data[:, :, :, :7] == 3.0).all())
    rows.release(cached, keep=True)
    rows.bind(cached)
    assert cached.data is not None and bool((cached.data[:, :, :, :7] == 3.0).all())


def test_rows_that_do_not_fit_in_memory_say_how_to_fit() -> None:
    huge = KVLayout(
        num_layers=80, num_kv_heads=64, head_dim=128, dtype=torch.float32, device=torch.device("cpu")
    )
    rows = KVRows(huge, rows=1024, max_len=10**6)
    with pytest.raises(EngineError, match=r"1025 rows x 1000000 positions .* lower engine.max_batch_size"):
        rows.grow(10**6)
    assert rows.data is None and rows.capacity == 0


@pytest.mark.parametrize(("n", "limit", "expected"), [(1, 64, 1), (3, 64, 4), (33, 64, 64), (40, 48, 48)])
def test_batch_and_span_buckets(n: int, limit: int, expected: int) -> None:
    assert bucket(n, limit) == expected


@pytest.mark.slow
def test_padded_decode_step_matches_hf(checkpoint: Any, hf_model: Any) -> None:
    """Sequences decoded through the padded, bucketed step (what CUDA graphs replay) give the HF
    forward's logits while the batch shrinks (padding entries write into the scratch row only) and
    the rows grow past their first capacity mid-decode."""
    from coderl.checkpoint import load_model

    runner = ModelRunner(load_model(checkpoint, torch.float32, "cpu"))
    rows = KVRows(runner.layout(), rows=4, max_len=2048)
    step = DecodeGraphs(runner, rows, capture=False)
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(200, 40000, (n,), generator=g).tolist() for n in (5, 40, 250)]
    steps = [6, 3, 9]  # the first two leave early; the third crosses 256 positions
    kvs = [SequenceKV(runner.layout()) for _ in prompts]
    for kv in kvs:
        rows.bind(kv)
    logits = runner.forward([Chunk(kv, p, want_logits=True) for kv, p in zip(kvs, prompts, strict=True)])
    seqs = [list(p) for p in prompts]
    generation = rows.generation
    for i, row in enumerate(logits.argmax(-1).tolist()):
        seqs[i].append(row)
    for t in range(max(steps)):
        live = [i for i in range(len(prompts)) if t < steps[i]]
        out = runner.forward([Chunk(kvs[i], [seqs[i][-1]], want_logits=True) for i in live], step)
        for i, row_logits in zip(live, out, strict=True):
            with torch.no_grad():
                ref = hf_model(torch.tensor([seqs[i]])).logits[0, -1].float()
            assert (row_logits - ref).abs().max().item() < 1e-3, (i, t)
            seqs[i].append(int(row_logits.argmax()))
        for i in range(len(prompts)):
            if t + 1 == steps[i]:
                rows.release(kvs[i], keep=False)
    assert step.replays == max(steps) and rows.generation > generation  # grew mid-decode


@pytest.mark.slow
async def test_batched_engine_matches_hf(hf_model: Any, chat_prompts: list[list[int]]) -> None:
    eng = EmbeddedEngine(
        EngineConfig(max_batch_size=4, prefill_chunk=64, decode_attention="batched", prefix_cache_mb=64),
        ModelConfig(),
    )
    await eng.start()
    try:
        assert eng.stats()["decode_attention"] == "batched"
        params = [SamplingParams(max_tokens=8 + 6 * i, temperature=0.9, seed=i) for i in range(4)]
        together = await asyncio.gather(
            *(eng.generate(p, sp) for p, sp in zip(chat_prompts, params, strict=True))
        )
        for prompt, c in zip(chat_prompts, together, strict=True):
            ref = hf_logprobs(hf_model, prompt, c.token_ids, 0.9)
            assert max(abs(a - b) for a, b in zip(c.logprobs, ref, strict=True)) < 1e-4
        greedy = await eng.generate(chat_prompts[1], SamplingParams(max_tokens=30, temperature=0))
        expected = hf_model.generate(
            torch.tensor([chat_prompts[1]]),
            attention_mask=torch.ones(1, len(chat_prompts[1]), dtype=torch.long),
            max_new_tokens=30,
            do_sample=False,
            pad_token_id=2,
        )[0, len(chat_prompts[1]) :].tolist()
        assert greedy.token_ids == expected
        # a session's KV leaves its row for the prefix cache and comes back into one
        first = await eng.generate(
            chat_prompts[2], SamplingParams(max_tokens=6, temperature=0), session_id="s"
        )
        follow = chat_prompts[2] + first.token_ids + chat_prompts[0]
        again = await eng.generate(follow, SamplingParams(max_tokens=6, temperature=0), session_id="s")
        fresh = await eng.generate(follow, SamplingParams(max_tokens=6, temperature=0))
        assert again.cached_tokens == len(chat_prompts[2]) + len(first.token_ids) - 1
        assert again.token_ids == fresh.token_ids
        assert eng.stats()["running"] == 0
    finally:
        await eng.stop()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")
async def test_cuda_graph_decoding_matches_hf(hf_model: Any, chat_prompts: list[list[int]]) -> None:
    eng = EmbeddedEngine(EngineConfig(max_batch_size=4), ModelConfig(device="cuda"))
    await eng.start()
    try:
        params = [SamplingParams(max_tokens=8 + 6 * i, temperature=0.9, seed=i) for i in range(4)]
        together = await asyncio.gather(
            *(eng.generate(p, sp) for p, sp in zip(chat_prompts, params, strict=True))
        )
        for prompt, c in zip(chat_prompts, together, strict=True):
            ref = hf_logprobs(hf_model, prompt, c.token_ids, 0.9)
            assert max(abs(a - b) for a, b in zip(c.logprobs, ref, strict=True)) < 1e-3
        stats = eng.stats()
        assert stats["decode_attention"] == "batched" and stats["cuda_graphs"] > 0
    finally:
        await eng.stop()
