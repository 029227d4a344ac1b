"""Reshaping and rearranging lists."""

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def rotate(items: Sequence[T], k: int) -> list[T]:
    """Rotate right by ``k`` places; negative ``k`` rotates left, ``k`` may exceed the length."""
    n = len(items)
    if n == 0:
        return []
    k %= n
    return list(items[n - k:]) + list(items[:n - k])


def interleave(first: Sequence[T], second: Sequence[T]) -> list[T]:
    """Alternate items of both lists, starting with ``first``; leftovers go at the end."""
    out: list[T] = []
    shorter = min(len(first), len(second))
    for i in range(shorter):
        out.append(first[i])
        out.append(second[i])
    out.extend(first[shorter:])
    out.extend(second[shorter:])
    return out


def run_length_encode(items: Iterable[T]) -> list[tuple[T, int]]:
    """Collapse runs of equal items into ``(item, count)`` pairs."""
    out: list[tuple[T, int]] = []
    for item in items:
        if out and out[-1][0] == item:
            out[-1] = (item, out[-1][1] + 1)
        else:
            out.append((item, 1))
    return out


def run_length_decode(pairs: Iterable[tuple[T, int]]) -> list[T]:
    """Expand ``(item, count)`` pairs; ValueError on a negative count."""
    out: list[T] = []
    for item, count in pairs:
        if count < 0:
            raise ValueError(f"negative count: {count}")
        out.extend([item] * count)
    return out


def merge_sorted(left: Sequence[Any], right: Sequence[Any]) -> list[Any]:
    """Merge two sorted lists into one sorted list; on ties ``left`` comes first."""
    out: list[Any] = []
    i = j = 0
    while i < len(left) and j < len(right):
        if right[j] < left[i]:
            out.append(right[j])
            j += 1
        else:
            out.append(left[i])
            i += 1
    out.extend(left[i:])
    out.extend(right[j:])
    return out


def dedupe_consecutive(items: Iterable[T]) -> list[T]:
    """Drop items equal to the one right before them."""
    out: list[T] = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return out


def transpose(matrix: Sequence[Sequence[T]]) -> list[list[T]]:
    """Swap rows and columns of a rectangular matrix; ValueError when rows differ in length."""
    if not matrix:
        return []
    width = len(matrix[0])
    for row in matrix:
        if len(row) != width:
            raise ValueError("ragged matrix")
    return [[matrix[r][c] for r in range(len(matrix))] for c in range(width)]


def split_at(items: Sequence[T], indices: Iterable[int]) -> list[list[T]]:
    """Cut ``items`` before each index (ascending, within bounds); ValueError otherwise."""
    out: list[list[T]] = []
    start = 0
    for index in indices:
        if index < start or index > len(items):
            raise ValueError(f"bad split index: {index}")
        out.append(list(items[start:index]))
        start = index
    out.append(list(items[start:]))
    return out


def pad_to(items: Sequence[T], length: int, fill: Any = None, left: bool = False) -> list[Any]:
    """Pad with ``fill`` (on the left with ``left``) or trim to exactly ``length`` items."""
    if length < 0:
        raise ValueError("length must be >= 0")
    if len(items) >= length:
        return list(items[len(items) - length:]) if left else list(items[:length])
    padding = [fill] * (length - len(items))
    return padding + list(items) if left else list(items) + padding
