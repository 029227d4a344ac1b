"""The batch-invariance probe (coderl/engine/row_probe.py): the fewest rows from which a layer gives a
row the same bits at every count, found from what the layer does, and None where no padding helps. The
engine-level check that the measured padding makes greedy turns the same bits alone and in a busy batch
on this machine is tests/test_engine_invariant.py."""

from __future__ import annotations

import torch

from coderl.engine.row_probe import CANDIDATES, least_rows, probe_counts

CPU = torch.device("cpu")


def _kernel(weight: torch.Tensor, odd: set[int] | None = None, below: int = 0) -> object:
    """A projection that, like a CPU kernel picked by row count, rounds otherwise at the counts ``odd`` or
    below ``below``. Inputs and weights are rounded to whole numbers, so every other count's sums are
    exact in any order: only the odd path's last-bit nudge differs."""

    def layer(x: torch.Tensor) -> torch.Tensor:
        out = x.round() @ weight.round().T
        n = x.shape[0]
        if n < below or (odd is not None and n in odd):
            return torch.nextafter(out, torch.full_like(out, float("inf")))
        return out

    return layer


def test_the_probe_finds_the_fewest_rows_a_kernel_needs_and_none_where_no_padding_helps() -> None:
    torch.manual_seed(0)
    weight = torch.randn(96, 640)
    assert least_rows([(_kernel(weight), 640, 256)], torch.float32, CPU) == 1  # the same path at every count
    assert least_rows([(_kernel(weight, below=2), 640, 256)], torch.float32, CPU) == 2  # a lone row's own path
    assert least_rows([(_kernel(weight, below=12), 640, 256)], torch.float32, CPU) == 12
    assert least_rows([(_kernel(weight, odd={5, 7, 11}), 640, 256)], torch.float32, CPU) == 12
    # the worst of several layers decides; a count no padding avoids (past 32) leaves none
    layers = [(_kernel(weight), 640, 256), (_kernel(weight, below=4), 640, 256)]
    assert least_rows(layers, torch.float32, CPU) == 4
    assert least_rows([(_kernel(weight, odd={100}), 640, 256)], torch.float32, CPU) is None


def test_the_probe_counts_cover_every_small_count_and_the_block() -> None:
    assert probe_counts(32) == list(range(1, 33))
    counts = probe_counts(2048)
    assert counts[:34] == list(range(1, 35)) and counts[-1] == 2048 and 513 in counts
    assert probe_counts(40)[-1] == 40 and CANDIDATES[0] == 1 and CANDIDATES[-1] == 32


def test_the_probe_leaves_the_callers_random_state_alone() -> None:
    torch.manual_seed(7)
    want = torch.rand(3)
    torch.manual_seed(7)
    least_rows([(_kernel(torch.ones(8, 16)), 16, 32)], torch.float32, CPU)
    assert torch.equal(torch.rand(3), want)
