"""coderl.rl.sampling: DAPO dynamic sampling and soft overlong punishment."""

from __future__ import annotations

import random

import pytest
import torch

from coderl.rl import filter_groups, format_bonus, keep_groups, overlong_penalty

# ---------------------------------------------------------------------------------------------------------
# Independent references.
# ---------------------------------------------------------------------------------------------------------


def ref_keep(rewards: list[float], group_ids: list[str]) -> list[int]:
    by_group: dict[str, set[float]] = {}
    for r, g in zip(rewards, group_ids, strict=True):
        by_group.setdefault(g, set()).add(r)
    return sorted(i for i, g in enumerate(group_ids) if len(by_group[g]) > 1)


def ref_overlong(length: int, max_len: int, buffer: int, penalty: float) -> float:
    if buffer == 0 or length <= max_len - buffer:
        return 0.0
    if length <= max_len:
        return (max_len - buffer - length) / buffer * penalty
    return -penalty


# ---------------------------------------------------------------------------------------------------------
# Dynamic sampling.
# ---------------------------------------------------------------------------------------------------------


def test_keep_groups_by_hand() -> None:
    # a: [1, 0] informative; b: [1, 1] all solved; c: [0.5] alone (all equal); d: [0, 0, 0.25] informative.
    rewards = [1.0, 1.0, 0.0, 1.0, 0.5, 0.0, 0.0, 0.25]
    groups = ["a", "b", "a", "b", "c", "d", "d", "d"]
    assert keep_groups(rewards, groups) == [0, 2, 5, 6, 7]
    assert keep_groups(rewards, groups, atol=0.3) == [0, 2]
    assert keep_groups([], []) == []


@pytest.mark.parametrize("seed", range(5))
def test_keep_groups_matches_reference(seed: int) -> None:
    rng = random.Random(seed)
    groups = [rng.choice("pqrstu") for _ in range(40)]
    rewards = [rng.choice([0.0, 1.0]) if g != "u" else 0.5 for g in groups]
    assert keep_groups(rewards, groups) == ref_keep(rewards, groups)


def test_keep_groups_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        keep_groups([1.0], ["a", "b"])


def test_filter_groups_reports_missing_and_truncates() -> None:
    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    groups = ["a", "a", "b", "b", "c", "c", "d", "d"]  # b is uninformative
    short = filter_groups(rewards, groups, target_groups=4)
    assert (short.keep, short.kept_groups, short.missing_groups) == ([0, 1, 4, 5, 6, 7], 3, 1)
    full = filter_groups(rewards, groups, target_groups=2)
    assert (full.keep, full.kept_groups, full.missing_groups) == ([0, 1, 4, 5], 2, 0)


# ---------------------------------------------------------------------------------------------------------
# Soft overlong punishment.
# ---------------------------------------------------------------------------------------------------------


def test_overlong_penalty_by_hand() -> None:
    # max_len 100, buffer 20, penalty 1: the ramp runs over (80, 100].
    # 50 -> 0; 80 -> 0; 90 -> (80 - 90) / 20 = -0.5; 100 -> -1; 130 -> -1.
    lengths = torch.tensor([50, 80, 90, 100, 130])
    out = overlong_penalty(lengths, max_len=100, buffer=20, penalty=1.0)
    torch.testing.assert_close(out, torch.tensor([0.0, 0.0, -0.5, -1.0, -1.0]))
    # penalty 0.5 halves it; buffer 0 turns it off.
    torch.testing.assert_close(
        overlong_penalty(lengths, 100, 20, 0.5), torch.tensor([0.0, 0.0, -0.25, -0.5, -0.5])
    )
    torch.testing.assert_close(overlong_penalty(lengths, 100, 0, 1.0), torch.zeros(5))


@pytest.mark.parametrize(("max_len", "buffer", "penalty"), [(64, 16, 1.0), (64, 64, 0.3), (10, 3, 2.0)])
def test_overlong_penalty_matches_reference(max_len: int, buffer: int, penalty: float) -> None:
    lengths = list(range(0, 2 * max_len))
    out = overlong_penalty(torch.tensor(lengths), max_len, buffer, penalty)
    expected = torch.tensor([ref_overlong(n, max_len, buffer, penalty) for n in lengths])
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)


def test_format_bonus_by_hand() -> None:
    errors = torch.tensor([0.0, 1.0, 3.0, 5.0, 0.0])  # [B]
    turns = torch.tensor([4.0, 4.0, 3.0, 3.0, 0.0])  # [B] (the last: nothing sampled)
    got = format_bonus(errors, turns, 0.2)
    assert torch.allclose(got, torch.tensor([0.2, 0.15, 0.0, 0.0, 0.0]))
    assert torch.equal(format_bonus(errors, turns, 0.0), torch.zeros(5))
