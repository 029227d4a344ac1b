"""What this machine computes natively, for the config's ``dtype: auto`` (``model.dtype``, ``actor.dtype``).

bfloat16 halves a model's bytes, and on a CPU with bfloat16 instructions (Intel's AMX or AVX-512 BF16)
its matmuls run faster than float32's. On a CPU without them (AVX2 only, e.g. an AMD EPYC of the Zen 3
generation) oneDNN emulates them: measured on such a 2-core machine (`coderl bench dtype`, BENCHMARKS.md),
the matmuls of SmolLM2-135M's projections took 2.9x (24 rows) to 7.1x (512 rows) the float32 ones and the
engine decoded greedily at 0.32x the float32 rate; the main job's first validation was still running
after 12.4 minutes in bfloat16 and took 5.4 in float32. ``auto`` therefore resolves to bfloat16 where the device computes it natively (a CUDA GPU that
supports it, a CPU with those instructions, an Arm CPU with its BF16 extension) and to float32 elsewhere.

Owns: reading the CPU's feature flags, and the choice. Imports nothing from coderl (the config layer,
at the bottom of the package graph, calls it); torch only to ask CUDA.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")
"""CPU feature flags (``/proc/cpuinfo``) with which bfloat16 matmuls run natively: Intel AMX, AVX-512
BF16, Arm's BF16 extension (listed as ``bf16`` under ``Features``)."""


@cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (x86 ``flags``, Arm ``Features``) from ``/proc/cpuinfo``; empty where
    there is no such file (not Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def native_bf16_cpu_flag() -> str | None:
    """The flag by which this CPU computes bfloat16 natively, or None."""
    flags = cpu_flags()
    return next((f for f in NATIVE_BF16_FLAGS if f in flags), None)


def _cuda(device: str) -> bool:
    if device == "cpu":
        return False
    import torch

    return bool(torch.cuda.is_available())


def auto_dtype(device: str) -> str:
    """What ``dtype: auto`` means for ``device`` (``auto``, ``cpu`` or ``cuda``) here: ``bfloat16`` where
    it computes it natively, else ``float32``."""
    if _cuda(device):
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return "bfloat16" if native_bf16_cpu_flag() else "float32"


def describe_bf16(device: str) -> str:
    """One line on whether ``device`` here computes bfloat16 natively, for a run's console."""
    if _cuda(device):
        return "a CUDA device"
    flag = native_bf16_cpu_flag()
    if flag:
        return f"this CPU computes bfloat16 natively ({flag})"
    return "this CPU has no bfloat16 instructions (no amx_bf16 or avx512_bf16): bfloat16 would be emulated, several times slower"
