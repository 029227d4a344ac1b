"""The embedded engine on the real default model, checked against an independent HF forward pass."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from coderl.config import EngineConfig, ModelConfig
from coderl.engine import SamplingParams, create_engine
from coderl.engine.embedded import EmbeddedEngine
from coderl.errors import EngineError, EngineUnavailableError, PromptTooLongError
from tests.conftest import hf_logprobs

pytestmark = pytest.mark.slow


async def test_greedy_equals_hf_greedy(
    engine: EmbeddedEngine, hf_model: Any, chat_prompts: list[list[int]]
) -> None:
    prompt = chat_prompts[1]
    c = await engine.generate(prompt, SamplingParams(max_tokens=60, temperature=0))
    ref = hf_model.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        max_new_tokens=60,
        do_sample=False,
        pad_token_id=2,
    )[0, len(prompt) :].tolist()
    assert len(c.token_ids) > 20
    assert c.token_ids == ref
    assert c.finish_reason == ("stop" if ref[-1] == 2 else "length")


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
async def test_logprobs_match_independent_forward(
    engine: EmbeddedEngine, hf_model: Any, chat_prompts: list[list[int]], temperature: float
) -> None:
    prompt = chat_prompts[2]
    c = await engine.generate(prompt, SamplingParams(max_tokens=32, temperature=temperature, seed=5))
    ref = hf_logprobs(hf_model, prompt, c.token_ids, temperature if temperature > 0 else 1.0)
    assert len(c.logprobs) == len(c.token_ids) > 0
    assert max(abs(a - b) for a, b in zip(c.logprobs, ref, strict=True)) < 1e-4


async def test_concurrent_equals_alone_with_fixed_seeds(
    engine: EmbeddedEngine, chat_prompts: list[list[int]]
) -> None:
    params = [SamplingParams(max_tokens=24, temperature=1.0, seed=100 + i) for i in range(len(chat_prompts))]
    alone = [await engine.generate(p, sp) for p, sp in zip(chat_prompts, params, strict=True)]
    together = await asyncio.gather(
        *(engine.generate(p, sp) for p, sp in zip(chat_prompts, params, strict=True))
    )
    for a, b in zip(alone, together, strict=True):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4
    # different seeds give different samples (the seed is really used)
    other = await engine.generate(chat_prompts[1], SamplingParams(max_tokens=24, temperature=1.0, seed=999))
    assert other.token_ids != alone[1].token_ids


async def test_cancel_one_request_leaves_others_intact(
    engine: EmbeddedEngine, chat_prompts: list[list[int]]
) -> None:
    params = SamplingParams(max_tokens=30, temperature=1.0, seed=3, ignore_eos=True)
    reference = await engine.generate(chat_prompts[0], params)
    keep = asyncio.create_task(engine.generate(chat_prompts[0], params))
    doomed = asyncio.create_task(
        engine.generate(chat_prompts[2], SamplingParams(max_tokens=200, ignore_eos=True))
    )
    while engine.stats()["running"] < 2:
        await asyncio.sleep(0.01)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    kept = await keep
    assert kept.token_ids == reference.token_ids
    for _ in range(100):
        if engine.stats()["running"] == 0:
            break
        await asyncio.sleep(0.02)
    assert engine.stats()["running"] == 0 and engine.stats()["in_flight"] == 0


async def test_stop_tokens_and_length(engine: EmbeddedEngine, chat_prompts: list[list[int]]) -> None:
    greedy = await engine.generate(
        chat_prompts[1], SamplingParams(max_tokens=20, temperature=0, ignore_eos=True)
    )
    stop_at = greedy.token_ids[5]
    first = greedy.token_ids.index(stop_at)
    c = await engine.generate(
        chat_prompts[1], SamplingParams(max_tokens=20, temperature=0, stop_token_ids=[stop_at])
    )
    assert c.finish_reason == "stop" and c.stop_token_id == stop_at
    assert c.token_ids == greedy.token_ids[: first + 1]  # the stop token is included
    # the model's EOS ends a completion unless ignore_eos
    done = await engine.generate(chat_prompts[0], SamplingParams(max_tokens=200, temperature=0))
    assert done.finish_reason == "stop" and done.token_ids[-1] in engine.eos_token_ids


async def test_top_k_1_equals_greedy(engine: EmbeddedEngine, chat_prompts: list[list[int]]) -> None:
    greedy = await engine.generate(chat_prompts[3], SamplingParams(max_tokens=16, temperature=0))
    topk = await engine.generate(
        chat_prompts[3], SamplingParams(max_tokens=16, temperature=0.8, top_k=1, seed=1)
    )
    tiny_p = await engine.generate(
        chat_prompts[3], SamplingParams(max_tokens=16, temperature=0.8, top_p=1e-6, seed=2)
    )
    assert topk.token_ids == greedy.token_ids == tiny_p.token_ids


async def test_prefix_cache_reuses_session_kv(
    engine: EmbeddedEngine, hf_model: Any, tokenizer: Any, chat_prompts: list[list[int]]
) -> None:
    params = SamplingParams(max_tokens=12, temperature=0)
    first = await engine.generate(chat_prompts[1], params, session_id="turns")
    assert first.cached_tokens == 0
    follow = tokenizer.encode(
        "\n<|im_start|>user\nNow in one line.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    second_prompt = chat_prompts[1] + first.token_ids + follow
    cached = await engine.generate(
        second_prompt, SamplingParams(max_tokens=12, temperature=0.9, seed=4), session_id="turns"
    )
    engine.cfg = engine.cfg.model_copy(update={"share_prompts": False})  # computed from scratch
    try:
        fresh = await engine.generate(second_prompt, SamplingParams(max_tokens=12, temperature=0.9, seed=4))
    finally:
        engine.cfg = engine.cfg.model_copy(update={"share_prompts": True})
    assert cached.cached_tokens >= len(chat_prompts[1]) + len(first.token_ids) - 1
    assert fresh.cached_tokens == 0
    assert cached.token_ids == fresh.token_ids
    ref = hf_logprobs(hf_model, second_prompt, cached.token_ids, 0.9)
    assert max(abs(a - b) for a, b in zip(cached.logprobs, ref, strict=True)) < 1e-4
    # a rewritten history (not an extension) reuses only the common prefix, and stays exact
    rewritten = chat_prompts[1][:-3] + follow
    c = await engine.generate(rewritten, SamplingParams(max_tokens=8, temperature=0), session_id="turns")
    assert c.cached_tokens == len(chat_prompts[1]) - 3
    ref = hf_logprobs(hf_model, rewritten, c.token_ids)
    assert max(abs(a - b) for a, b in zip(c.logprobs, ref, strict=True)) < 1e-4


async def test_a_prompt_several_sessions_share_is_prefilled_once(
    hf_model: Any, chat_prompts: list[list[int]]
) -> None:
    """A GRPO group: four sessions of one prompt at once. The first prefills it, the others wait for
    it and take its KV; their samples are those of an engine that prefills each (same seeds), exact
    against an independent forward pass. A later session with the same system prompt takes that part."""
    prompt = chat_prompts[2] + chat_prompts[1]  # long enough that half of it is worth sharing
    params = [SamplingParams(max_tokens=16, temperature=1.0, seed=7 + i) for i in range(4)]
    outs = {}
    for share in (True, False):
        eng = EmbeddedEngine(EngineConfig(share_prompts=share), ModelConfig())
        await eng.start()
        try:
            outs[share] = await asyncio.gather(
                *(eng.generate(prompt, p, session_id=f"g{i}") for i, p in enumerate(params))
            )
            stats = eng.stats()
            if share:
                half = len(prompt) // 2  # a prompt that starts the same way (a system prompt), then differs
                later = await eng.generate(prompt[:half] + [prompt[half] + 1, 13, 13], params[0], session_id="o")
                assert later.cached_tokens == half >= 32
        finally:
            await eng.stop()
        shared_tokens = stats["shared_prompt_tokens"]
        assert shared_tokens == (3 * (len(prompt) - 1) if share else 0)
        assert [c.cached_tokens for c in outs[share]] == ([0] + [len(prompt) - 1] * 3 if share else [0] * 4)
    for a, b in zip(outs[True], outs[False], strict=True):
        assert a.token_ids == b.token_ids
        ref = hf_logprobs(hf_model, prompt, a.token_ids, 1.0)
        assert max(abs(x - y) for x, y in zip(a.logprobs, ref, strict=True)) < 1e-4


async def test_prefix_cache_is_lru_bounded() -> None:
    eng = EmbeddedEngine(EngineConfig(prefix_cache_mb=30), ModelConfig())  # ~ two 256-token entries
    await eng.start()
    try:
        for i in range(4):
            await eng.generate(
                [1, 2, 3, 4 + i], SamplingParams(max_tokens=2, temperature=0), session_id=f"s{i}"
            )
        stats = eng.stats()
        assert stats["prefix_cache_mb"] <= 30
        assert eng.has_session("s3") and not eng.has_session("s0")
    finally:
        await eng.stop()


async def test_the_engine_thread_hands_its_free_heap_back_when_it_runs_out_of_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What finished sequences freed stays in the engine thread's glibc arena unless returned."""
    trims: list[str] = []
    monkeypatch.setattr(
        "coderl.engine.scheduler.release_free_memory", lambda: trims.append(threading.current_thread().name)
    )
    eng = EmbeddedEngine(EngineConfig(), ModelConfig())
    await eng.start()
    try:
        await eng.generate([1, 2, 3], SamplingParams(max_tokens=4, temperature=0))
        before = len(trims)
        await eng.generate([1, 2, 4], SamplingParams(max_tokens=4, temperature=0))
        for _ in range(100):  # the thread trims once the request is answered and nothing waits
            if len(trims) > before:
                break
            await asyncio.sleep(0.01)
        assert len(trims) > before and set(trims) == {eng._thread.name if eng._thread else ""}
    finally:
        await eng.stop()


async def test_an_ended_session_lets_go_of_its_kv_but_the_newest_stays_a_donor() -> None:
    """Finished sessions hold at most one cache entry (the newest, for later prompts to share), not
    the whole budget: the main job's validation used to leave 2 GB of dead sessions' KV behind."""
    eng = EmbeddedEngine(EngineConfig(), ModelConfig())
    await eng.start()
    try:
        prompt = list(range(1, 200))
        for i in range(3):
            await eng.generate(prompt + [300 + i], SamplingParams(max_tokens=2, temperature=0), session_id=f"s{i}")
        one_mb = eng.stats()["prefix_cache_mb"] / 3
        assert all(eng.has_session(f"s{i}") for i in range(3))
        await eng.end_session("s0")
        await eng.end_session("s1")
        await eng.end_session("unknown")  # ignored
        await eng.generate([1], SamplingParams(max_tokens=1, temperature=0))  # the inbox is drained in order
        assert not eng.has_session("s0") and eng.has_session("s1") and eng.has_session("s2")
        assert eng.stats()["prefix_cache_mb"] == pytest.approx(2 * one_mb, rel=0.01)
        later = await eng.generate(prompt + [999], SamplingParams(max_tokens=1, temperature=0), session_id="s3")
        assert later.cached_tokens == len(prompt)  # the donor's prompt is shared
    finally:
        await eng.stop()


async def test_update_weights_changes_outputs_and_version(
    engine: EmbeddedEngine, chat_prompts: list[list[int]], tmp_path: Path
) -> None:
    from safetensors.torch import save_file

    params = SamplingParams(max_tokens=16, temperature=0, ignore_eos=True)
    before = await engine.generate(chat_prompts[1], params, session_id="w")
    v0 = engine.policy_version
    original = {k: v.clone() for k, v in engine.runner.model.state_dict().items()}
    perturbed = dict(original)
    perturbed["model.norm.weight"] = original["model.norm.weight"] * -1.0
    assert await engine.update_weights(perturbed) == v0 + 1
    after = await engine.generate(chat_prompts[1], params, session_id="w")
    assert after.policy_version == v0 + 1 and before.policy_version == v0
    assert after.token_ids != before.token_ids
    assert after.cached_tokens == 0  # KV from old weights is dropped
    # from a safetensors file on disk, back to the original weights
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in original.items() if k != "lm_head.weight"}, str(path))
    assert await engine.update_weights(path) == v0 + 2
    restored = await engine.generate(chat_prompts[1], params)
    assert restored.token_ids == before.token_ids


async def test_update_waits_for_running_requests(
    engine: EmbeddedEngine, chat_prompts: list[list[int]]
) -> None:
    state = {k: v.clone() for k, v in engine.runner.model.state_dict().items()}
    v0 = engine.policy_version
    long = asyncio.create_task(
        engine.generate(chat_prompts[0], SamplingParams(max_tokens=24, ignore_eos=True))
    )
    while engine.stats()["running"] == 0:
        await asyncio.sleep(0.005)
    version = await engine.update_weights(state)
    c = await long
    assert c.policy_version == v0 and version == v0 + 1 and len(c.token_ids) == 24


@pytest.mark.parametrize("decode_attention", ["per_sequence", "batched"])
async def test_an_interrupting_update_moves_running_requests_to_the_new_weights(
    hf_model: Any, chat_prompts: list[list[int]], decode_attention: str
) -> None:
    """engine.update_mode=interrupt (partial rollouts): the update applies mid-request; the tokens
    before it are the old weights' samples, the ones after the new weights', each with its version."""
    import copy

    eng = EmbeddedEngine(
        EngineConfig(max_batch_size=4, prefill_chunk=64, update_mode="interrupt", decode_attention=decode_attention),
        ModelConfig(),
    )
    await eng.start()
    try:
        prompt = chat_prompts[2]
        original = {k: v.clone() for k, v in eng.runner.model.state_dict().items()}
        perturbed = {**original, "model.norm.weight": original["model.norm.weight"] * 0.5}
        seen: list[int] = []
        params = SamplingParams(max_tokens=24, ignore_eos=True, seed=3)
        long = asyncio.create_task(eng.generate_streaming(prompt, params, lambda ids, _: seen.extend(ids)))
        while len(seen) < 6:
            await asyncio.sleep(0.002)
        v = await eng.update_weights(perturbed)
        c = await long
        k = c.token_versions.index(v)  # the first token the new weights sampled
        assert len(c.token_ids) == 24 and c.policy_version == v - 1 and 6 <= k < 24
        assert c.token_versions == [v - 1] * k + [v] * (24 - k)
        assert eng.stats()["interrupted_requests"] == 1
        new_model = copy.deepcopy(hf_model)
        with torch.no_grad():
            new_model.model.norm.weight.mul_(0.5)
        old_ref, new_ref = hf_logprobs(hf_model, prompt, c.token_ids), hf_logprobs(new_model, prompt, c.token_ids)
        assert max(abs(a - b) for a, b in zip(c.logprobs[:k], old_ref[:k], strict=True)) < 1e-4
        assert max(abs(a - b) for a, b in zip(c.logprobs[k:], new_ref[k:], strict=True)) < 1e-4
        assert max(abs(a - b) for a, b in zip(c.logprobs[k:], old_ref[k:], strict=True)) > 1e-2  # it did switch
        alone = await eng.generate(prompt, SamplingParams(max_tokens=4, ignore_eos=True, seed=3))
        assert alone.token_versions == [] and alone.policy_version == v  # one version: no per-token list
    finally:
        await eng.stop()


@pytest.mark.parametrize("decode", ["per_sequence", "padded_steps"])
async def test_released_weights_leave_memory_until_a_full_update_brings_them_back(
    chat_prompts: list[list[int]], decode: str
) -> None:
    """padded_steps: batched rows and the CUDA-graph path's padded decode steps, run eagerly (no GPU
    here): the release gives the engine fresh ones, since captured graphs read the old storage."""
    from coderl.engine.cuda_graphs import DecodeGraphs
    from coderl.memory import rss_mb

    attention = "batched" if decode == "padded_steps" else "per_sequence"
    eng = EmbeddedEngine(EngineConfig(max_batch_size=4, decode_attention=attention), ModelConfig(device="cpu"))
    await eng.start()
    try:
        if decode == "padded_steps":
            assert eng._sched.rows is not None
            eng._sched.decode_step = DecodeGraphs(eng.runner, eng._sched.rows, capture=False)
        params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
        before = await eng.generate(chat_prompts[1], params)
        state = {k: v.clone() for k, v in eng.runner.model.state_dict().items()}
        weight_mb = sum(p.numel() * p.element_size() for p in eng.runner.model.parameters()) / 2**20
        running = asyncio.create_task(eng.generate(chat_prompts[0], SamplingParams(max_tokens=24, ignore_eos=True)))
        for _ in range(2000):
            if eng.stats()["running"] or running.done():
                break
            await asyncio.sleep(0.005)
        rss = rss_mb()
        assert await eng.release_weights()
        assert len((await running).token_ids) == 24  # what was generating finished first
        assert eng.stats()["weights_released"] and all(p.numel() == 0 for p in eng.runner.model.parameters())
        if decode == "padded_steps":
            assert isinstance(eng._sched.decode_step, DecodeGraphs) and len(eng._sched.decode_step._graphs) == 0
            assert eng._sched.rows is not None and eng._sched.rows.data is None  # the batch's KV rows went too
        assert rss - rss_mb() > 0.5 * weight_mb, (rss, rss_mb(), weight_mb)  # back to the system
        with pytest.raises(EngineError, match="released"):
            await eng.generate(chat_prompts[1], params)
        with pytest.raises(EngineError, match="lack"):  # a partial update cannot bring them back
            await eng.update_weights({"model.norm.weight": state["model.norm.weight"]})
        assert eng.stats()["weights_released"]
        version = await eng.update_weights(state)
        assert not eng.stats()["weights_released"] and eng.policy_version == version
        assert (await eng.generate(chat_prompts[1], params)).token_ids == before.token_ids
    finally:
        await eng.stop()


async def test_bad_weights_are_rejected_without_change(engine: EmbeddedEngine) -> None:
    v0 = engine.policy_version
    with pytest.raises(EngineError, match="names the model does not"):
        await engine.update_weights({"nope.weight": torch.zeros(1)})
    with pytest.raises(EngineError, match="shape"):
        sd = {k: v for k, v in engine.runner.model.state_dict().items()}
        sd["model.norm.weight"] = torch.zeros(3)
        await engine.update_weights(sd)
    with pytest.raises(EngineError, match="no safetensors"):
        await engine.update_weights("/nonexistent/ckpt")
    assert engine.policy_version == v0


async def test_bad_requests_raise_clear_errors(engine: EmbeddedEngine) -> None:
    with pytest.raises(EngineError, match="empty"):
        await engine.generate([], SamplingParams())
    # at the model's own limit, raising engine.max_model_len is no advice: it says so
    assert engine.max_model_len == 8192
    with pytest.raises(PromptTooLongError, match=r"8192 tokens is the model's own limit, which engine\.max_model_len"):
        await engine.generate([1] * (engine.max_model_len + 1), SamplingParams())
    with pytest.raises(EngineError, match="outside the vocabulary"):
        await engine.generate([1, 10**7], SamplingParams())
    fresh = EmbeddedEngine(EngineConfig(), ModelConfig())
    with pytest.raises(EngineUnavailableError, match="not started"):
        await fresh.generate([1], SamplingParams())


async def test_back_pressure_bounds_outstanding_requests(chat_prompts: list[list[int]]) -> None:
    eng = EmbeddedEngine(EngineConfig(max_batch_size=1, max_queued=1), ModelConfig())
    await eng.start()
    try:
        params = SamplingParams(max_tokens=12, ignore_eos=True, temperature=0)
        tasks = [asyncio.create_task(eng.generate(chat_prompts[0], params)) for _ in range(4)]
        peak = 0
        while not all(t.done() for t in tasks):
            s = eng.stats()
            peak = max(peak, s["running"] + s["waiting"])
            assert s["running"] <= 1
            await asyncio.sleep(0.005)
        assert peak <= 2  # batch of 1 + queue of 1; the other callers wait in generate()
        results = [t.result() for t in tasks]
        assert all(r.token_ids == results[0].token_ids for r in results)
    finally:
        await eng.stop()


async def test_a_request_whose_kv_cannot_be_placed_fails_alone_and_a_failed_loop_fails_all(
    chat_prompts: list[list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    eng = EmbeddedEngine(EngineConfig(decode_attention="batched"), ModelConfig())
    await eng.start()
    try:
        assert eng._sched.rows is not None
        real_bind = eng._sched.rows.bind
        monkeypatch.setattr(eng._sched.rows, "bind", lambda kv: (_ for _ in ()).throw(RuntimeError("no room")))
        with pytest.raises(EngineError, match="could not place the request's KV: RuntimeError"):
            await eng.generate(chat_prompts[0], SamplingParams(max_tokens=4))
        monkeypatch.setattr(eng._sched.rows, "bind", real_bind)
        assert len((await eng.generate(chat_prompts[0], SamplingParams(max_tokens=4))).token_ids) == 4

        def broken() -> None:
            raise AssertionError("a bug in the loop")

        monkeypatch.setattr(eng._sched, "_drop_cancelled", broken)  # the loop itself fails: nobody may hang
        with pytest.raises(EngineUnavailableError, match="engine thread failed: AssertionError"):
            await asyncio.wait_for(eng.generate(chat_prompts[0], SamplingParams(max_tokens=4)), 60)
        assert not await eng.healthy()
        with pytest.raises(EngineUnavailableError):
            await eng.generate(chat_prompts[0], SamplingParams())
    finally:
        await eng.stop()


async def test_stop_fails_outstanding_requests(chat_prompts: list[list[int]]) -> None:
    eng = create_engine(EngineConfig(), ModelConfig())
    await eng.start()
    task = asyncio.create_task(eng.generate(chat_prompts[0], SamplingParams(max_tokens=500, ignore_eos=True)))
    await asyncio.sleep(0.2)
    await eng.stop()
    with pytest.raises(EngineUnavailableError):
        await task
    with pytest.raises(EngineUnavailableError):
        await eng.generate(chat_prompts[0], SamplingParams())


async def test_bfloat16_engine_runs_close_to_fp32(hf_model: Any, chat_prompts: list[list[int]]) -> None:
    eng = EmbeddedEngine(EngineConfig(), ModelConfig(dtype="bfloat16"))
    await eng.start()
    try:
        c = await eng.generate(chat_prompts[1], SamplingParams(max_tokens=8, temperature=1.0, seed=0))
        assert eng.runner.dtype == torch.bfloat16
        ref = hf_logprobs(hf_model, chat_prompts[1], c.token_ids)
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref, strict=True)) < 0.5
    finally:
        await eng.stop()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")
async def test_cuda_engine_matches_cpu_reference(hf_model: Any, chat_prompts: list[list[int]]) -> None:
    eng = EmbeddedEngine(EngineConfig(), ModelConfig(device="cuda"))
    await eng.start()
    try:
        c = await eng.generate(chat_prompts[1], SamplingParams(max_tokens=16, temperature=1.0, seed=0))
        ref = hf_logprobs(hf_model, chat_prompts[1], c.token_ids)
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref, strict=True)) < 1e-3
    finally:
        await eng.stop()


async def test_start_up_line_names_the_thread_count(caplog: pytest.LogCaptureFixture) -> None:
    """A greedy run's bits depend on the torch thread count, so the engine's start-up line says it."""
    caplog.set_level("INFO", logger="coderl.engine.embedded")
    eng = EmbeddedEngine(EngineConfig(max_batch_size=2), ModelConfig())
    await eng.start()
    try:
        line = next(r.getMessage() for r in caplog.records if "decode attention" in r.getMessage())
    finally:
        await eng.stop()
    assert f", {torch.get_num_threads()} torch threads)" in line


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prefill_attends_through_the_flash_kernel(checkpoint: Path, hf_model: Any, dtype: torch.dtype) -> None:
    """A fresh prompt and a long continuation of it (more than FEW new tokens over a cache) attend
    through SDPA's flash kernel on the CPU, never its math kernel (which copies bf16 to float32 and
    builds every score: 7-14x slower per layer), and their logits are the HF forward's."""
    from torch.profiler import ProfilerActivity, profile

    from coderl.checkpoint import load_model
    from coderl.engine.kv_cache import SequenceKV
    from coderl.engine.runner import FEW, Chunk, ModelRunner

    runner = ModelRunner(load_model(checkpoint, dtype, "cpu"))
    ids = torch.randint(200, 40000, (90 + FEW + 8,), generator=torch.Generator().manual_seed(3)).tolist()
    kv = SequenceKV(runner.layout())
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        runner.forward([Chunk(kv, ids[:90], want_logits=True)])  # past 0: causal
        last = runner.forward([Chunk(kv, ids[90:], want_logits=True)])[0]  # past 90: a mask
    ops = {e.key for e in prof.key_averages()}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in ops
    assert "aten::_scaled_dot_product_attention_math" not in ops
    with torch.no_grad():
        ref = hf_model(torch.tensor([ids])).logits[0, -1].float()
    assert (last.float() - ref).abs().max().item() < (1e-3 if dtype == torch.float32 else 0.5)
