"""The engine's float32 linear layers on the CPU through oneDNN with weights packed ahead of time.

PyTorch's float32 ``F.linear`` on the CPU goes to MKL's sgemm, which re-lays the weight out on every
call. At the row counts of a decode step (8 to 120 rows) that costs more than the arithmetic: on a
2-core AVX2 CPU (AMD EPYC, Zen 3) oneDNN's matmul with the weight packed once took 0.47x MKL's time
for SmolLM2-135M's five projection shapes at 24 rows (0.81x at a prefill piece's 512), and the
engine's greedy decode ran 1.26x as fast (``coderl bench dtype``, which measures both ways). Packed, a row also comes out the same bits at
every row count up to 2,100 and wherever it sits in the batch, from 1 row on that CPU and from 2 on an
AVX-512 one (MKL: from 12), which is what ``engine.batch_invariant`` needs (the engine measures the
padding when it starts: :mod:`coderl.engine.row_probe`).

A :class:`PackedLinear` takes the place of an ``nn.Linear`` in the engine's model and holds the very
same ``weight`` parameter (its name, tying and in-place updates unchanged); the packed copy is made
on first use and made again whenever that parameter changes (a weight update writes it in place,
which bumps its version; a release swaps its storage). :func:`drop_packed` lets go of every packed
copy (the engine's ``release_weights``).

Owns: which linear layers are packed, and keeping the packed copy in step with the weight. Must not:
change any other dtype's or device's kernels (bfloat16 already goes through oneDNN).
"""

from __future__ import annotations

from typing import Any

import torch

PACK_ROWS = 32
"""The row count oneDNN packs the weights for (its hint). Measured on the AVX2 CPU above: packed for 24
or 128 rows every row count from 1 to 2,100 gave the same bits; packed for 1 row, a single row differed."""


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this build of torch packs float32 linear weights for oneDNN on ``device``."""
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


class PackedLinear(torch.nn.Module):
    """An ``nn.Linear`` without bias whose float32 matmul runs on oneDNN with a packed weight."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        if linear.bias is not None:
            raise ValueError("PackedLinear packs linear layers without bias (the Llama family's)")
        self.in_features: int = linear.in_features
        self.out_features: int = linear.out_features
        self.weight: torch.nn.Parameter = linear.weight  # the same Parameter: names, tying and updates are the model's
        self._packed: torch.Tensor | None = None
        self._key: tuple[int, int] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        key = (weight.data_ptr(), weight._version)
        if self._packed is None or key != self._key:
            with torch.inference_mode(False), torch.no_grad():
                self._packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS)
            self._key = key
        lead = x.shape[:-1]
        out = torch.ops.mkldnn._linear_pointwise(
            x.reshape(-1, self.in_features).contiguous(), self._packed, None, "none", [None], ""
        )
        return out.view(*lead, self.out_features)

    def drop(self) -> None:
        """Let go of the packed copy (made again on the next call)."""
        self._packed = None
        self._key = None

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN packed"


def pack_linears(model: Any) -> int:
    """Put a :class:`PackedLinear` in place of every bias-free ``nn.Linear`` of ``model``; how many."""
    swaps: list[tuple[torch.nn.Module, str, torch.nn.Linear]] = []
    for module in model.modules():
        for name, child in module.named_children():
            if type(child) is torch.nn.Linear and child.bias is None:
                swaps.append((module, name, child))
    for parent, name, child in swaps:
        setattr(parent, name, PackedLinear(child))
    return len(swaps)


def drop_packed(model: Any) -> None:
    """Let go of every packed copy in ``model`` (they are made again on use)."""
    for module in model.modules():
        if isinstance(module, PackedLinear):
            module.drop()
