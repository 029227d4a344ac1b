"""Advantage estimators: sequence rewards (and optional per-token rewards) -> per-token advantages.

Every estimator has the signature of ``AdvantageFn`` and returns ``(advantages, returns)``, both
``[B, T]``, zero wherever ``mask`` is 0. ``ADVANTAGES`` maps the ``AlgoConfig.advantage`` name to it.

Conventions shared by all estimators:

- ``mask`` ``[B, T]`` is 1 on model-sampled tokens (the only ones trained) and 0 on environment
  tokens (tool output, user turns) and padding.
- ``group_index`` ``[B]`` (long): samples of the same task share a value; values need not be
  contiguous. A group of one sample has no baseline and gets advantage 0 (never NaN).
- ``counted`` ``[B]`` (optional, 1 or 0): rows that count in group statistics. A rollout that produced
  several token sequences (an external agent's sub-agent, a rewritten history) has one counted row;
  its other rows share its reward and get the advantage its counted row gets, so a rollout weighs
  the same in the baseline however many sequences it has. None = every row counts.
- ``token_rewards`` ``[B, T]`` (e.g. ``-kl_coef * kl`` when ``kl_in_reward``) only counts on trained
  tokens. The group estimators (grpo, drgrpo, rloo) add its sum over trained tokens to the sequence
  reward; reinforce_pp and gae place it per token next to the outcome reward, which sits on the last
  trained token.
- Multi-turn: the trained tokens of a sequence are the time steps; environment tokens between model
  turns are skipped, not treated as steps: discounting (``gamma``, ``lam``) advances once per trained
  token, and the next state's value in GAE is the value at the next *trained* token (the environment
  tokens are already in that token's context). Advantages on environment tokens are 0.
- Returns: the discounted return-to-go of each trained token (for value-head training in gae; for the
  outcome estimators it is the sequence reward broadcast over trained tokens).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from coderl.rl.config import AlgoConfig


class AdvantageFn(Protocol):
    def __call__(
        self,
        rewards: Tensor,
        mask: Tensor,
        group_index: Tensor,
        cfg: AlgoConfig,
        values: Tensor | None = None,
        token_rewards: Tensor | None = None,
        counted: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]: ...


def _group_stats(
    x: Tensor, group_index: Tensor, counted: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample mean, unbiased std (0 for groups of one) and size of the sample's group, over the
    counted rows of the group (all rows when ``counted`` is None)."""
    _, inverse = torch.unique(group_index, return_inverse=True)  # [B]
    num_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    weight = torch.ones_like(x) if counted is None else counted.to(x.dtype)  # [B]
    zeros = torch.zeros(num_groups, dtype=x.dtype, device=x.device)  # [G]
    count = zeros.index_add(0, inverse, weight)  # [G]
    mean = zeros.index_add(0, inverse, x * weight) / count.clamp(min=1)  # [G]
    centred = x - mean[inverse]  # [B]
    var = zeros.index_add(0, inverse, weight * centred**2) / (count - 1).clamp(min=1)  # [G]
    return mean[inverse], var.sqrt()[inverse], count[inverse]  # [B], [B], [B]


def _sequence_rewards(rewards: Tensor, mask: Tensor, token_rewards: Tensor | None) -> Tensor:
    """Outcome reward plus the sum of the per-token rewards over trained tokens."""
    seq = rewards.to(mask.dtype)  # [B]
    if token_rewards is not None:
        seq = seq + (token_rewards * mask).sum(-1)  # [B]
    return seq


def _last_token_onehot(mask: Tensor) -> Tensor:
    """1 at the last trained token of each row, 0 elsewhere (all 0 for a row with no trained token)."""
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)  # [B, T]
    last = torch.where(mask > 0, positions, -1).max(-1).values  # [B]
    return (positions == last[:, None]).to(mask.dtype)  # [B, T]


def _discounted_returns(token_rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """G_t = r_t + gamma * G_{t'} where t' is the next trained token; environment tokens are skipped."""
    running = torch.zeros_like(token_rewards[:, 0])  # [B]
    columns = []
    for t in reversed(range(token_rewards.shape[1])):
        m = mask[:, t]  # [B]
        running = m * (token_rewards[:, t] + gamma * running) + (1 - m) * running  # [B]
        columns.append(running * m)  # [B]
    return torch.stack(columns[::-1], dim=1)  # [B, T]


def _masked_whiten(x: Tensor, mask: Tensor, eps: float) -> Tensor:
    """(x - mean) / (std + eps) with mean and population std over the masked entries of the whole batch."""
    n = mask.sum().clamp(min=1)  # []
    mean = (x * mask).sum() / n  # []
    var = ((x - mean) ** 2 * mask).sum() / n  # []
    return (x - mean) / (var.sqrt() + eps) * mask  # [B, T]


@torch.no_grad()
def grpo(
    rewards: Tensor,
    mask: Tensor,
    group_index: Tensor,
    cfg: AlgoConfig,
    values: Tensor | None = None,
    token_rewards: Tensor | None = None,
    counted: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """GRPO group-relative advantage (Shao et al. 2024, DeepSeekMath, outcome supervision).

    A_i = (r_i - mean_g(r)) / (std_g(r) + eps), the same on every trained token of sample i, with the
    unbiased (n - 1) std of the sample's group g; without ``norm_adv_by_std`` A_i = r_i - mean_g(r).
    """
    seq = _sequence_rewards(rewards, mask, token_rewards)  # [B]
    mean, std, _ = _group_stats(seq, group_index, counted)  # [B], [B], [B]
    scale = std + cfg.epsilon if cfg.norm_adv_by_std else torch.ones_like(std)  # [B]
    adv = (seq - mean) / scale  # [B]
    return adv[:, None] * mask, seq[:, None] * mask  # [B, T], [B, T]


@torch.no_grad()
def drgrpo(
    rewards: Tensor,
    mask: Tensor,
    group_index: Tensor,
    cfg: AlgoConfig,
    values: Tensor | None = None,
    token_rewards: Tensor | None = None,
    counted: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Dr. GRPO advantage (Liu et al. 2025, "Understanding R1-Zero-Like Training").

    A_i = r_i - mean_g(r): GRPO without the division by the group std, which biases toward questions
    that are too easy or too hard.
    """
    seq = _sequence_rewards(rewards, mask, token_rewards)  # [B]
    mean, _, _ = _group_stats(seq, group_index, counted)  # [B]
    return (seq - mean)[:, None] * mask, seq[:, None] * mask  # [B, T], [B, T]


@torch.no_grad()
def rloo(
    rewards: Tensor,
    mask: Tensor,
    group_index: Tensor,
    cfg: AlgoConfig,
    values: Tensor | None = None,
    token_rewards: Tensor | None = None,
    counted: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """REINFORCE leave-one-out (Ahmadian et al. 2024, "Back to Basics"; Kool et al. 2019).

    A_i = r_i - 1/(n-1) * sum_{j != i} r_j = n/(n-1) * (r_i - mean_g(r)) for a group of n samples;
    a group of one has no baseline and gets A = 0.
    """
    seq = _sequence_rewards(rewards, mask, token_rewards)  # [B]
    mean, _, count = _group_stats(seq, group_index, counted)  # [B], [B], [B]
    adv = (seq - mean) * count / (count - 1).clamp(min=1)  # [B]
    return adv[:, None] * mask, seq[:, None] * mask  # [B, T], [B, T]


def _reinforce_pp_from_outcome(
    outcome: Tensor, mask: Tensor, cfg: AlgoConfig, token_rewards: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Token rewards (outcome on the last trained token + token_rewards), returns, batch whitening."""
    per_token = outcome[:, None] * _last_token_onehot(mask)  # [B, T]
    if token_rewards is not None:
        per_token = per_token + token_rewards * mask  # [B, T]
    returns = _discounted_returns(per_token, mask, cfg.gamma)  # [B, T]
    return _masked_whiten(returns, mask, cfg.epsilon), returns  # [B, T], [B, T]


@torch.no_grad()
def reinforce_pp(
    rewards: Tensor,
    mask: Tensor,
    group_index: Tensor,
    cfg: AlgoConfig,
    values: Tensor | None = None,
    token_rewards: Tensor | None = None,
    counted: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """REINFORCE++ (Hu 2025): discounted token-level returns, normalised over the whole batch.

    r_t = R * [t is the last trained token] + token_rewards_t (e.g. -beta * KL_t);
    G_t = sum_{s >= t, trained} gamma^(k_s - k_t) r_s (k = index among trained tokens);
    A_t = (G_t - mean_batch(G)) / (std_batch(G) + eps) over all trained tokens of the batch.
    """
    return _reinforce_pp_from_outcome(rewards.to(mask.dtype), mask, cfg, token_rewards)


@torch.no_grad()
def reinforce_pp_baseline(
    rewards: Tensor,
    mask: Tensor,
    group_index: Tensor,
    cfg: AlgoConfig,
    values: Tensor | None = None,
    token_rewards: Tensor | None = None,
    counted: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """REINFORCE++-baseline (Hu 2025): REINFORCE++ with the outcome reward centred by its group mean.

    R'_i = R_i - mean_g(R); then as ``reinforce_pp`` with R' in place of R (token rewards, discounted
    returns, whole-batch normalisation). A group of one has R' = 0.
    """
    outcome = rewards.to(mask.dtype)  # [B]
    mean, _, _ = _group_stats(outcome, group_index, counted)  # [B]
    return _reinforce_pp_from_outcome(outcome - mean, mask, cfg, token_rewards)


@torch.no_grad()
def gae(
    rewards: Tensor,
    mask: Tensor,
    group_index: Tensor,
    cfg: AlgoConfig,
    values: Tensor | None = None,
    token_rewards: Tensor | None = None,
    counted: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation with a value head (Schulman et al. 2016).

    Over trained tokens only (environment tokens skipped): delta_t = r_t + gamma * V_{t'} - V_t with t'
    the next trained token (V = 0 after the last), A_t = delta_t + gamma * lam * A_{t'};
    returns_t = A_t + V_t (the value target). r_t is as in ``reinforce_pp``. With ``whiten_gae`` the
    advantages (not the returns) are normalised over the batch's trained tokens.
    """
    if values is None:
        raise ValueError("advantage 'gae' needs values [B, T] from a value head; got values=None")
    per_token = rewards.to(mask.dtype)[:, None] * _last_token_onehot(mask)  # [B, T]
    if token_rewards is not None:
        per_token = per_token + token_rewards * mask  # [B, T]
    values = values.to(mask.dtype) * mask  # [B, T]
    next_value = torch.zeros_like(per_token[:, 0])  # [B]
    last_gae = torch.zeros_like(per_token[:, 0])  # [B]
    columns = []
    for t in reversed(range(per_token.shape[1])):
        m = mask[:, t]  # [B]
        delta = per_token[:, t] + cfg.gamma * next_value - values[:, t]  # [B]
        last_gae = m * (delta + cfg.gamma * cfg.lam * last_gae) + (1 - m) * last_gae  # [B]
        next_value = m * values[:, t] + (1 - m) * next_value  # [B]
        columns.append(last_gae * m)  # [B]
    adv = torch.stack(columns[::-1], dim=1)  # [B, T]
    returns = (adv + values) * mask  # [B, T]
    if cfg.whiten_gae:
        adv = _masked_whiten(adv, mask, cfg.epsilon)  # [B, T]
    return adv, returns  # [B, T], [B, T]


ADVANTAGES: dict[str, AdvantageFn] = {
    "grpo": grpo,
    "drgrpo": drgrpo,
    "rloo": rloo,
    "reinforce_pp": reinforce_pp,
    "reinforce_pp_baseline": reinforce_pp_baseline,
    "gae": gae,
}


def compute_advantages(
    rewards: Tensor,
    mask: Tensor,
    group_index: Tensor,
    cfg: AlgoConfig,
    values: Tensor | None = None,
    token_rewards: Tensor | None = None,
    counted: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Run the estimator named by ``cfg.advantage``; returns (advantages [B, T], returns [B, T])."""
    return ADVANTAGES[cfg.advantage](
        rewards, mask, group_index, cfg, values=values, token_rewards=token_rewards, counted=counted
    )
