"""Functions of a Python file by name: where they are, their source, and replacing one whole.

What the ``swe`` loop's symbol tools (``show_function``, ``replace_function``) stand on, in the spirit
of the symbol-level tools coding agents use (Serena's ``find_symbol`` / ``replace_symbol_body``): a
function is named as written after ``def`` or qualified by its class (``Parser.parse``), and its
source is its lines from the first decorator to the last line of its body. Parsing is Python's own
``ast``; nothing of the file is run.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class FunctionSource:
    """One function of a file: its qualified name and its lines (1-based, inclusive)."""

    qualname: str
    first: int
    """The first decorator's line, or the ``def`` line."""
    last: int

    def text(self, source: str) -> str:
        """The function's source lines, newline-terminated."""
        lines = source.splitlines(keepends=True)
        block = "".join(lines[self.first - 1 : self.last])
        return block if block.endswith("\n") else block + "\n"


def functions(source: str) -> list[FunctionSource]:
    """Every function and method of ``source`` in file order (SyntaxError if it does not parse)."""
    found: list[FunctionSource] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found.append(FunctionSource(f"{prefix}{child.name}", first, child.end_lineno or child.lineno))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return sorted(found, key=lambda f: f.first)


def named(source: str, name: str) -> list[FunctionSource]:
    """The functions of ``source`` that ``name`` names: its qualified name (``Parser.parse``), that
    name after a module path (``pkg.parsers.Parser.parse``, ``humanize.natural_list``: how tests and
    issue texts call a library's functions), or its bare name (``parse``, also after a module path)
    when no qualified name matches. A part is taken for a module's only where it cannot be anything
    else: not a class or function of ``source`` (``put.inner`` is ``Box.put.inner`` or nothing) and not
    a class's CapWords name (``Parser.parse`` never names a ``parse`` outside ``Parser``)."""
    every = functions(source)
    parts = name.split(".")
    if not all(parts):
        return []
    defined = {part for f in every for part in f.qualname.split(".")}

    def module(part: str) -> bool:
        return part not in defined and not (part[0].isupper() and part != part.upper())

    for i in range(len(parts)):  # the whole name, then without its leading module parts, longest first
        if i and not module(parts[i - 1]):
            break
        exact = [f for f in every if f.qualname == ".".join(parts[i:])]
        if exact:
            return exact
    if not all(module(p) for p in parts[:-1]):
        return []
    return [f for f in every if f.qualname.rsplit(".", 1)[-1] == parts[-1]]


def replace_function(source: str, function: FunctionSource, text: str) -> str:
    """``source`` with ``function``'s lines replaced by ``text`` (a newline added if it lacks one)."""
    lines = source.splitlines(keepends=True)
    block = text if text.endswith("\n") else text + "\n"
    return "".join([*lines[: function.first - 1], block, *lines[function.last :]])
