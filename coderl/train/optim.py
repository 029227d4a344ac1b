"""AdamW with its first moment kept in bfloat16 (``actor.exp_avg_dtype=bfloat16``).

Owns the update rule of torch's AdamW (decoupled weight decay, bias-corrected moments), one parameter
at a time, with ``exp_avg`` stored at a chosen dtype. It does not choose when to use it: the actor
builds torch's own AdamW for the float32 default and this one only where the setting asks.

Why: a full-weight step of SmolLM2-135M keeps two float32 moments per trained parameter (0.86 GB for
the warm start's 107M). The first moment, a running mean of gradients, loses little in bfloat16 (8
significant bits, about 0.4% per stored value, where the gradients themselves are noisier); it is
updated in float32 and rounded once per step. The second moment stays float32: ``beta2 = 0.999``
adds a thousandth of the squared gradient each step, below bfloat16's resolution once it has grown,
so a bfloat16 second moment would stop moving.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch


class LeanAdamW(torch.optim.Optimizer):
    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        exp_avg_dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        if lr < 0 or eps <= 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1) or weight_decay < 0:
            raise ValueError(f"LeanAdamW: bad hyper-parameters lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.exp_avg_dtype = exp_avg_dtype

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's load, which casts every moment to its parameter's dtype; then each moment to its own."""
        super().load_state_dict(state_dict)
        for state in self.state.values():
            if "exp_avg" in state:
                state["exp_avg"] = state["exp_avg"].to(self.exp_avg_dtype)
                state["exp_avg_sq"] = state["exp_avg_sq"].to(torch.float32)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.float()
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, dtype=self.exp_avg_dtype, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.preserve_format)
                state["step"] += 1
                t = float(state["step"])
                if wd:
                    p.mul_(1 - lr * wd)
                exp_avg = state["exp_avg"].float().lerp_(grad, 1 - beta1)  # in float32, stored rounded
                state["exp_avg"].copy_(exp_avg)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (state["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2**t)).add_(eps)
                p.addcdiv_(exp_avg.to(p.dtype), denom.to(p.dtype), value=-lr / (1 - beta1**t))
        return loss
