"""The full training objective of one (micro-)batch: policy loss (+ TIS) + KL penalty - entropy bonus.

loss = agg(tis * L_policy) + kl_coef * agg(KL(pi || pi_ref)) - entropy_coef * agg(H(pi))
       (with ``fork_share``, L_policy only at the micro-batch's highest-entropy tokens, / fork_share)
       [+ vf_coef * agg(L_value)  with a value head (GAE)]

where agg is ``aggregate`` with ``cfg.loss_agg`` and the same global normalisers for every term, so
summing the micro-batch losses of a step gives exactly the full-batch loss. The KL term is in the
loss unless ``cfg.kl_in_reward``, in which case ``kl_token_rewards`` goes into the advantages instead.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import Tensor

from coderl.rl.config import AlgoConfig
from coderl.rl.kl import kl_penalty
from coderl.rl.losses import POLICY_LOSSES, aggregate, masked_mean, tis_weights
from coderl.rl.value import value_loss


def kl_token_rewards(logp: Tensor, ref_logp: Tensor, mask: Tensor, cfg: AlgoConfig) -> Tensor:
    """-kl_coef * KL_t on trained tokens, detached: the ``token_rewards`` of REINFORCE++-style KL."""
    return (-cfg.kl_coef * kl_penalty(logp, ref_logp, cfg.kl_estimator) * mask).detach()  # [B, T]


def forking_tokens(entropy: Tensor, mask: Tensor, share: float) -> Tensor:
    """1.0 at the ``ceil(share x n)`` trained tokens (of ``mask``'s n) with the highest ``entropy``, ties
    at the threshold kept, 0.0 elsewhere; ``[B, T]`` like both inputs."""
    trained = entropy[mask > 0]  # [n]
    if trained.numel() == 0:
        return torch.zeros_like(mask)
    k = max(1, math.ceil(share * trained.numel()))
    threshold = torch.topk(trained, k).values[-1]  # []
    return ((entropy >= threshold) & (mask > 0)).to(mask.dtype)  # [B, T]


def compute_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: AlgoConfig,
    ref_logp: Tensor | None = None,
    entropy: Tensor | None = None,
    rollout_logp: Tensor | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    max_len: float | None = None,
    values: Tensor | None = None,
    old_values: Tensor | None = None,
    returns: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Scalar loss to backpropagate, and float metrics of this (micro-)batch.

    logp [B, T] (with grad), old_logp [B, T] (trainer log-probs before the update), advantages [B, T],
    mask [B, T]; optional ref_logp [B, T] (needed when kl_coef > 0 and not kl_in_reward), entropy [B, T]
    (with grad, for the bonus), rollout_logp [B, T] (engine log-probs, enables TIS when tis_cap is set).
    num_tokens / num_seqs: the whole batch's ``count_normalisers`` under gradient accumulation;
    max_len: the constant of seq-mean-token-sum-norm (default ``cfg.loss_norm_len``; under gradient
    accumulation pass a constant of the run, since the fallback, the padded width T, varies by micro-batch).
    values [B, T] (value head, with grad), old_values [B, T] and returns [B, T] (from GAE) add the
    clipped value loss weighted by ``cfg.vf_coef`` (:func:`coderl.rl.value.value_loss`).

    Metrics: loss and pg_loss are this micro-batch's share of the aggregated objective; kl, entropy and
    the ratio statistics (clip_fraction, approx_kl, ratio_mean, tis_mean, ...) are means over its
    trained tokens.
    """
    agg = partial(
        aggregate,
        mask=mask,
        mode=cfg.loss_agg,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        max_len=cfg.loss_norm_len if max_len is None else max_len,
    )
    loss_mat, stats = POLICY_LOSSES[cfg.policy_loss](logp, old_logp, advantages, mask, cfg)  # [B, T]
    if cfg.fork_share is not None:
        if entropy is None:
            raise ValueError("algo.fork_share needs the policy's entropy [B, T]; got entropy=None")
        forks = forking_tokens(entropy.detach(), mask, cfg.fork_share)  # [B, T]
        loss_mat = loss_mat * forks / cfg.fork_share  # [B, T]
        stats["fork_tokens"] = forks.sum() / mask.sum().clamp(min=1.0)
    if rollout_logp is not None and cfg.tis_cap is not None:
        weights = tis_weights(old_logp, rollout_logp, mask, cfg.tis_cap)  # [B, T]
        loss_mat = loss_mat * weights  # [B, T]
        stats["tis_mean"] = masked_mean(weights, mask)
        # decided on the log-ratio: exp(log cap) can round to just below cap in float32 (7.0 -> 6.9999995)
        capped = (old_logp - rollout_logp) >= math.log(cfg.tis_cap)  # [B, T]
        stats["tis_capped_fraction"] = masked_mean(capped.to(mask.dtype), mask)
    pg_loss = agg(loss_mat)  # []
    loss = pg_loss  # []
    stats["pg_loss"] = pg_loss.detach()

    kl_in_loss = cfg.kl_coef > 0 and not cfg.kl_in_reward
    if kl_in_loss and ref_logp is None:
        raise ValueError("kl_coef > 0 with kl_in_reward=False needs ref_logp [B, T]; got ref_logp=None")
    if ref_logp is not None:
        kl = kl_penalty(logp, ref_logp, cfg.kl_estimator)  # [B, T]
        stats["kl"] = masked_mean(kl, mask)
        if kl_in_loss:
            loss = loss + cfg.kl_coef * agg(kl)  # []

    if entropy is not None:
        stats["entropy"] = masked_mean(entropy, mask)
        if cfg.entropy_coef != 0:
            loss = loss - cfg.entropy_coef * agg(entropy)  # []

    if values is not None:
        if old_values is None or returns is None:
            raise ValueError("values [B, T] need old_values and returns [B, T] (from GAE) for the value loss")
        v_loss, v_stats = value_loss(values, old_values, returns, mask, cfg.value_clip)  # [B, T]
        stats.update(v_stats)
        loss = loss + cfg.vf_coef * agg(v_loss)  # []

    stats["loss"] = loss.detach()
    return loss, {name: float(value) for name, value in stats.items()}
