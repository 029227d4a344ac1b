"""Objects used while rendering: undefined values, the variable scopes and loop state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class Undefined:
    """Stands for a missing variable or attribute: renders as "", is falsy and iterates empty."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return ""

    def __bool__(self) -> bool:
        return False

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Undefined)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"Undefined({self.name!r})"


def lookup(obj: Any, attr: str) -> Any:
    """Resolve ``obj.attr``: mapping key first, then sequence index for digits, then attribute."""
    if isinstance(obj, Undefined):
        return Undefined(f"{obj.name}.{attr}")
    if isinstance(obj, Mapping):
        if attr in obj:
            return obj[attr]
        if attr.isdigit() and int(attr) in obj:
            return obj[int(attr)]
    elif attr.isdigit() and isinstance(obj, Sequence):
        index = int(attr)
        return obj[index] if index < len(obj) else Undefined(attr)
    if attr.startswith("_"):
        return Undefined(attr)
    try:
        return getattr(obj, attr)
    except AttributeError:
        return Undefined(attr)


class Context:
    """A stack of variable scopes; lookups go from the innermost scope outwards."""

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self.scopes: list[dict[str, Any]] = [dict(data or {})]

    def push(self, scope: dict[str, Any] | None = None) -> None:
        self.scopes.append({} if scope is None else scope)

    def pop(self) -> None:
        if len(self.scopes) == 1:
            raise RuntimeError("cannot pop the global scope")
        self.scopes.pop()

    def set(self, name: str, value: Any) -> None:
        self.scopes[-1][name] = value

    def resolve(self, name: str) -> Any:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return Undefined(name)


class LoopInfo:
    """The ``loop`` variable inside ``{% for %}``."""

    __slots__ = ("index0", "index", "length", "first", "last", "revindex", "revindex0")

    def __init__(self, index0: int, length: int) -> None:
        self.index0 = index0
        self.index = index0 + 1
        self.length = length
        self.first = index0 == 0
        self.last = index0 == length - 1
        self.revindex = length - index0
        self.revindex0 = length - index0 - 1

    def __repr__(self) -> str:
        return f"<loop {self.index}/{self.length}>"
