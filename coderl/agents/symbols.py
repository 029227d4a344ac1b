"""Functions of a Python file by name: where they are, their source, and replacing one whole.

What the ``swe`` loop's symbol tools (``show_function``, ``replace_function``) stand on, in the spirit
of the symbol-level tools coding agents use (Serena's ``find_symbol`` / ``replace_symbol_body``): a
function is named as written after ``def`` or qualified by its class (``Parser.parse``), and its
source is its lines from the first decorator to the last line of its body. A function's text
written without its docstring can be given the one it had (:func:`keep_docstring`), so an edit need
not copy a long docstring back. Parsing is Python's own ``ast``; nothing of the file is run.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


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


def docstring_span(text: str) -> tuple[int, int] | None:
    """Where the docstring of the function ``text`` defines (at any indentation) stands: its lines as
    a 0-based ``[start, end)`` range of ``text.splitlines()``; None where it has none, or where the
    docstring shares a line with other code (``def f(): "doc"``, ``"doc"; x = 1``)."""
    parsed = _function(text)
    return _span(*parsed) if parsed is not None else None


def _span(node: FunctionNode, lines: list[str]) -> tuple[int, int] | None:
    first = node.body[0]
    if not _is_docstring(first):
        return None
    start, end = first.lineno - 1, first.end_lineno or first.lineno
    head = lines[start].encode()[: first.col_offset].decode(errors="replace")
    tail = lines[end - 1].encode()[first.end_col_offset or 0 :].decode(errors="replace").strip()
    if head.strip() or (tail and not tail.startswith("#")):
        return None
    return start, end


def without_docstring(text: str) -> str:
    """``text`` with its function's docstring lines left out (unchanged where :func:`docstring_span`
    finds none, or where the docstring is the whole body)."""
    parsed = _function(text)
    span = _span(*parsed) if parsed is not None else None
    if span is None or parsed is None or len(parsed[0].body) < 2:
        return text
    lines = text.splitlines(keepends=True)
    return "".join([*lines[: span[0]], *lines[span[1] :]])


def keep_docstring(old: str, new: str) -> str | None:
    """``new`` with ``old``'s docstring put back: where ``old`` is a function with a docstring on lines
    of its own and ``new`` defines the function of that name (at its top level) with none, whose body
    starts on a line of its own. The docstring goes right after the signature, above the comments and
    blank lines before the body's first statement, re-indented to the body. None where there is nothing to keep or nowhere to put it."""
    old_parsed = _function(old)
    if old_parsed is None or (span := _span(*old_parsed)) is None:
        return None
    new_parsed = _function(new, old_parsed[0].name)
    if new_parsed is None:
        return None
    node, new_lines = new_parsed
    body = node.body[0]
    if _is_docstring(body):
        return None  # it has a docstring of its own
    at = min([body.lineno, *(d.lineno for d in getattr(body, "decorator_list", []))]) - 1
    if at <= node.lineno - 1 or new_lines[at][: body.col_offset].strip():
        return None  # the body starts on the def line
    while at - 1 > node.lineno - 1 and (not new_lines[at - 1].strip() or new_lines[at - 1].lstrip().startswith("#")):
        at -= 1  # right after the signature: above the comments and blank lines there
    original = new.splitlines(keepends=True)
    old_lines = old.splitlines(keepends=True)
    old_indent = _indent(old_lines[span[0]])
    new_indent = _indent(original[min(body.lineno - 1, len(original) - 1)])
    doc = [new_indent + line[len(old_indent) :] if line.startswith(old_indent) else line for line in old_lines[span[0] : span[1]]]
    if doc and not doc[-1].endswith("\n"):
        doc[-1] += "\n"
    return "".join([*original[:at], *doc, *original[at:]])


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _function(text: str, name: str | None = None) -> tuple[FunctionNode, list[str]] | None:
    """The first top-level function of ``text`` (the one named ``name`` where given), parsed with the
    first line's indentation taken off every line that has it, and those lines; None where ``text``
    does not parse or holds no such function. Line numbers are ``text``'s own."""
    lines = text.splitlines()
    indent = _indent(next((line for line in lines if line.strip()), ""))
    lines = [line[len(indent) :] if line.startswith(indent) else line for line in lines]
    try:
        tree = ast.parse("\n".join(lines))
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and name in (None, node.name):
            return node, lines
    return None
