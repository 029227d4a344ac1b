"""Per-token KL(policy || reference) estimators and the entropy of the policy.

Schulman, "Approximating KL Divergence" (2020): with x ~ q = pi (the sampling policy), p = pi_ref and
log r = log p(x) - log q(x) = ref_logp - logp, three single-sample estimators of KL(q || p):

- k1 = -log r                     unbiased, high variance, can be negative;
- k2 = (log r)^2 / 2              biased, low variance, non-negative;
- k3 = (r - 1) - log r            unbiased, low variance, non-negative (bounded here by ``K3_BOUND``).

The result is per token and not masked: aggregate it with the trained-token mask (in the loss), or
multiply it by the mask before putting ``-kl_coef * kl`` into the token rewards (``kl_in_reward``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from coderl.rl.config import KLName

# exp() of a log-ratio beyond this would overflow float32 gradients; only k3 exponentiates.
_MAX_LOG_RATIO = 20.0
K3_BOUND = 10.0
"""Largest value of the k3 estimate of one token (k3 >= 0, so its range is [0, K3_BOUND])."""


def k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = -log r = logp - ref_logp."""
    return logp - ref_logp  # [B, T]


def k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = (log r)^2 / 2 with log r = ref_logp - logp."""
    return 0.5 * (ref_logp - logp) ** 2  # [B, T]


def k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = r - 1 - log r with log r = ref_logp - logp, bounded to [0, K3_BOUND].

    Unbounded, one token the policy has made far less likely than the reference (log r = 20) is worth
    e^20 ~ 5e8 and so is its gradient, which swamps every other token of the batch. The bound (as in
    verl's ``low_var_kl``, [-10, 10]) caps such a token's penalty at 10 and gives it no gradient, so
    the penalty cannot blow up a step; within the bound the estimate is exact. log r is also clamped
    to |log r| <= 20 before exp() so that the forward stays finite.
    """
    log_ratio = (ref_logp - logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)  # [B, T]
    return (torch.exp(log_ratio) - 1 - log_ratio).clamp(max=K3_BOUND)  # [B, T]


KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"k1": k1, "k2": k2, "k3": k3}


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: KLName) -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) by estimator ``kind``; [B, T], not masked."""
    return KL_ESTIMATORS[kind](logp, ref_logp)  # [B, T]


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the next-token distribution, float32: H = -sum_v p_v log p_v with log p = log_softmax(z).

    ``logits`` [..., V] -> [...]; materialises the softmax, so chunk over rows for big vocabularies.
    (The form logsumexp(z) - sum_v p_v z_v cancels two large numbers and loses the entropy of a
    near-certain row to rounding.)
    """
    logp = torch.log_softmax(logits.float(), dim=-1)  # [..., V]
    return -(logp.exp() * logp).sum(dim=-1)  # [...]
