"""Searching and selecting within sequences."""

from collections.abc import Hashable, Sequence
from typing import Any


def binary_search(items: Sequence[Any], target: Any) -> int:
    """Index of ``target`` in the sorted ``items``, or -1 when absent."""
    lo, hi = 0, len(items) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if items[mid] < target:
            lo = mid + 1
        elif items[mid] > target:
            hi = mid - 1
        else:
            return mid
    return -1


def lower_bound(items: Sequence[Any], target: Any) -> int:
    """First index where ``target`` could be inserted keeping ``items`` sorted."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def argmax(items: Sequence[Any]) -> int:
    """Index of the largest item (the first one on ties); ValueError when empty."""
    if not items:
        raise ValueError("argmax of an empty sequence")
    best = 0
    for i in range(1, len(items)):
        if items[i] > items[best]:
            best = i
    return best


def argmin(items: Sequence[Any]) -> int:
    """Index of the smallest item (the first one on ties); ValueError when empty."""
    if not items:
        raise ValueError("argmin of an empty sequence")
    best = 0
    for i in range(1, len(items)):
        if items[i] < items[best]:
            best = i
    return best


def find_duplicates(items: Sequence[Hashable]) -> list[Hashable]:
    """Items seen more than once, in the order of their first repeat."""
    seen: set[Hashable] = set()
    reported: set[Hashable] = set()
    out: list[Hashable] = []
    for item in items:
        if item in seen and item not in reported:
            reported.add(item)
            out.append(item)
        seen.add(item)
    return out


def majority(items: Sequence[Hashable]) -> Hashable | None:
    """The item occurring in more than half of the positions, or None."""
    counts: dict[Hashable, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
        if counts[item] * 2 > len(items):
            return item
    return None


def second_largest(items: Sequence[Any], default: Any = None) -> Any:
    """The second largest distinct value, or ``default`` when there is none."""
    first = second = None
    for item in items:
        if first is None or item > first:
            if first is not None:
                second = first
            first = item
        elif item < first and (second is None or item > second):
            second = item
    return default if second is None else second


def is_sorted(items: Sequence[Any], strict: bool = False) -> bool:
    """True when ``items`` is in ascending order (strictly ascending with ``strict``)."""
    for i in range(1, len(items)):
        if strict and items[i - 1] >= items[i]:
            return False
        if items[i - 1] > items[i]:
            return False
    return True
