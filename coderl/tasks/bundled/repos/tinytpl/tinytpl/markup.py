"""HTML escaping and the ``Markup`` safe-string type."""

from __future__ import annotations

from typing import Any


class Markup(str):
    """A string that is already safe HTML; autoescaping leaves it alone."""

    __slots__ = ()

    def __html__(self) -> "Markup":
        return self

    def __repr__(self) -> str:
        return f"Markup({str.__repr__(self)})"


_REPLACEMENTS = (
    ("&", "&amp;"),
    ("<", "&lt;"),
    (">", "&gt;"),
    ('"', "&quot;"),
    ("'", "&#39;"),
)


def escape(value: Any) -> Markup:
    """Escape ``value`` for use in HTML text and attribute values; Markup passes through."""
    if hasattr(value, "__html__"):
        return Markup(value.__html__())
    text = str(value)
    for char, entity in _REPLACEMENTS:
        text = text.replace(char, entity)
    return Markup(text)
