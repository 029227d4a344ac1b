"""Human-readable numbers, clock durations and network rates."""

import math
from fractions import Fraction

_BIT_UNITS = ("bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s")


def format_thousands(n: int, sep: str = ",", group: int = 3) -> str:
    """1234567 -> '1,234,567'; the sign stays in front ('-1,000')."""
    if group < 1:
        raise ValueError(f"group must be at least 1, got {group}")
    digits = str(abs(n))
    chunks = []
    while len(digits) > group:
        chunks.append(digits[-group:])
        digits = digits[:-group]
    chunks.append(digits)
    text = sep.join(reversed(chunks))
    return "-" + text if n < 0 else text


def format_hms(seconds: int) -> str:
    """3723 -> '1h 02m 03s', 123 -> '2m 03s', 7 -> '7s'; hours never roll over into days."""
    if seconds < 0:
        raise ValueError("seconds must not be negative")
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours > 0:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes > 0:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def format_bitrate(bits_per_second: float, precision: int = 1) -> str:
    """Decimal network rate: 1500000 -> '1.5 Mbit/s'; below 1000 it is whole bits ('999 bit/s')."""
    if bits_per_second < 0:
        raise ValueError("a bitrate must not be negative")
    value = float(bits_per_second)
    index = 0
    while index < len(_BIT_UNITS) - 1 and round(value, precision) >= 1000:
        value /= 1000
        index += 1
    if index == 0:
        return f"{int(value)} bit/s"
    return f"{value:.{precision}f} {_BIT_UNITS[index]}"


def transfer_seconds(size_bytes: int, bits_per_second: int, overhead: float = 0) -> int:
    """Whole seconds (rounded up) to send ``size_bytes`` at ``bits_per_second`` with ``overhead`` percent extra."""
    if bits_per_second <= 0:
        raise ValueError("bits_per_second must be positive")
    if size_bytes < 0 or overhead < 0:
        raise ValueError("size and overhead must not be negative")
    bits = Fraction(size_bytes * 8) * (100 + Fraction(str(overhead))) / 100
    return math.ceil(bits / bits_per_second)
