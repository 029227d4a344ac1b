"""Tokenizer and recursive-descent parser for the expressions inside tags.

Grammar, loosest binding first::

    or_expr    := and_expr ("or" and_expr)*
    and_expr   := not_expr ("and" not_expr)*
    not_expr   := "not" not_expr | comparison
    comparison := filtered (("==" | "!=" | "<" | ">" | "<=" | ">=" | "in" | "not" "in") filtered)?
    filtered   := primary ("|" NAME (":" primary ("," primary)*)?)*
    primary    := STRING | NUMBER | true | false | none | NAME ("." (NAME | NUMBER))* | "(" or_expr ")"
"""

from __future__ import annotations

import re
from collections.abc import Container

from .errors import TemplateSyntaxError
from .nodes import And, Compare, Const, Expr, Filter, Getattr, Name, Not, Or

_TOKEN_RE = re.compile(
    r"""
      (?P<ws>\s+)
    | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<number>\d+(?:\.\d+)?)
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>==|!=|<=|>=|[<>|:,.()=])
    """,
    re.VERBOSE | re.DOTALL,
)
_ESCAPE_RE = re.compile(r"\\(.)", re.DOTALL)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}
_CONSTANTS = {"true": True, "false": False, "none": None, "True": True, "False": False, "None": None}
_KEYWORDS = frozenset({"and", "or", "not", "in"})
_COMPARE_OPS = frozenset({"==", "!=", "<", ">", "<=", ">="})


def _unquote(literal: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), literal[1:-1])


def _number(text: str) -> int | float:
    return float(text) if "." in text else int(text)


def _lex(text: str, lineno: int, name: str | None) -> list[tuple[str, str]]:
    tokens = []
    pos = 0
    while pos < len(text):
        match = _TOKEN_RE.match(text, pos)
        if match is None:
            if text[pos] in "\"'":
                raise TemplateSyntaxError("unterminated string literal", lineno, name)
            raise TemplateSyntaxError(f"unexpected character {text[pos]!r}", lineno, name)
        pos = match.end()
        if match.lastgroup != "ws":
            tokens.append((match.lastgroup, match.group()))
    tokens.append(("end", ""))
    return tokens


class ExprParser:
    """Parses the text of one tag. ``filters`` is the set of known filter names."""

    def __init__(self, text: str, lineno: int, name: str | None = None, filters: Container[str] = ()):
        self.lineno = lineno
        self.name = name
        self.filters = filters
        self.tokens = _lex(text, lineno, name)
        self.pos = 0

    # -- token helpers ---------------------------------------------------------------------

    def fail(self, message: str) -> None:
        raise TemplateSyntaxError(message, self.lineno, self.name)

    def peek(self, offset: int = 0) -> tuple[str, str]:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def next(self) -> tuple[str, str]:
        tok = self.peek()
        if tok[0] != "end":
            self.pos += 1
        return tok

    def at_end(self) -> bool:
        return self.peek()[0] == "end"

    def expect_end(self) -> None:
        if not self.at_end():
            self.fail(f"unexpected {self.peek()[1]!r}")

    def skip_op(self, op: str) -> bool:
        if self.peek() == ("op", op):
            self.pos += 1
            return True
        return False

    def expect_op(self, op: str) -> None:
        if not self.skip_op(op):
            found = self.peek()[1] or "end of tag"
            self.fail(f"expected {op!r}, found {found!r}")

    def skip_keyword(self, word: str) -> bool:
        if self.peek() == ("name", word):
            self.pos += 1
            return True
        return False

    def expect_name(self, what: str) -> str:
        kind, value = self.next()
        if kind != "name":
            self.fail(f"expected {what}, found {value or 'end of tag'!r}")
        return value

    # -- grammar ---------------------------------------------------------------------------

    def parse_expression(self) -> Expr:
        return self.parse_or()

    def parse_or(self) -> Expr:
        node = self.parse_and()
        while self.skip_keyword("or"):
            node = Or(node, self.parse_and())
        return node

    def parse_and(self) -> Expr:
        node = self.parse_not()
        while self.skip_keyword("and"):
            node = And(node, self.parse_not())
        return node

    def parse_not(self) -> Expr:
        if self.skip_keyword("not"):
            return Not(self.parse_not())
        return self.parse_compare()

    def parse_compare(self) -> Expr:
        left = self.parse_filtered()
        kind, value = self.peek()
        if kind == "op" and value in _COMPARE_OPS:
            self.pos += 1
            return Compare(left, value, self.parse_filtered())
        if self.skip_keyword("in"):
            return Compare(left, "in", self.parse_filtered())
        if self.peek() == ("name", "not") and self.peek(1) == ("name", "in"):
            self.pos += 2
            return Compare(left, "not in", self.parse_filtered())
        return left

    def parse_filtered(self) -> Expr:
        node = self.parse_primary()
        while self.skip_op("|"):
            name = self.expect_name("a filter name")
            if name not in self.filters:
                self.fail(f"unknown filter {name!r}")
            args: list[Expr] = []
            if self.skip_op(":"):
                args.append(self.parse_primary())
                while self.skip_op(","):
                    args.append(self.parse_primary())
            node = Filter(node, name, args)
        return node

    def parse_primary(self) -> Expr:
        kind, value = self.next()
        if kind == "string":
            node: Expr = Const(_unquote(value))
        elif kind == "number":
            node = Const(_number(value))
        elif kind == "name" and value in _CONSTANTS:
            node = Const(_CONSTANTS[value])
        elif kind == "name" and value not in _KEYWORDS:
            node = Name(value)
        elif (kind, value) == ("op", "("):
            node = self.parse_expression()
            self.expect_op(")")
        else:
            self.fail(f"unexpected {value or 'end of tag'!r}, expected a value")
        while self.skip_op("."):
            kind, value = self.next()
            if kind not in ("name", "number") or "." in value:
                self.fail(f"expected an attribute name after '.', found {value or 'end of tag'!r}")
            node = Getattr(node, value)
        return node
