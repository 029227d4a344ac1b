"""``coderl bench dtype``: float32 against bfloat16 on this machine, side by side, what ``dtype:
auto`` picks here (:mod:`coderl.hardware`), and float32's two CPU kernels: MKL's sgemm (PyTorch's
``F.linear``) and oneDNN with the weights packed once (:mod:`coderl.engine.packed`, the engine's
default in float32).

Two measurements per variant: the matmuls of SmolLM2-135M's projection shapes (in this process, at a
decode step's rows and at a prefill piece's), and the embedded engine's greedy decode rate with the
config's engine settings (each figure a fresh process, ``python -m coderl.bench.load rate``, the
variants alternating over the rounds so drift on a noisy machine hits each). Ratios are bfloat16 ÷
float32 (the engine's float32: packed where it can be) and packed ÷ MKL.

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
from coderl.engine.packed import PackedLinear, can_pack
from coderl.hardware import auto_dtype, native_bf16_cpu_flag
from coderl.progress import progress_bars

DTYPES = ("float32", "bfloat16")
ENGINE_VARIANTS = {"float32": ("float32", True), "float32_mkl": ("float32", False), "bfloat16": ("bfloat16", True)}
"""Engine runs: name -> (model.dtype, engine.pack_weights); packing applies to float32 on the CPU only."""
SHAPES = {"q/o": (576, 576), "k/v": (576, 192), "gate/up": (576, 1536), "down": (1536, 576), "vocab": (576, 49152)}
"""SmolLM2-135M's projections: (in, out) features."""


def matmul_ms(rows: int, shape: tuple[int, int], dtype: str, reps: int, packed: bool = False) -> float:
    """Milliseconds of one ``[rows, in] @ [in, out]`` in ``dtype`` (the best of ``reps``); ``packed``:
    through a :class:`PackedLinear` (float32 only) instead of ``F.linear``."""
    import torch

    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, shape[0], generator=gen).to(dt)
    w = (torch.randn(shape[1], shape[0], generator=gen) * 0.05).to(dt)
    layer = torch.nn.Linear(shape[0], shape[1], bias=False, dtype=dt)
    layer.weight.data = w
    fn = PackedLinear(layer) if packed else (lambda t: torch.nn.functional.linear(t, w))
    best = float("inf")
    with torch.inference_mode():
        fn(x)
        for _ in range(reps):
            t = time.perf_counter()
            fn(x)
            best = min(best, time.perf_counter() - t)
    return best * 1e3


def bench_dtype(cfg: Config, quick: bool = False, console: Console | None = None) -> dict[str, Any]:
    """The figures of the module doc for ``cfg``'s engine and model (its dtype replaced by each)."""
    import torch

    console = console or Console(stderr=True)
    rounds = 1 if quick else 2
    row_counts = {"decode (24 rows)": 24, "prefill (512 rows)": 512}
    packs = can_pack(torch.device("cpu"), torch.float32)
    variants = {k: v for k, v in ENGINE_VARIANTS.items() if packs or k != "float32_mkl"}
    matmuls: dict[str, dict[str, float]] = {}
    engine: dict[str, list[float]] = {v: [] for v in variants}
    requests, out_len = (8, 16) if quick else (24, 96)
    with progress_bars(console, name="bench dtype") as progress:
        bar = progress.add_task("matmuls, then engine runs", total=len(row_counts) + rounds * len(variants), info="")
        for label, rows in row_counts.items():
            reps = 3 if quick else 10
            matmuls[label] = {d: sum(matmul_ms(rows, s, d, reps) for s in SHAPES.values()) for d in DTYPES}
            if packs:
                matmuls[label]["float32_packed"] = sum(matmul_ms(rows, s, "float32", reps, True) for s in SHAPES.values())
            progress.advance(bar)
        for _ in range(rounds):
            for name, (dtype, pack) in variants.items():
                spec = rate_spec(cfg, requests, requests, out_len, dtype=dtype)
                spec["config"]["engine"]["pack_weights"] = pack
                engine[name].append(_measure(spec, dict(os.environ)))
                progress.advance(bar)
    rates = {d: sum(v) / len(v) for d, v in engine.items()}
    return {
        "auto_picks": auto_dtype(cfg.model.device),
        "native_bf16_flag": native_bf16_cpu_flag(),
        "matmul_ms": matmuls,
        "matmul_ratio": {k: v["bfloat16"] / v["float32"] for k, v in matmuls.items()},
        "packed_matmul_ratio": {k: v["float32_packed"] / v["float32"] for k, v in matmuls.items() if "float32_packed" in v},
        "engine_tok_s": rates,
        "engine_runs": engine,
        "engine_ratio": rates["bfloat16"] / rates["float32"],
        "engine_packed_speedup": rates["float32"] / rates["float32_mkl"] if "float32_mkl" in rates else None,
        "setup": {"requests": requests, "out_len": out_len, "rounds": rounds, "packs": packs,
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
    packed = ""
    if r.get("engine_packed_speedup") is not None:
        packed_rows = "\n".join(
            f"| matmuls, {label}: the five projections, ms | {v['float32']:.2f} | {v['float32_packed']:.2f} | "
            f"**{r['packed_matmul_ratio'][label]:.2f}×** |"
            for label, v in r["matmul_ms"].items()
        )
        packed = f"""
float32's two CPU kernels: MKL's sgemm (`F.linear`; the engine with `engine.pack_weights=false`) and
oneDNN with the weights packed once (the engine's default in float32, what the table above's float32
engine ran):

| measure | MKL | oneDNN packed | packed ÷ MKL |
|---|---|---|---|
{packed_rows}
| engine greedy decode, tokens/s | {e["float32_mkl"]:.1f} | {e["float32"]:.1f} | **{r["engine_packed_speedup"]:.2f}×** (speed-up) |
"""
    return f"""## float32 against bfloat16 on this machine (`coderl bench dtype`)

Command: `{r.get("command", "coderl bench dtype")}` — {m["cpu"]}, {m["cores"]} cores, torch {m["torch"]}.
bfloat16 instruction flag: **{flag}**; `dtype: auto` picks **{r["auto_picks"]}** here. Matmuls: SmolLM2-135M's
q/o, k/v, gate/up, down and vocabulary projections, one each, best of several (float32 through
`F.linear`). Engine: greedy decode of {s["requests"]} requests at once (prompts of 48-400 tokens,
{s["out_len"]} tokens out each), the config's engine settings (`batch_invariant={s["batch_invariant"]}`,
`speculate={s["speculate"]}`), each figure a fresh process, mean of {s["rounds"]} alternating rounds.

| measure | float32 | bfloat16 | bfloat16 ÷ float32 |
|---|---|---|---|
{rows}
| engine greedy decode, tokens/s | {e["float32"]:.1f} | {e["bfloat16"]:.1f} | **{r["engine_ratio"]:.2f}×** |
{packed}"""
