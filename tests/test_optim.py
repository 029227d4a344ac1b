"""LeanAdamW (coderl.train.optim): torch's AdamW update with the first moment stored in bfloat16."""

from __future__ import annotations

import pytest
import torch

from coderl.train.optim import LeanAdamW


def _run(opt_cls: type, steps: int = 6, **kw: object) -> tuple[torch.Tensor, torch.optim.Optimizer]:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(64, 32))
    target = torch.randn(64, 32)
    opt = opt_cls([w], lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, **kw)
    for _ in range(steps):
        opt.zero_grad()
        ((w - target) ** 3).sum().backward()
        opt.step()
    return w.detach(), opt


def test_with_a_float32_first_moment_it_is_torchs_adamw() -> None:
    ours, _ = _run(LeanAdamW, exp_avg_dtype=torch.float32)
    theirs, _ = _run(torch.optim.AdamW)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


def test_a_bfloat16_first_moment_halves_its_bytes_and_stays_close() -> None:
    ours, opt = _run(LeanAdamW, exp_avg_dtype=torch.bfloat16)
    theirs, _ = _run(torch.optim.AdamW)
    state = next(iter(opt.state.values()))
    assert state["exp_avg"].dtype == torch.bfloat16 and state["exp_avg_sq"].dtype == torch.float32
    start, _ = _run(LeanAdamW, steps=0)
    moved = (theirs - start).abs().mean()
    assert moved > 0.01 and (ours - theirs).abs().mean() < 0.02 * moved  # the same update up to rounding


def test_its_state_round_trips_and_bad_settings_are_named() -> None:
    _, opt = _run(LeanAdamW)
    again, _ = _run(LeanAdamW, steps=0)
    fresh = LeanAdamW([torch.nn.Parameter(again.clone())], lr=1e-2)
    fresh.load_state_dict(opt.state_dict())
    state = next(iter(fresh.state.values()))
    assert float(state["step"]) == 6 and state["exp_avg"].dtype == torch.bfloat16
    with pytest.raises(ValueError, match="betas"):
        LeanAdamW([torch.nn.Parameter(torch.zeros(2))], betas=(1.0, 0.999))
