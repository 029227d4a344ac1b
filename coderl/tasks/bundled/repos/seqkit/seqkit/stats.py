"""Running totals and order statistics over sequences."""

from collections.abc import Iterable, Sequence
from typing import Any


def cumulative_sums(values: Iterable[float], start: float = 0) -> list[float]:
    """Running totals, beginning from ``start``."""
    out: list[float] = []
    total = start
    for value in values:
        total += value
        out.append(total)
    return out


def moving_average(values: Sequence[float], size: int) -> list[float]:
    """Means of every full window of ``size`` consecutive values; ValueError when size < 1."""
    if size < 1:
        raise ValueError("size must be >= 1")
    if len(values) < size:
        return []
    total = sum(values[:size])
    out = [total / size]
    for i in range(size, len(values)):
        total += values[i] - values[i - size]
        out.append(total / size)
    return out


def longest_increasing_run(values: Sequence[Any]) -> list[Any]:
    """Longest contiguous strictly increasing stretch (the first one on ties)."""
    if not values:
        return []
    best_start, best_len = 0, 1
    start = 0
    for i in range(1, len(values)):
        if values[i] <= values[i - 1]:
            start = i
        if i - start + 1 > best_len:
            best_start, best_len = start, i - start + 1
    return list(values[best_start:best_start + best_len])


def count_inversions(values: Sequence[Any]) -> int:
    """Number of pairs ``i < j`` with ``values[i] > values[j]``."""
    count = 0
    n = len(values)
    for i in range(n):
        for j in range(i + 1, n):
            if values[i] > values[j]:
                count += 1
    return count


def top_k(values: Sequence[Any], k: int) -> list[Any]:
    """The ``k`` largest values, largest first; equal values keep their original order."""
    if k < 0:
        raise ValueError("k must be >= 0")
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))
    return [values[i] for i in order[:k]]


def range_summary(values: Iterable[int]) -> str:
    """Summarise integers as ranges: [1, 2, 3, 5, 7, 8] -> '1-3,5,7-8' (sorted, duplicates ignored)."""
    parts: list[str] = []
    nums = sorted(set(values))
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(parts)
