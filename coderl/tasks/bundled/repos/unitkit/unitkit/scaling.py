"""Rounding to a step, mapping between ranges and relative change."""

import math
from fractions import Fraction


def round_to_step(value: float, step: float, offset: float = 0) -> float:
    """Nearest multiple of ``step`` (shifted by ``offset``), halves going up: (7.5, 5) -> 10.0, (-7.5, 5) -> -5.0."""
    if step <= 0:
        raise ValueError(f"step must be positive, got {step}")
    v, s, o = (Fraction(str(x)) for x in (value, step, offset))
    steps = math.floor((v - o) / s + Fraction(1, 2))
    return float(steps * s + o)


def rescale(value: float, src_low: float, src_high: float, dst_low: float, dst_high: float, clamp: bool = True) -> float:
    """Map ``value`` from [src_low, src_high] onto [dst_low, dst_high]; outside values are clamped unless clamp=False."""
    if src_low == src_high:
        raise ValueError("the source range is empty")
    t = (value - src_low) / (src_high - src_low)
    if clamp:
        t = min(max(t, 0.0), 1.0)
    return dst_low + t * (dst_high - dst_low)


def percent_change(old: float, new: float, digits: int = 1) -> float:
    """Change from ``old`` to ``new`` in percent of abs(old): (50, 75) -> 50.0, (-10, -5) -> 50.0."""
    if old == 0:
        raise ValueError("percent change from zero is undefined")
    change = (new - old) / abs(old) * 100
    return round(change, digits)
