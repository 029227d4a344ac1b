"""Seeded AST mutations of library code: where a plausible one-line bug can be put, and its text.

Every mutation is a small textual edit of the original source at an AST node's exact position (the
rest of the file, comments and formatting included, stays as it was), so the gold patch that undoes
it is a one-hunk diff. Kinds, after the bug classes that SWE-smith and mutation testing use:

- ``operator``: an arithmetic operator swapped (``+`` / ``-``, ``*`` -> ``+``, ``/`` -> ``*`` ...);
- ``comparison``: a comparison made off by its boundary or negated (``<`` / ``<=``, ``==`` / ``!=``,
  ``in`` / ``not in``, ``is`` / ``is not``);
- ``boolean``: ``and`` / ``or`` swapped;
- ``negation``: an ``if`` / ``while`` condition negated (or its ``not`` dropped);
- ``off_by_one``: an integer in a comparison, index, slice, arithmetic or ``range`` call moved by one;
- ``swap_args``: the first two positional arguments of a call swapped;
- ``drop_branch``: an ``else`` branch, or a guard clause (``if ...: return / raise / continue / break``),
  removed;
- ``drop_return``: ``return value`` turned into a bare expression (the function falls through);
- ``constant``: ``True`` / ``False`` flipped, an integer default argument or module constant moved by one.

A mutation that does not parse is never offered; test files are never mutated.
"""

from __future__ import annotations

import ast
import io
import random
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass

KINDS = (
    "operator", "comparison", "boolean", "negation", "off_by_one", "swap_args", "drop_branch",
    "drop_return", "constant",
)  # fmt: skip

BINOP_SWAP: dict[type[ast.operator], tuple[str, str]] = {
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "+"),
    ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "/"),
    ast.Mod: ("%", "//"),
}
COMPARE_SWAP: dict[type[ast.cmpop], tuple[str, str]] = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
}


@dataclass(frozen=True)
class Mutation:
    """One edit of ``path``'s source: characters ``start:end`` become ``replacement``."""

    path: str
    kind: str
    start: int
    end: int
    replacement: str
    line: int
    """1-based line of the edit in the original source."""
    function: str
    """Qualified name of the enclosing function ('' at module level)."""

    def apply(self, source: str) -> str:
        return source[: self.start] + self.replacement + source[self.end :]


class _Source:
    """Character offsets of AST positions (which count UTF-8 bytes within a line)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1] if lineno - 1 < len(self.lines) else ""
        return self.starts[lineno - 1] + len(line.encode()[:col].decode(errors="ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def line_span(self, first: int, last: int) -> tuple[int, int]:
        """Whole lines ``first..last`` (1-based, inclusive), newline included."""
        return self.starts[first - 1], self.starts[last]


def _operator_between(src: _Source, start: int, end: int) -> tuple[int, int, str] | None:
    """The operator written between two operands: its span and text (tokens other than brackets,
    joined by one space: ``<=``, ``not in``, ``and``)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(src.text[start:end]).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    parts = [t for t in tokens if t.type in (tokenize.OP, tokenize.NAME) and t.string not in "()[]{}"]
    if not parts:
        return None
    lines = src.text[start:end].splitlines(keepends=True)
    base = [0]
    for line in lines:
        base.append(base[-1] + len(line))
    first, last = parts[0], parts[-1]
    op_start = start + base[first.start[0] - 1] + first.start[1]
    op_end = start + base[last.end[0] - 1] + last.end[1]
    return op_start, op_end, " ".join(t.string for t in parts)


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str, src: _Source) -> None:
        self.path = path
        self.src = src
        self.scope: list[str] = []
        self.found: list[Mutation] = []

    # ------------------------------------------------------------------ helpers
    def add(self, kind: str, start: int, end: int, replacement: str, line: int) -> None:
        if self.src.text[start:end] != replacement:
            self.found.append(Mutation(self.path, kind, start, end, replacement, line, ".".join(self.scope)))

    def add_node(self, kind: str, node: ast.AST, replacement: str) -> None:
        start, end = self.src.span(node)
        self.add(kind, start, end, replacement, node.lineno)  # type: ignore[attr-defined]

    def _int_shift(self, node: ast.AST, kind: str) -> None:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            self.add_node(kind, node, str(node.value + 1))
            if node.value > 0:
                self.add_node(kind, node, str(node.value - 1))

    # ------------------------------------------------------------------ scopes (annotations are skipped)
    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
            if isinstance(default, ast.Constant) and isinstance(default.value, bool):
                self.add_node("constant", default, str(not default.value))
            else:
                self._int_shift(default, "constant")
        self.scope.append(node.name)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        for stmt in body:
            self.visit(stmt)
        self.scope.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        for stmt in node.body:
            self.visit(stmt)
        self.scope.pop()

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_Assign(self, node: ast.Assign) -> None:
        if not self.scope and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets):
            self._int_shift(node.value, "constant")  # a module constant
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        if _is_main_guard(node):
            return
        self._negate(node.test)
        self._drop_branch(node)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._negate(node.test)
        self.generic_visit(node)

    # ------------------------------------------------------------------ the mutations
    def visit_BinOp(self, node: ast.BinOp) -> None:
        swap = BINOP_SWAP.get(type(node.op))
        found = _operator_between(self.src, self.src.span(node.left)[1], self.src.span(node.right)[0])
        if swap and found and found[2] == swap[0]:
            self.add("operator", found[0], found[1], swap[1], node.lineno)
        for side in (node.left, node.right):
            self._int_shift(side, "off_by_one")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
            swap = COMPARE_SWAP.get(type(op))
            found = _operator_between(self.src, self.src.span(left)[1], self.src.span(right)[0])
            if swap and found and found[2] == swap[0]:
                self.add("comparison", found[0], found[1], swap[1], node.lineno)
        for operand in operands:
            self._int_shift(operand, "off_by_one")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        word, other = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        found = _operator_between(
            self.src, self.src.span(node.values[0])[1], self.src.span(node.values[1])[0]
        )
        if found and found[2] == word:
            self.add("boolean", found[0], found[1], other, node.lineno)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        index = node.slice
        for part in (index.lower, index.upper, index.step) if isinstance(index, ast.Slice) else (index,):
            if part is not None:
                self._int_shift(part, "off_by_one")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "range":
            for arg in node.args:
                self._int_shift(arg, "off_by_one")
        args = node.args
        if len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2]):
            first, second = self.src.segment(args[0]), self.src.segment(args[1])
            if first != second:
                start, end = self.src.span(args[0])[0], self.src.span(args[1])[1]
                between = self.src.text[self.src.span(args[0])[1] : self.src.span(args[1])[0]]
                self.add("swap_args", start, end, second + between + first, node.lineno)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None and self.scope:
            start = self.src.offset(node.lineno, node.col_offset)
            self.add("drop_return", start, self.src.span(node.value)[0], "", node.lineno)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, bool):
            self.add_node("constant", node, str(not node.value))

    def _negate(self, test: ast.expr) -> None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self.add_node("negation", test, self.src.segment(test.operand))
            return
        text = self.src.segment(test)
        wrap = isinstance(test, (ast.BoolOp, ast.IfExp, ast.NamedExpr, ast.Lambda, ast.Compare))
        self.add_node("negation", test, f"not ({text})" if wrap else f"not {text}")

    def _drop_branch(self, node: ast.If) -> None:
        if node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
            after_body = node.body[-1].end_lineno or node.lineno
            else_line = next(
                (n for n in range(after_body + 1, node.orelse[0].lineno + 1)
                 if self.src.lines[n - 1].strip().startswith("else")),
                None,
            )  # fmt: skip
            if else_line is not None:
                start, end = self.src.line_span(else_line, node.orelse[-1].end_lineno or else_line)
                self.add("drop_branch", start, end, "", else_line)
        elif (
            not node.orelse
            and len(node.body) == 1
            and isinstance(node.body[0], (ast.Return, ast.Raise, ast.Continue, ast.Break))
        ):
            start, end = self.src.line_span(node.lineno, node.end_lineno or node.lineno)
            self.add("drop_branch", start, end, "", node.lineno)


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def find_mutations(path: str, source: str) -> list[Mutation]:
    """Every mutation of ``source`` (the file at repo-relative ``path``) that still parses, one per
    distinct resulting text, in source order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    finder = _Finder(path, _Source(source))
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the module docstring
    for stmt in body:
        finder.visit(stmt)
    seen: set[str] = set()
    valid: list[Mutation] = []
    for m in sorted(finder.found, key=lambda m: (m.start, m.kind, m.replacement)):
        mutated = m.apply(source)
        if mutated in seen or mutated == source:
            continue
        try:
            ast.parse(mutated)
        except SyntaxError:
            continue
        seen.add(mutated)
        valid.append(m)
    return valid


def interleave(mutations: list[Mutation], seed: int) -> Iterator[Mutation]:
    """The mutations in a seeded order that takes each kind in turn (so no kind crowds out the others)."""
    rng = random.Random(seed)
    by_kind: dict[str, list[Mutation]] = {}
    for m in mutations:
        by_kind.setdefault(m.kind, []).append(m)
    for group in by_kind.values():
        rng.shuffle(group)
    kinds = sorted(by_kind)
    rng.shuffle(kinds)
    while any(by_kind.values()):
        for kind in kinds:
            if by_kind[kind]:
                yield by_kind[kind].pop()
