"""``coderl bench engine-cuda``: the embedded engine on a GPU against Hugging Face ``generate``.

Each decode mode of the embedded engine, at 1 / 8 / 64 requests in flight, against HF ``generate``
on batches of the same size (left-padded, its default dynamic cache) on the same GPU, same prompts:
- ``graphs``: batched decode attention, decode-only steps replayed as CUDA graphs (the CUDA default);
- ``batched``: batched decode attention, eager;
- ``per_sequence``: one attention call per request and layer (the CPU default; only when asked for,
  ``--modes graphs,batched,per_sequence``: it takes minutes at 64 concurrent).
Every level is warmed up first (for ``graphs`` by running the level once, so graph capture is not
timed; the eager modes by a short run of the level's concurrency).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from coderl.bench.engine import _engine_rate, _hf_generate, _prompts
from coderl.bench.report import machine_info, percentile
from coderl.config import Config
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.params import SamplingParams
from coderl.errors import ConfigError
from coderl.progress import progress_bars

LEVELS = (1, 8, 64)
RANDOM_WEIGHTS_MARKER = "CODERL_RANDOM_WEIGHTS"
"""A file ``scripts/cuda_check.py --save`` leaves in a checkpoint it made with random weights."""
MODES: dict[str, dict[str, Any]] = {
    "graphs": {"decode_attention": "batched", "cuda_graphs": True},
    "batched": {"decode_attention": "batched", "cuda_graphs": False},
    "per_sequence": {"decode_attention": "per_sequence"},
}
"""The engine's decode modes, fastest first (CUDA graphs are the default on a GPU)."""
DEFAULT_MODES = ("graphs", "batched")
"""Measured unless asked otherwise: per_sequence (the CPU's mode) at 64 concurrent takes minutes on a GPU."""


def _requests(concurrency: int) -> int:
    return 4 if concurrency == 1 else 2 * concurrency


async def bench_engine_cuda(
    cfg: Config, quick: bool = False, console: Console | None = None, modes: tuple[str, ...] = DEFAULT_MODES
) -> dict[str, Any]:
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ConfigError(f"unknown decode mode {bad[0] if bad else '(none)'!r}; modes: {', '.join(MODES)}")
    if not torch.cuda.is_available():
        raise ConfigError(
            "coderl bench engine-cuda needs a CUDA GPU and none is visible (torch.cuda.is_available() is "
            "False); on a CPU run 'coderl bench engine'"
        )
    console = console or Console(stderr=True)
    out_len = 32 if quick else 128
    levels = (1, 8) if quick else LEVELS
    model_cfg = cfg.model.model_copy(update={"device": "cuda"})
    batch = max(max(levels), cfg.engine.max_batch_size)
    params = SamplingParams(max_tokens=out_len, temperature=0, ignore_eos=True)
    tok_s: dict[str, dict[str, float]] = {}
    ttft_p50: dict[str, float] = {}
    captured = 0
    model_info: dict[str, Any] = {}
    hf: dict[str, float] = {}
    prompts: list[list[int]] = []
    with progress_bars(console, TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()) as progress:
        bar = progress.add_task("load", total=(len(modes) + 1) * len(levels))
        for mode in modes:
            engine_cfg = cfg.engine.model_copy(update={**MODES[mode], "max_batch_size": batch})
            engine = EmbeddedEngine(engine_cfg, model_cfg, seed=cfg.run.seed)
            await engine.start()
            if not prompts:
                prompts = _prompts(engine.runner.vocab_size, _requests(max(levels)), 48, 400, cfg.run.seed)
            tok_s[mode] = {}
            for c in levels:
                progress.update(bar, description=f"embedded engine ({mode}), {c} concurrent")
                reqs = prompts[: _requests(c)]
                # warm-up: graphs are captured per batch and length bucket, so their warm-up is the
                # level itself; the eager modes only need their kernels and allocator warm
                warm = params if mode == "graphs" else params.model_copy(update={"max_tokens": 8})
                await _engine_rate(engine, reqs if mode == "graphs" else reqs[:c], warm, c)
                rate, ttfts = await _engine_rate(engine, reqs, params, c)
                tok_s[mode][str(c)] = rate
                console.print(f"embedded engine ({mode}), {c} concurrent: {rate:.0f} tok/s")
                if c == max(levels):
                    ttft_p50[mode] = 1000 * percentile(ttfts, 50)
                progress.advance(bar)
            if mode == "graphs":
                captured = int(engine.stats()["cuda_graphs"])
            if not hf:  # the baseline next, on the same loaded model (before the slowest mode)
                model_info = _model_info(engine.runner.model, cfg)
                _hf_levels(engine.runner.model, prompts, levels, out_len, hf, progress, bar, console)
            await engine.stop()
    return {
        "tok_s": tok_s,
        "hf_batched_tok_s": hf,
        "ratio_vs_hf": {str(c): tok_s[modes[0]][str(c)] / hf[str(c)] for c in levels},
        "ratio_mode": modes[0],
        "ttft_p50_ms": ttft_p50,
        "graphs_captured": captured,
        "setup": {
            "output_tokens_per_request": out_len,
            "requests_by_concurrency": {str(c): _requests(c) for c in levels},
            "prompt_tokens": [min(map(len, prompts)), max(map(len, prompts))],
            "dtype": cfg.model.dtype,
            "model": str(cfg.model.path) if cfg.model.path else "SmolLM2-135M-Instruct",
            **model_info,
            "max_batch_size": batch,
            "quick": quick,
        },
        "machine": machine_info(),
    }


def _model_info(model: Any, cfg: Config) -> dict[str, Any]:
    """What the figures were measured on: the architecture, its size, and whether the weights are a
    random initialisation (``scripts/cuda_check.py --save`` leaves a marker; throughput does not
    depend on the weights' values)."""
    import transformers

    path = Path(cfg.model.path) if cfg.model.path else None
    return {
        "architecture": ", ".join(getattr(model.config, "architectures", None) or [type(model).__name__]),
        "parameters": sum(p.numel() for p in model.parameters()),
        "random_weights": bool(path and (path / RANDOM_WEIGHTS_MARKER).exists()),
        "transformers": transformers.__version__,
    }


def _hf_levels(
    model: Any,
    prompts: list[list[int]],
    levels: tuple[int, ...],
    out_len: int,
    hf: dict[str, float],
    progress: Progress,
    bar: Any,
    console: Console,
) -> None:
    """HF ``generate`` on batches of each level's size, over the same requests as the engine."""
    for c in levels:
        progress.update(bar, description=f"HF generate, batches of {c}")
        reqs = prompts[: _requests(c)]
        _hf_generate(model, reqs[:c], out_len)  # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(0, len(reqs), c):
            _hf_generate(model, reqs[i : i + c], out_len)
        torch.cuda.synchronize()
        hf[str(c)] = len(reqs) * out_len / (time.perf_counter() - t0)
        console.print(f"HF generate, batches of {c}: {hf[str(c)]:.0f} tok/s")
        progress.advance(bar)


def _model_line(s: dict[str, Any]) -> str:
    if "parameters" not in s:
        return ""
    weights = (
        ", random weights (`scripts/cuda_check.py --save`; throughput does not depend on their values)"
        if s["random_weights"]
        else ""
    )
    return f" ({s['architecture']}, {s['parameters'] / 1e6:.1f}M parameters{weights})"


def to_markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    s = r["setup"]
    levels = list(r["hf_batched_tok_s"])
    modes = list(r["tok_s"])
    head = " | ".join(f"{c} concurrent" for c in levels)
    rows = "\n".join(
        f"| embedded, {mode} | " + " | ".join(f"{r['tok_s'][mode][c]:.0f}" for c in levels) + " |"
        for mode in modes
    )
    hf = " | ".join(f"{r['hf_batched_tok_s'][c]:.0f}" for c in levels)
    ratio = " | ".join(f"**{r['ratio_vs_hf'][c]:.2f}×**" for c in levels)
    return f"""## Engine on a GPU (`coderl bench engine-cuda`)

Command: `{r.get("command", "coderl bench engine-cuda")}` — {m["cuda"]} ({m.get("cores", "?")} CPU cores), torch
{m["torch"]}, transformers {s.get("transformers", "?")}, {s["dtype"]}; model {s["model"]}{_model_line(s)}. Prompts of {s["prompt_tokens"][0]}–{s["prompt_tokens"][1]} tokens,
{s["output_tokens_per_request"]} output tokens each (greedy, EOS ignored); requests per level
{s["requests_by_concurrency"]}; each level warmed up first (graphs: the whole level once). HF `generate` runs
batches of the level's size (left-padded, its default cache) on the same GPU and prompts.

Output tokens/s:

| | {head} |
|---|{"---|" * len(levels)}
{rows}
| HF `generate`, batched | {hf} |
| embedded ({r["ratio_mode"]}) ÷ HF | {ratio} |

Time to first token at {levels[-1]} concurrent, p50 (ms): {", ".join(f"{k} {v:.0f}" for k, v in r["ttft_p50_ms"].items())}.
CUDA graphs captured: {r["graphs_captured"]}.
"""
