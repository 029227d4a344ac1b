"""The syntax tree: template nodes and expression nodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


# -- expressions ---------------------------------------------------------------------------


class Expr:
    """Base class for expression nodes."""


@dataclass
class Const(Expr):
    value: Any


@dataclass
class Name(Expr):
    name: str


@dataclass
class Getattr(Expr):
    """``obj.attr``: mapping key, then attribute, then (for digits) sequence index."""

    obj: Expr
    attr: str


@dataclass
class Filter(Expr):
    """``expr|name:arg1,arg2``; each argument is an expression evaluated at render time."""

    expr: Expr
    name: str
    args: list[Expr] = field(default_factory=list)


@dataclass
class Not(Expr):
    operand: Expr


@dataclass
class And(Expr):
    left: Expr
    right: Expr


@dataclass
class Or(Expr):
    left: Expr
    right: Expr


@dataclass
class Compare(Expr):
    left: Expr
    op: str  # one of == != < > <= >= in "not in"
    right: Expr


# -- template nodes ------------------------------------------------------------------------


class Node:
    """Base class for template nodes."""


@dataclass
class Text(Node):
    text: str


@dataclass
class Output(Node):
    expr: Expr
    lineno: int


@dataclass
class If(Node):
    branches: list[tuple[Expr, list[Node]]]  # the if and every elif, in order
    else_body: list[Node]


@dataclass
class For(Node):
    targets: list[str]  # one name, or several for tuple unpacking
    iterable: Expr
    body: list[Node]
    else_body: list[Node]  # rendered when the iterable is empty
    lineno: int


@dataclass
class Set(Node):
    name: str
    expr: Expr


@dataclass
class Include(Node):
    template: Expr
    lineno: int
