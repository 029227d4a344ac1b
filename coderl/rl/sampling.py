"""DAPO batch shaping (Yu et al. 2025): dynamic sampling and soft overlong punishment.

Dynamic sampling: a group whose samples all got the same reward has zero advantage under every
group-relative estimator and only dilutes the batch; DAPO drops such groups and keeps generating until
the batch holds the wanted number of informative groups. ``keep_groups`` selects the informative
samples; ``filter_groups`` also tells the trainer how many groups are still missing (refill while
``missing_groups > 0``) and truncates to the target.

Soft overlong punishment: a response that ran into the length limit is penalised, linearly over the
last ``buffer`` tokens before ``max_len``, instead of being truncated silently with its full reward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def keep_groups(rewards: list[float], group_ids: list[str], atol: float = 0.0) -> list[int]:
    """Indices (in order) of the samples whose group's rewards are not all equal (max - min > atol)."""
    if len(rewards) != len(group_ids):
        raise ValueError(f"rewards and group_ids differ in length: {len(rewards)} != {len(group_ids)}")
    low: dict[str, float] = {}
    high: dict[str, float] = {}
    for reward, gid in zip(rewards, group_ids, strict=True):
        low[gid] = min(low.get(gid, reward), reward)
        high[gid] = max(high.get(gid, reward), reward)
    return [i for i, gid in enumerate(group_ids) if high[gid] - low[gid] > atol]


@dataclass(frozen=True)
class GroupFilter:
    """What dynamic sampling keeps of a batch, and how many informative groups are still missing."""

    keep: list[int]
    """Indices of the kept samples: the first ``kept_groups`` informative groups in order of appearance."""
    kept_groups: int
    """Informative groups kept (at most the target)."""
    missing_groups: int
    """Informative groups the trainer must still generate to reach the target (0 = batch complete)."""


def filter_groups(
    rewards: list[float], group_ids: list[str], target_groups: int, atol: float = 0.0
) -> GroupFilter:
    """DAPO dynamic sampling over everything generated so far for this step.

    Keeps the samples of the first ``target_groups`` groups (by first appearance) whose rewards are not
    all equal; a trainer regenerates while ``missing_groups > 0`` (up to its own retry limit) and
    calls this again on the accumulated samples.
    """
    informative = keep_groups(rewards, group_ids, atol)
    chosen: list[str] = []
    for i in informative:
        if group_ids[i] not in chosen and len(chosen) < target_groups:
            chosen.append(group_ids[i])
    chosen_set = set(chosen)
    keep = [i for i in informative if group_ids[i] in chosen_set]
    return GroupFilter(keep=keep, kept_groups=len(chosen), missing_groups=max(0, target_groups - len(chosen)))


def overlong_penalty(lengths: Tensor, max_len: int, buffer: int, penalty: float) -> Tensor:
    """DAPO soft overlong punishment, added to the reward; [B] -> [B].

    R(|y|) = 0                                     if |y| <= L_max - L_cache
           = (L_max - L_cache - |y|) / L_cache * p  if L_max - L_cache < |y| <= L_max
           = -p                                    if |y| > L_max
    with L_max = max_len, L_cache = buffer, p = penalty. buffer = 0 turns it off (all zeros).
    """
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)  # [B]
    start = max_len - buffer
    over = (lengths.to(torch.float32) - start).clamp(min=0.0, max=float(buffer))  # [B]
    return -over / buffer * penalty  # [B]


def format_bonus(format_errors: Tensor, turns: Tensor, coef: float) -> Tensor:
    """Reward shaping for the tool-call format, added to the reward; [B], [B] -> [B].

    R_fmt = coef * (1 - e / n)  with e format errors in n turns (clamped to [0, coef]; n = 0 gives 0).
    A dense signal for a model that rarely solves a task yet: the share of its turns that were a
    well-formed call of an existing tool (the same idea as the format rewards of DeepSeek-R1).
    """
    turns_f = turns.to(torch.float32)  # [B]
    ok = (1.0 - format_errors.to(torch.float32) / turns_f.clamp(min=1.0)).clamp(0.0, 1.0)  # [B]
    return torch.where(turns_f > 0, coef * ok, torch.zeros_like(ok))  # [B]
