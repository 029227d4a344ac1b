"""``coderl bench dtype``: float32 against bfloat16 on this machine, side by side, and what
``dtype: auto`` picks here (:mod:`coderl.hardware`).

Two measurements per dtype: the matmuls of SmolLM2-135M's projection shapes (in this process, at a
decode step's rows and at a prefill piece's), and the embedded engine's greedy decode rate with the
config's engine settings (each figure a fresh process, ``python -m coderl.bench.load rate``, the dtypes
alternating over the rounds so drift on a noisy machine hits both). Ratios are bfloat16 ÷ float32.

Owns: the measurement and its report. Must not: choose the dtype (that is :mod:`coderl.hardware`'s).
"""

from __future__ import annotations

import os
import time
from typing import Any

from rich.console import Console

from coderl.bench.load import _measure, rate_spec
from coderl.bench.report import machine_info
from coderl.config import Config
from coderl.hardware import auto_dtype, native_bf16_cpu_flag
from coderl.progress import progress_bars

DTYPES = ("float32", "bfloat16")
SHAPES = {"q/o": (576, 576), "k/v": (576, 192), "gate/up": (576, 1536), "down": (1536, 576), "vocab": (576, 49152)}
"""SmolLM2-135M's projections: (in, out) features."""


def matmul_ms(rows: int, shape: tuple[int, int], dtype: str, reps: int) -> float:
    """Milliseconds of one ``[rows, in] @ [in, out]`` in ``dtype`` (the best of ``reps``)."""
    import torch

    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, shape[0], generator=gen).to(dt)
    w = (torch.randn(shape[1], shape[0], generator=gen) * 0.05).to(dt)
    torch.nn.functional.linear(x, w)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        torch.nn.functional.linear(x, w)
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def bench_dtype(cfg: Config, quick: bool = False, console: Console | None = None) -> dict[str, Any]:
    """The figures of the module doc for ``cfg``'s engine and model (its dtype replaced by each)."""
    console = console or Console(stderr=True)
    rounds = 1 if quick else 2
    row_counts = {"decode (24 rows)": 24, "prefill (512 rows)": 512}
    matmuls: dict[str, dict[str, float]] = {}
    engine: dict[str, list[float]] = {d: [] for d in DTYPES}
    with progress_bars(console, name="bench dtype") as progress:
        bar = progress.add_task("matmuls, then engine runs", total=len(row_counts) + rounds * len(DTYPES), info="")
        for label, rows in row_counts.items():
            matmuls[label] = {
                d: sum(matmul_ms(rows, s, d, 3 if quick else 10) for s in SHAPES.values()) for d in DTYPES
            }
            progress.advance(bar)
        for _ in range(rounds):
            for dtype in DTYPES:
                n = 8 if quick else 24
                spec = rate_spec(cfg, n, n, 16 if quick else 48, dtype=dtype)
                engine[dtype].append(_measure(spec, dict(os.environ)))
                progress.advance(bar)
    rates = {d: sum(v) / len(v) for d, v in engine.items()}
    return {
        "auto_picks": auto_dtype(cfg.model.device),
        "native_bf16_flag": native_bf16_cpu_flag(),
        "matmul_ms": matmuls,
        "matmul_ratio": {k: v["bfloat16"] / v["float32"] for k, v in matmuls.items()},
        "engine_tok_s": rates,
        "engine_runs": engine,
        "engine_ratio": rates["bfloat16"] / rates["float32"],
        "setup": {"requests": 8 if quick else 24, "out_len": 16 if quick else 48, "rounds": rounds,
                  "batch_invariant": cfg.engine.batch_invariant, "speculate": cfg.engine.speculate, "quick": quick},
        "machine": machine_info(),
    }  # fmt: skip


def to_markdown(r: dict[str, Any]) -> str:
    m, s = r["machine"], r["setup"]
    rows = "\n".join(
        f"| matmuls, {label}: the five projections, ms | {v['float32']:.2f} | {v['bfloat16']:.2f} | "
        f"**{r['matmul_ratio'][label]:.2f}×** |"
        for label, v in r["matmul_ms"].items()
    )
    e = r["engine_tok_s"]
    flag = r["native_bf16_flag"] or "none"
    return f"""## float32 against bfloat16 on this machine (`coderl bench dtype`)

Command: `{r.get("command", "coderl bench dtype")}` — {m["cpu"]}, {m["cores"]} cores, torch {m["torch"]}.
bfloat16 instruction flag: **{flag}**; `dtype: auto` picks **{r["auto_picks"]}** here. Matmuls: SmolLM2-135M's
q/o, k/v, gate/up, down and vocabulary projections, one each, best of several. Engine: greedy decode
of {s["requests"]} requests at once ({s["out_len"]} tokens each), the config's engine settings
(`batch_invariant={s["batch_invariant"]}`, `speculate={s["speculate"]}`), each figure a fresh process,
mean of {s["rounds"]} alternating rounds.

| measure | float32 | bfloat16 | bfloat16 ÷ float32 |
|---|---|---|---|
{rows}
| engine greedy decode, tokens/s | {e["float32"]:.1f} | {e["bfloat16"]:.1f} | **{r["engine_ratio"]:.2f}×** |
"""
