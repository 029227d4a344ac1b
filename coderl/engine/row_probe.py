"""Measure, on this machine, at how few rows a linear layer gives each row the same bits.

A batch-invariant step (``engine.batch_invariant``) runs a decoding token's projections together with
whatever else shares the step, so a row must come out the same bits at every row count the step may
hand the kernel. Which counts do depends on the CPU and the kernel library, not on the model: on an
AVX2 CPU (AMD EPYC, Zen 3) oneDNN gave a row the same bits from 1 row up, in float32 (packed) and
bfloat16 alike; on an AVX-512 CPU (AMD EPYC, Zen 4) a lone row of the MLP's down projection (1,536
inputs) took another kernel and other bits in both dtypes, while 2 rows and more matched; MKL's float32
differs below 4 (1 thread) or 12 (2 threads). So the engine measures it when it starts: each distinct
weight shape, with the model's own layer (packed or not) and the thread count it runs with, on random
rows, the same rows alone, as a prefix, and moved to another place in the call.

Owns: the probe and its answer (the fewest rows to pad a segment to). Must not: change any kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import torch

Linear = Callable[[torch.Tensor], torch.Tensor]

CANDIDATES = (1, 2, 4, 8, 12, 16, 32)
"""Paddings tried, fewest first: a segment shorter than the answer is padded with zero rows."""


def probe_counts(block: int) -> list[int]:
    """The row counts a probe tries for segments of at most ``block`` rows: every count up to 34 (the
    small counts where kernels switch), then a spread up to ``block``."""
    counts = list(range(1, min(block, 34) + 1))
    counts += [n for n in (48, 64, 100, 127, 128, 255, 256, 513, 1000, 2048) if 34 < n <= block]
    if block not in counts:
        counts.append(block)
    return counts


SMALL_ROWS = 64
"""Rows a small count's probe covers (in calls of that many rows each): a kernel that rounds only some
rows otherwise (bfloat16 output) shows in a few of them."""


def _rows_mismatch(layer: Linear, x: torch.Tensor, whole: torch.Tensor, count: int) -> bool:
    """Whether rows of ``x`` come out other bits in calls of ``count`` rows than they did among all of
    ``x``'s rows (``whole``): the first :data:`SMALL_ROWS` rows in consecutive calls of ``count`` where it
    is small, else the first ``count`` rows and ``count`` rows from the middle."""
    n = x.shape[0]
    starts = range(0, min(n, SMALL_ROWS) - count + 1, count) if count <= 34 else (0, (n - count) // 2)
    return any(not torch.equal(layer(x[s : s + count]), whole[s : s + count]) for s in starts)


def least_rows(layers: Iterable[tuple[Linear, int, int]], dtype: torch.dtype, device: torch.device) -> int | None:
    """The fewest rows (one of :data:`CANDIDATES`) from which every layer of ``layers`` — (callable, its
    input features, the most rows it is handed at once) — gives each row the same bits at every probed
    count up to its most; None where no candidate does (this machine's kernels are not batch-invariant
    at these shapes)."""
    generator = torch.Generator(device="cpu").manual_seed(0)  # the caller's random state is left alone
    bad: set[int] = set()
    with torch.inference_mode():
        for layer, n_in, block in layers:
            x = torch.randn(block, n_in, generator=generator).to(device=device, dtype=dtype)
            whole = layer(x)
            bad.update(n for n in probe_counts(block) if _rows_mismatch(layer, x, whole, n))
    for least in CANDIDATES:
        if not any(n >= least for n in bad):
            return least
    return None


M = TypeVar("M", bound=torch.nn.Module)


def distinct_shapes(modules: Sequence[M]) -> list[M]:
    """One module of each weight shape among ``modules`` (the first), in order."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for module in modules:
        weight = module.weight
        assert isinstance(weight, torch.Tensor)
        shape = tuple(weight.shape)
        if shape not in seen:
            seen.add(shape)
            out.append(module)
    return out
