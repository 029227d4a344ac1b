"""The critic's side of PPO with GAE: the clipped value loss and the explained-variance diagnostic.

The value head predicts, at every trained token, the return-to-go that GAE computes as its target
(``returns = advantages + values``, :func:`coderl.rl.advantages.gae`). Tensors are ``[B, T]`` aligned
with the response tokens, like the rest of :mod:`coderl.rl`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from coderl.rl.losses import masked_mean


def value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip: float | None
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped value loss of PPO (Schulman et al. 2017, as in OpenAI baselines' ppo2).

    L_t = 1/2 * max((V_t - R_t)^2, (V_old_t + clip(V_t - V_old_t, -c, c) - R_t)^2)

    with V the value head now (with grad), V_old its prediction when the advantages were computed and
    R the GAE return. ``clip=None`` gives the plain 1/2 (V - R)^2. Returns the loss matrix ``[B, T]``
    (zero where ``mask`` is 0) and detached metrics: value_loss (masked mean), value_mean,
    value_clip_fraction (tokens whose clipped term is the larger).
    """
    unclipped = (values - returns) ** 2  # [B, T]
    if clip is None:
        loss = 0.5 * unclipped * mask  # [B, T]
        clipped_share = torch.zeros((), dtype=mask.dtype)  # []
    else:
        bounded = old_values + (values - old_values).clamp(-clip, clip)  # [B, T]
        clipped = (bounded - returns) ** 2  # [B, T]
        loss = 0.5 * torch.maximum(unclipped, clipped) * mask  # [B, T]
        clipped_share = masked_mean((clipped > unclipped).to(mask.dtype), mask)  # []
    stats = {
        "value_loss": masked_mean(loss, mask),
        "value_mean": masked_mean(values, mask),
        "value_clip_fraction": clipped_share,
    }
    return loss, stats


@torch.no_grad()
def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """1 - Var(R - V) / Var(R) over trained tokens: 1 = the critic predicts the returns exactly,
    0 = no better than their mean, negative = worse. NaN when the returns do not vary."""
    n = mask.sum()  # []
    if n < 2:
        return float("nan")
    r = returns[mask > 0]  # [n]
    residual = (returns - values)[mask > 0]  # [n]
    var_r = r.var(unbiased=False)  # []
    if var_r <= 0:
        return float("nan")
    return float(1.0 - residual.var(unbiased=False) / var_r)
