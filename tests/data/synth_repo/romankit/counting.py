"""Small helpers over sequences of numbers."""


def clamp(value, low, high):
    """``value`` limited to [low, high]."""
    if low > high:
        raise ValueError("low must not exceed high")
    return max(low, min(value, high))


def running_total(values, start=0):
    """Cumulative sums, starting from ``start``."""
    out = []
    total = start
    for v in values:
        total += v
        out.append(total)
    return out


def chunks(items, size):
    """Consecutive pieces of ``items`` of length ``size`` (the last may be shorter)."""
    if size < 1:
        raise ValueError("size must be at least 1")
    return [items[i : i + size] for i in range(0, len(items), size)]
