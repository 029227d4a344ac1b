"""Roman numerals and a few counting helpers (a library coderl's tests synthesise tasks from)."""

from romankit.numerals import from_roman, to_roman
from romankit.counting import chunks, clamp, running_total

__all__ = ["chunks", "clamp", "from_roman", "running_total", "to_roman"]
