"""``coderl bench engine``: the embedded engine against Hugging Face ``generate`` on the same prompts.

All measured in one process, one after another (one engine thread alive at a time, and HF
``generate`` last, so no two torch thread pools share the cores), so the ratios compare like with like:
- ``tok_s[c]``: output tokens/s with ``c`` requests in flight (mixed prompt lengths, fixed output length);
- ``sequential_tok_s``: HF ``generate`` one request at a time; ``batched_tok_s``: HF ``generate`` on the
  8-request batch, left-padded (the practical ceiling on a CPU);
- TTFT p50 / p99 over the requests of the 8-concurrent run;
- ``prefix_cache_speedup``: time to first token of the fifth turn of a 5-turn conversation (about 2k
  tokens of context, a few hundred new per turn) without the session prefix cache / with it;
- ``other_mode_tok_s``: the top two levels again with the other decode attention (``batched`` when the
  engine ran ``per_sequence``, and the reverse), on a second engine over the same prompts.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

from coderl.bench.report import machine_info, percentile
from coderl.checkpoint import load_model, torch_device, torch_dtype
from coderl.config import Config
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.params import SamplingParams
from coderl.progress import progress_bars

CONCURRENCY = (1, 4, 8, 16)


def _prompts(vocab: int, n: int, lo: int, hi: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(200, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


async def bench_engine(cfg: Config, quick: bool = False, console: Console | None = None) -> dict[str, Any]:
    console = console or Console(stderr=True)
    out_len = 16 if quick else 64
    engine = EmbeddedEngine(cfg.engine, cfg.model, seed=cfg.run.seed)
    await engine.start()
    vocab = engine.runner.vocab_size
    params = SamplingParams(max_tokens=out_len, temperature=0, ignore_eos=True)
    levels = (1, 4, 8) if quick else CONCURRENCY
    n_req = {c: (2 if quick else 4) if c == 1 else (c if quick else 2 * c) for c in levels}
    prompts = _prompts(vocab, max(n_req.values()), 32 if quick else 48, 128 if quick else 400, cfg.run.seed)
    steps = len(levels) + 4
    tok_s: dict[str, float] = {}
    ttfts: list[float] = []
    with progress_bars(console, TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()) as progress:
        bar = progress.add_task("warm-up", total=steps)
        await engine.generate(prompts[0][:16], SamplingParams(max_tokens=4, ignore_eos=True))
        for c in levels:
            progress.update(bar, description=f"engine, {c} concurrent")
            rate, run_ttfts = await _engine_rate(engine, prompts[: n_req[c]], params, c)
            tok_s[str(c)] = rate
            if c == 8:
                ttfts = run_ttfts
            progress.advance(bar)
        progress.update(bar, description="5-turn conversation, prefix cache on / off")
        turns = await _prefix_turns(engine, vocab, cfg.run.seed, quick)
        progress.advance(bar)
        mode = engine.stats()["decode_attention"]
        # one torch thread pool at a time: a live engine thread keeps its OpenMP team, and a process
        # holding more OpenMP threads than cores runs every team slower (coderl.threads)
        await engine.stop()
        other = "batched" if mode == "per_sequence" else "per_sequence"
        progress.update(bar, description=f"engine with {other} decode attention")
        alt = EmbeddedEngine(
            cfg.engine.model_copy(update={"decode_attention": other}), cfg.model, seed=cfg.run.seed
        )
        await alt.start()
        await alt.generate(prompts[0][:16], SamplingParams(max_tokens=4, ignore_eos=True))
        other_tok_s = {}
        for c in levels[-2:]:
            other_tok_s[str(c)] = (await _engine_rate(alt, prompts[: n_req[c]], params, c))[0]
        await alt.stop()
        progress.advance(bar)
        progress.update(bar, description="HF generate, sequential")
        # a stock Hugging Face model of the same checkpoint and dtype: the engine's own has its float32
        # linear layers packed for oneDNN (engine.pack_weights), which is the engine's doing, not HF's
        assert engine.checkpoint is not None  # set when it started
        model = load_model(engine.checkpoint, torch_dtype(cfg.model.dtype), torch_device(cfg.model.device))
        seq = prompts[: n_req[1]]
        t0 = time.perf_counter()
        for p in seq:
            _hf_generate(model, [p], out_len)
        sequential = len(seq) * out_len / (time.perf_counter() - t0)
        progress.advance(bar)
        progress.update(bar, description="HF generate, batched (8)")
        batch = prompts[:8]
        t0 = time.perf_counter()
        _hf_generate(model, batch, out_len)
        batched = len(batch) * out_len / (time.perf_counter() - t0)
        progress.advance(bar)
    if "8" not in tok_s:
        tok_s["8"] = float("nan")
    return {
        "tok_s": tok_s,
        "sequential_tok_s": sequential,
        "batched_tok_s": batched,
        "ratio_vs_sequential_8": tok_s["8"] / sequential,
        "ratio_vs_batched_8": tok_s["8"] / batched,
        "ttft_p50_ms": 1000 * percentile(ttfts, 50),
        "ttft_p99_ms": 1000 * percentile(ttfts, 99),
        "prefix_cache_speedup": turns["off"][-1] / turns["on"][-1],
        "turn_ttft_ms": {k: [1000 * t for t in turns[k]] for k in ("off", "on")},
        "turn_context_tokens": turns["context"],
        "decode_attention": mode,
        "other_mode": other,
        "other_mode_tok_s": other_tok_s,
        "setup": {
            "output_tokens_per_request": out_len,
            "requests_by_concurrency": {str(c): n for c, n in n_req.items()},
            "prompt_tokens": [min(map(len, prompts)), max(map(len, prompts))],
            "dtype": cfg.model.dtype,
            "max_batch_size": cfg.engine.max_batch_size,
            "prefill_chunk": cfg.engine.prefill_chunk,
            "quick": quick,
        },
        "machine": machine_info(),
    }


async def _engine_rate(
    engine: EmbeddedEngine, prompts: list[list[int]], params: SamplingParams, concurrency: int
) -> tuple[float, list[float]]:
    gate = asyncio.Semaphore(concurrency)
    ttfts: list[float] = []
    tokens = 0

    async def one(p: list[int]) -> None:
        nonlocal tokens
        async with gate:
            c = await engine.generate(p, params)
        ttfts.append(c.ttft_s)
        tokens += len(c.token_ids)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(p) for p in prompts))
    return tokens / (time.perf_counter() - t0), ttfts


def _hf_generate(model: Any, prompts: list[list[int]], out_len: int) -> None:
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), 2, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):  # left padding, as HF generate requires for decoder-only models
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    with torch.inference_mode():
        model.generate(
            ids.to(model.device),
            attention_mask=mask.to(model.device),
            max_new_tokens=out_len,
            min_new_tokens=out_len,
            do_sample=False,
            pad_token_id=2,
        )


async def _prefix_turns(engine: EmbeddedEngine, vocab: int, seed: int, quick: bool) -> dict[str, list[Any]]:
    """TTFT per turn of a 5-turn conversation, with the session prefix cache and without it."""
    rng = random.Random(seed + 1)
    new_per_turn = 100 if quick else 400
    reply = 8 if quick else 32
    user_turns = [[rng.randrange(200, vocab) for _ in range(new_per_turn)] for _ in range(5)]
    params = SamplingParams(max_tokens=reply, temperature=0, ignore_eos=True)
    result: dict[str, list[Any]] = {"on": [], "off": [], "context": []}
    for mode in ("off", "on"):
        history: list[int] = []
        session = f"bench-{mode}-{time.monotonic_ns()}" if mode == "on" else None
        for turn in user_turns:
            history = history + turn
            c = await engine.generate(history, params, session_id=session)
            result[mode].append(c.ttft_s)
            if mode == "on":
                result["context"].append(len(history))
            history = history + c.token_ids
    return result


def to_markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    s = r["setup"]
    rows = "\n".join(f"| {c} | {v:.1f} |" for c, v in r["tok_s"].items())
    mode, other = r.get("decode_attention", "per_sequence"), r.get("other_mode", "batched")
    rows += "".join(
        f"\n| {c}, `engine.decode_attention={other}` | {v:.1f} ({v / r['tok_s'][c]:.2f}× {mode}) |"
        for c, v in r.get("other_mode_tok_s", {}).items()
    )
    on, off = r["turn_ttft_ms"]["on"], r["turn_ttft_ms"]["off"]
    turns = "\n".join(
        f"| {i + 1} | {ctx} | {a:.0f} | {b:.0f} | {a / b:.2f}× |"
        for i, (ctx, a, b) in enumerate(zip(r["turn_context_tokens"], off, on, strict=True))
    )
    return f"""## Engine (`coderl bench engine`)

Command: `{r.get("command", "coderl bench engine")}` — {m["cpu"]}, {m["cores"]} cores, torch {m["torch"]}
({m["torch_threads"]} threads), {s["dtype"]}, SmolLM2-135M-Instruct. Prompts of {s["prompt_tokens"][0]}–{s["prompt_tokens"][1]}
tokens, {s["output_tokens_per_request"]} output tokens each (greedy, EOS ignored); requests per level
{s["requests_by_concurrency"]}. Decode attention {r.get("decode_attention", "per_sequence")} (the CPU default)
unless a row names the other.

| concurrent requests | output tok/s |
|---|---|
{rows}

| baseline (same prompts) | tok/s | embedded engine at 8 concurrent ÷ baseline |
|---|---|---|
| HF `generate`, sequential | {r["sequential_tok_s"]:.1f} | **{r["ratio_vs_sequential_8"]:.2f}×** (target ≥ 3×) |
| HF `generate`, batched (8, left-padded) | {r["batched_tok_s"]:.1f} | **{r["ratio_vs_batched_8"]:.2f}×** (target ≥ 0.8×) |

Time to first token at 8 concurrent: p50 {r["ttft_p50_ms"]:.0f} ms, p99 {r["ttft_p99_ms"]:.0f} ms.

5-turn conversation, time to first token per turn (ms):

| turn | context tokens | prefix cache off | on | speedup |
|---|---|---|---|---|
{turns}

`prefix_cache_speedup` (fifth turn): **{r["prefix_cache_speedup"]:.2f}×** (target ≥ 3×).
"""
