"""Token-id list helpers shared by the engine (prefix cache, prompt sharing), the trainer (packing
shared prefixes) and the proxy (merging calls into trajectories).

Owns: comparisons of id lists. Must not: import torch (the proxy's light processes use it).
"""

from __future__ import annotations


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists (a bisection over slice comparisons, which
    run in C: the engine compares every waiting prompt with the cached and running ones)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
