"""argparse ``type`` functions for numeric flags: a bad value is argparse's usage error naming the flag,
the value and what is valid (no traceback). Light: ``--help`` imports it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def at_least(minimum: float, kind: type[int] | type[float] = int) -> Callable[[str], Any]:
    """An argparse ``type``: a number (``kind``) of at least ``minimum``; argparse's usage error names
    the flag, the value and the bound otherwise."""
    noun = "an integer" if kind is int else "a number"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: must be {noun} of at least {minimum:g}")
        return value

    return parse


def number_list(kind: type[int] | type[float] = int, allow_empty: bool = False) -> Callable[[str], list[Any]]:
    """An argparse ``type``: comma-separated numbers (``kind``), e.g. ``0,1,2``."""
    example = "0,1,2" if kind is int else "0.6,0.8,1.0"
    noun = "integers" if kind is int else "numbers"

    def parse(text: str) -> list[Any]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items and not allow_empty:
            raise argparse.ArgumentTypeError(f"give at least one, comma-separated (e.g. {example})")
        try:
            return [kind(x) for x in items]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a comma-separated list of {noun} (e.g. {example})"
            ) from None

    return parse


def port_number(text: str) -> int:
    """An argparse ``type``: a TCP port, 0 (any free one) to 65535."""
    value = at_least(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: a port is 0 (any free one) to 65535")
    return int(value)
