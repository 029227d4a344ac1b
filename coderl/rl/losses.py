"""Per-token policy losses, truncated importance sampling, and loss aggregation.

A policy loss maps ``(logp, old_logp, advantages, mask, cfg)`` (all ``[B, T]``) to a loss matrix
``[B, T]`` (zero where ``mask`` is 0; minimise it) and detached metrics of this batch.
``POLICY_LOSSES`` maps the ``AlgoConfig.policy_loss`` name to it; ``aggregate`` / ``LOSS_AGG`` turn
the matrix into a scalar. Log-ratios are clamped to |x| <= 20 before exp() so that a stale token
cannot overflow; inside that range every formula is exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from coderl.rl.config import AlgoConfig, LossAggName

PolicyLossFn = Callable[[Tensor, Tensor, Tensor, Tensor, AlgoConfig], tuple[Tensor, dict[str, Tensor]]]
AggFn = Callable[[Tensor, Tensor, float, float, float], Tensor]

_MAX_LOG_RATIO = 20.0


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of x over entries where mask is 1 (0 when the mask is empty); detached."""
    return ((x * mask).sum() / mask.sum().clamp(min=1)).detach()  # []


def _ratio_metrics(log_ratio: Tensor, mask: Tensor, clipped: Tensor) -> dict[str, Tensor]:
    """clip_fraction, approx_kl = k3 estimate of KL(pi_old || pi), ratio_mean; over trained tokens."""
    ratio = torch.exp(log_ratio)  # [B, T]
    return {
        "clip_fraction": masked_mean(clipped.to(mask.dtype), mask),
        "approx_kl": masked_mean(ratio - 1 - log_ratio, mask),
        "ratio_mean": masked_mean(ratio, mask),
    }


def ppo_clip(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, cfg: AlgoConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate with decoupled bounds (Schulman et al. 2017; DAPO clip-higher, Yu et al. 2025).

    r = exp(logp - old_logp); L = max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high)).
    A token whose clipped term wins gets zero gradient.
    """
    log_ratio = (logp - old_logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)  # [B, T]
    ratio = torch.exp(log_ratio)  # [B, T]
    unclipped = -advantages * ratio  # [B, T]
    clipped = -advantages * ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)  # [B, T]
    loss = torch.maximum(unclipped, clipped) * mask  # [B, T]
    return loss, _ratio_metrics(log_ratio.detach(), mask, clipped > unclipped)


def dual_clip(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, cfg: AlgoConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """Dual-clip PPO (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL").

    L_ppo as in ``ppo_clip``; for A < 0 the loss is further bounded: L = min(L_ppo, -c * A), c > 1,
    so a token whose ratio has grown far beyond 1 cannot produce an unbounded push-down.
    """
    log_ratio = (logp - old_logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)  # [B, T]
    ratio = torch.exp(log_ratio)  # [B, T]
    unclipped = -advantages * ratio  # [B, T]
    clipped = -advantages * ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)  # [B, T]
    ppo = torch.maximum(unclipped, clipped)  # [B, T]
    floor = -advantages * cfg.dual_clip_c  # [B, T]
    negative = advantages < 0  # [B, T]
    loss = torch.where(negative, torch.minimum(ppo, floor), ppo) * mask  # [B, T]
    metrics = _ratio_metrics(log_ratio.detach(), mask, clipped > unclipped)
    metrics["dual_clip_fraction"] = masked_mean((negative & (ppo > floor)).to(mask.dtype), mask)
    return loss, metrics


def gspo(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, cfg: AlgoConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO, token form (Zheng et al. 2025, "Group Sequence Policy Optimization").

    s_i = exp(mean_{t in y_i} (logp - old_logp)) is the length-normalised sequence ratio;
    s_{i,t} = sg(s_i) * exp(logp_t - sg(logp_t)) has the value s_i and gradient s_i * grad logp_t;
    L = max(-A * s_{i,t}, -A * clip(s_{i,t}, 1 - gspo_clip_low, 1 + gspo_clip_high)).
    With a per-sequence advantage and seq-mean-token-mean aggregation its gradient equals that of the
    sequence objective -mean_i min(s_i A_i, clip(s_i) A_i).
    """
    length = mask.sum(-1).clamp(min=1)  # [B]
    seq_log_ratio = ((logp - old_logp) * mask).sum(-1) / length  # [B]
    seq_log_ratio = seq_log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)  # [B]
    token_ratio = torch.exp(seq_log_ratio.detach()[:, None] + logp - logp.detach())  # [B, T]
    unclipped = -advantages * token_ratio  # [B, T]
    clipped = -advantages * token_ratio.clamp(1 - cfg.gspo_clip_low, 1 + cfg.gspo_clip_high)  # [B, T]
    loss = torch.maximum(unclipped, clipped) * mask  # [B, T]
    seq_log_ratio_tok = seq_log_ratio.detach()[:, None].expand_as(mask)  # [B, T]
    return loss, _ratio_metrics(seq_log_ratio_tok, mask, clipped > unclipped)


def cispo(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, cfg: AlgoConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO (MiniMax-M1, 2025): clip the importance weight, never drop the token's gradient.

    w = sg(clip(r, 1 - cispo_clip_low, 1 + cispo_clip_high)) with r = exp(logp - old_logp) and no lower
    bound when cispo_clip_low is None; L = -w * A * logp, so grad L = -w * A * grad logp for every token.
    """
    log_ratio = (logp - old_logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)  # [B, T]
    ratio = torch.exp(log_ratio).detach()  # [B, T]
    low = 0.0 if cfg.cispo_clip_low is None else 1.0 - cfg.cispo_clip_low
    high = 1.0 + cfg.cispo_clip_high
    weight = ratio.clamp(low, high)  # [B, T]
    loss = -weight * advantages * logp * mask  # [B, T]
    return loss, _ratio_metrics(log_ratio.detach(), mask, (ratio > high) | (ratio < low))


POLICY_LOSSES: dict[str, PolicyLossFn] = {
    "ppo_clip": ppo_clip,
    "dual_clip": dual_clip,
    "gspo": gspo,
    "cispo": cispo,
}


def tis_weights(old_logp: Tensor, rollout_logp: Tensor, mask: Tensor, cap: float) -> Tensor:
    """Truncated importance sampling weights for the rollout/trainer mismatch (Yao et al. 2025).

    w = min(exp(old_logp - rollout_logp), cap), detached and zero off the mask, where old_logp is the
    trainer's log-prob of the sampled token and rollout_logp the inference engine's. Multiplies the
    per-token policy loss.
    """
    log_w = (old_logp - rollout_logp).clamp(max=math.log(cap))  # [B, T]
    return torch.exp(log_w).detach() * mask  # [B, T]


def _token_mean(loss_mat: Tensor, mask: Tensor, num_tokens: float, num_seqs: float, max_len: float) -> Tensor:
    """sum_{i,t} m L / N_tokens (DAPO token-level loss)."""
    return (loss_mat * mask).sum() / num_tokens  # []


def _seq_mean_token_sum(
    loss_mat: Tensor, mask: Tensor, num_tokens: float, num_seqs: float, max_len: float
) -> Tensor:
    """sum_i (sum_t m L) / N_seqs."""
    return (loss_mat * mask).sum(-1).sum() / num_seqs  # []


def _seq_mean_token_mean(
    loss_mat: Tensor, mask: Tensor, num_tokens: float, num_seqs: float, max_len: float
) -> Tensor:
    """sum_i (sum_t m L / |y_i|) / N_seqs (original GRPO, GSPO)."""
    per_seq = (loss_mat * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]
    return per_seq.sum() / num_seqs  # []


def _seq_mean_token_sum_norm(
    loss_mat: Tensor, mask: Tensor, num_tokens: float, num_seqs: float, max_len: float
) -> Tensor:
    """sum_i (sum_t m L / L_max) / N_seqs with a constant L_max (Dr.GRPO, Liu et al. 2025)."""
    return (loss_mat * mask).sum() / (num_seqs * max_len)  # []


LOSS_AGG: dict[str, AggFn] = {
    "token-mean": _token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
}


def count_normalisers(mask: Tensor) -> tuple[float, float]:
    """(trained tokens, sequences with at least one trained token) of a batch: the global normalisers.

    Compute them once over the whole batch and pass them to every micro-batch's ``aggregate``.
    """
    return float(mask.sum().item()), float((mask.sum(-1) > 0).sum().item())


def aggregate(
    loss_mat: Tensor,
    mask: Tensor,
    mode: LossAggName,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    max_len: float | None = None,
) -> Tensor:
    """Reduce a [B, T] loss matrix to a scalar by ``mode`` (see ``LOSS_AGG``).

    num_tokens / num_seqs default to this batch's ``count_normalisers``; under gradient accumulation
    pass the whole batch's counts so that the sum of the micro-batch losses equals the full-batch loss.
    max_len is the constant of seq-mean-token-sum-norm (default: the padded length T, which is only
    constant if every micro-batch is padded alike).
    """
    if num_tokens is None or num_seqs is None:
        local_tokens, local_seqs = count_normalisers(mask)
        num_tokens = local_tokens if num_tokens is None else num_tokens
        num_seqs = local_seqs if num_seqs is None else num_seqs
    tokens, seqs = max(num_tokens, 1.0), max(num_seqs, 1.0)
    length = float(loss_mat.shape[1] if max_len is None else max_len)
    return LOSS_AGG[mode](loss_mat, mask, tokens, seqs, length)  # []
