"""The built-in filters. A filter is ``func(value, *args)``; register more via Environment(filters=...)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from .markup import Markup, escape
from .runtime import Undefined


def _text(value: Any) -> str:
    return "" if value is None or isinstance(value, Undefined) else str(value)


def _keep_safe(original: Any, result: str) -> str:
    """String filters keep a Markup value safe."""
    return Markup(result) if isinstance(original, Markup) else result


def upper(value: Any) -> str:
    return _keep_safe(value, _text(value).upper())


def lower(value: Any) -> str:
    return _keep_safe(value, _text(value).lower())


def capitalize(value: Any) -> str:
    return _keep_safe(value, _text(value).capitalize())


def title(value: Any) -> str:
    return _keep_safe(value, _text(value).title())


def trim(value: Any) -> str:
    return _keep_safe(value, _text(value).strip())


def default(value: Any, fallback: Any = "", boolean: bool = False) -> Any:
    """``fallback`` when ``value`` is undefined or None (or, with ``boolean``, any falsy value)."""
    if value is None or isinstance(value, Undefined) or (boolean and not value):
        return fallback
    return value


def length(value: Any) -> int:
    return len(value)


def join(value: Any, separator: str = "") -> str:
    return str(separator).join(_text(item) for item in value)


def first(value: Any) -> Any:
    for item in value:
        return item
    return Undefined("first")


def last(value: Any) -> Any:
    items = list(value)
    return items[-1] if items else Undefined("last")


def truncate(value: Any, size: int = 80, end: str = "...") -> str:
    """Cut to at most ``size`` characters, ``end`` included."""
    text = _text(value)
    if len(text) <= size:
        return text
    return text[: max(size - len(end), 0)] + end


def replace(value: Any, old: str, new: str) -> str:
    return _text(value).replace(str(old), str(new))


def safe(value: Any) -> Markup:
    return Markup(_text(value))


def string(value: Any) -> str:
    return _text(value)


def to_int(value: Any, fallback: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return fallback


def items(value: Mapping) -> list:
    return list(value.items())


def dictsort(value: Mapping) -> list:
    return sorted(value.items())


def reverse(value: Any) -> Any:
    if isinstance(value, str):
        return value[::-1]
    return list(reversed(list(value)))


def sort(value: Any, reverse: bool = False) -> list:
    return sorted(value, reverse=reverse)


DEFAULT_FILTERS: dict[str, Callable[..., Any]] = {
    "upper": upper,
    "lower": lower,
    "capitalize": capitalize,
    "title": title,
    "trim": trim,
    "default": default,
    "d": default,
    "length": length,
    "count": length,
    "join": join,
    "first": first,
    "last": last,
    "truncate": truncate,
    "replace": replace,
    "escape": escape,
    "e": escape,
    "safe": safe,
    "string": string,
    "int": to_int,
    "items": items,
    "dictsort": dictsort,
    "reverse": reverse,
    "sort": sort,
}
