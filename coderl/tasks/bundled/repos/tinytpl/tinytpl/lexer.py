"""Split template source into text, variable (``{{ }}``) and block (``{% %}``) tokens.

Comments (``{# ... #}``) produce no token. A ``-`` right inside a delimiter (``{{-``, ``-%}``,
``{#-`` ...) removes all whitespace, newlines included, on that side of the tag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import TemplateSyntaxError

TEXT = "text"
VAR = "var"
BLOCK = "block"

_OPEN_RE = re.compile(r"\{[{%#]")
_CLOSERS = {"{{": "}}", "{%": "%}", "{#": "#}"}
_WHAT = {"{{": "variable tag", "{%": "block tag", "{#": "comment"}


@dataclass(frozen=True)
class Token:
    kind: str
    value: str
    lineno: int


def _find_close(source: str, start: int, closer: str, skip_strings: bool) -> int:
    """Index of ``closer`` at or after ``start`` (-1 if absent), skipping string literals."""
    if not skip_strings:
        return source.find(closer, start)
    quote = None
    i = start
    while i < len(source):
        ch = source[i]
        if quote is not None:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif source.startswith(closer, i):
            return i
        i += 1
    return -1


def tokenize(source: str, name: str | None = None) -> list[Token]:
    """Return the tokens of ``source``; raises TemplateSyntaxError for an unclosed tag."""
    tokens: list[Token] = []
    pos = 0
    lineno = 1
    strip_next = False
    while True:
        match = _OPEN_RE.search(source, pos)
        start = match.start() if match else len(source)
        text = source[pos:start]
        text_lineno = lineno
        lineno += text.count("\n")
        if strip_next:
            text = text.lstrip()
        if match is None:
            if text:
                tokens.append(Token(TEXT, text, text_lineno))
            return tokens

        opener = match.group()
        inner_start = start + 2
        if source.startswith("-", inner_start):
            inner_start += 1
            text = text.rstrip()
        if text:
            tokens.append(Token(TEXT, text, text_lineno))

        closer = _CLOSERS[opener]
        end = _find_close(source, inner_start, closer, skip_strings=opener != "{#")
        if end < 0:
            raise TemplateSyntaxError(f"unclosed {_WHAT[opener]} (missing {closer!r})", lineno, name)
        inner = source[inner_start:end]
        strip_next = inner.endswith("-")
        if strip_next:
            inner = inner[:-1]
        pos = end + len(closer)

        tag_lineno = lineno
        lineno += inner.count("\n")
        if opener == "{#":
            continue
        inner = inner.strip()
        if not inner:
            raise TemplateSyntaxError(f"empty {_WHAT[opener]}", tag_lineno, name)
        tokens.append(Token(VAR if opener == "{{" else BLOCK, inner, tag_lineno))
