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
- ``drop_branch``: an ``else`` or ``elif`` branch, or a guard clause (``if ...: return / raise /
  continue / break``), removed;
- ``drop_return``: ``return value`` turned into a bare expression (the function falls through);
- ``constant``: ``True`` / ``False`` flipped, an integer default argument or module constant moved by one;
- ``drop_kwarg``: a keyword argument of a call removed (``sorted(xs, reverse=True)`` -> ``sorted(xs)``);
- ``exception``: a built-in exception raised or caught replaced by a sibling (``KeyError`` ->
  ``IndexError``, ``ValueError`` -> ``TypeError`` ...);
- ``key``: a string key of a subscript, or an attribute of ``self``, replaced by another one the same
  file uses (``row["end"]`` -> ``row["start"]``, ``self.low`` -> ``self.high``);
- ``drop_statement``: a statement dropped from a loop body of two or more;
- ``feature_removal``: a small function's body (two to eight statements before its final ``return``)
  reduced to that return, when it only reads the parameters (a clamp that no longer clamps).

The last five are the kinds real bug-fix commits look like beyond mutation testing's operators.

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
    "drop_return", "constant", "drop_kwarg", "exception", "key", "drop_statement", "feature_removal",
)  # fmt: skip

EXCEPTION_SWAP = {
    "ValueError": "TypeError",
    "TypeError": "ValueError",
    "KeyError": "IndexError",
    "IndexError": "KeyError",
    "LookupError": "KeyError",
    "AttributeError": "TypeError",
    "RuntimeError": "ValueError",
    "ZeroDivisionError": "ValueError",
    "NotImplementedError": "RuntimeError",
    "OverflowError": "ValueError",
    "StopIteration": "RuntimeError",
    "FileNotFoundError": "OSError",
    "OSError": "RuntimeError",
}
"""A built-in exception and the sibling a buggy ``raise`` / ``except`` names instead."""
MAX_REMOVED_BODY = 8
"""``feature_removal``: at most this many statements before the final return are removed."""

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
    def __init__(self, path: str, src: _Source, tree: ast.Module) -> None:
        self.path = path
        self.src = src
        self.scope: list[str] = []
        self.found: list[Mutation] = []
        # the keys and self-attributes the file uses: a ``key`` mutation picks another of these
        self.keys = sorted({
            n.slice.value for n in ast.walk(tree)
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str)
        })  # fmt: skip
        self.attrs = sorted({
            n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
            and not n.attr.startswith("__")
        })  # fmt: skip

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
        self._feature_removal(node, body)
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
        self._drop_statement(node.body)
        self.generic_visit(node)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self._drop_statement(node.body)
        self.generic_visit(node)

    visit_AsyncFor = visit_For

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
        self._key(node)
        index = node.slice
        for part in (index.lower, index.upper, index.step) if isinstance(index, ast.Slice) else (index,):
            if part is not None:
                self._int_shift(part, "off_by_one")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "range":
            for arg in node.args:
                self._int_shift(arg, "off_by_one")
        self._drop_kwarg(node)
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

    def visit_Raise(self, node: ast.Raise) -> None:
        target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        self._exception(target)
        self.generic_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        for target in node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]:
            self._exception(target)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if (
            self.scope and isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name)
            and node.value.id == "self" and node.attr in self.attrs
        ):  # fmt: skip
            other = _neighbour(self.attrs, node.attr)
            if other is not None:
                start = self.src.span(node)[1] - len(node.attr)
                self.add("key", start, start + len(node.attr), other, node.lineno)
        self.generic_visit(node)

    def _exception(self, target: ast.expr | None) -> None:
        if isinstance(target, ast.Name) and target.id in EXCEPTION_SWAP:
            self.add_node("exception", target, EXCEPTION_SWAP[target.id])

    def _key(self, node: ast.Subscript) -> None:
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(node.ctx, ast.Load):
            other = _neighbour(self.keys, key.value)
            text = self.src.segment(key)
            if other is not None and text[:1] in "'\"":
                self.add_node("key", key, repr(other) if text[0] == "'" else _double_quoted(other))

    def _drop_kwarg(self, node: ast.Call) -> None:
        items: list[ast.expr | ast.keyword] = sorted(
            [*node.args, *node.keywords], key=lambda n: (n.lineno, n.col_offset)
        )
        for i, item in enumerate(items):
            if not isinstance(item, ast.keyword) or item.arg is None:
                continue  # **kwargs is not one argument
            start, end = self.src.span(item)
            if i > 0:  # from the end of the argument before it: its comma goes too
                start = self.src.span(items[i - 1])[1]
            elif i + 1 < len(items):  # the first argument: up to the next one
                end = self.src.span(items[i + 1])[0]
            self.add("drop_kwarg", start, end, "", item.lineno)

    def _own_lines(self, body: list[ast.stmt], i: int) -> tuple[int, int] | None:
        """The whole lines statement ``body[i]`` fills, when no other statement shares them."""
        stmt = body[i]
        first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
        if self.src.lines[first - 1][: stmt.col_offset].strip():
            return None  # something before it on its line (``for x in y: a; b``)
        if i + 1 < len(body) and body[i + 1].lineno <= last:
            return None
        if i > 0 and (body[i - 1].end_lineno or 0) >= first:
            return None
        return self.src.line_span(first, last)

    def _drop_statement(self, body: list[ast.stmt]) -> None:
        if len(body) < 2:
            return
        for i, stmt in enumerate(body):
            if isinstance(stmt, (ast.Pass, ast.Continue, ast.Break)):
                continue
            span = self._own_lines(body, i)
            if span is not None:
                self.add("drop_statement", span[0], span[1], "", stmt.lineno)

    def _feature_removal(self, node: ast.FunctionDef | ast.AsyncFunctionDef, body: list[ast.stmt]) -> None:
        # two statements or more go (one is what drop_branch / drop_statement already make)
        if not 3 <= len(body) <= MAX_REMOVED_BODY + 1 or not isinstance(body[-1], ast.Return):
            return
        final = body[-1]
        if final.value is None or any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(node)):
            return
        assigned = {
            n.id for stmt in body[:-1] for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        params = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
        read = {n.id for n in ast.walk(final.value) if isinstance(n, ast.Name)}
        if not read or not read <= params or read & assigned:
            return  # the return would name a local the removed lines made, or only constants
        first = body[0]
        if self.src.lines[first.lineno - 1][: first.col_offset].strip() or final.lineno <= (body[-2].end_lineno or 0):
            return
        start, end = self.src.line_span(first.lineno, final.lineno - 1)
        self.add("feature_removal", start, end, "", first.lineno)

    def _negate(self, test: ast.expr) -> None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self.add_node("negation", test, self.src.segment(test.operand))
            return
        text = self.src.segment(test)
        wrap = isinstance(test, (ast.BoolOp, ast.IfExp, ast.NamedExpr, ast.Lambda, ast.Compare))
        self.add_node("negation", test, f"not ({text})" if wrap else f"not {text}")

    def _drop_branch(self, node: ast.If) -> None:
        first = node.orelse[0] if node.orelse else None
        if isinstance(first, ast.If) and self.src.lines[first.lineno - 1].strip().startswith("elif"):
            # the elif's header and body go; its own elif / else then follows the if
            start, end = self.src.line_span(first.lineno, first.body[-1].end_lineno or first.lineno)
            self.add("drop_branch", start, end, "", first.lineno)
        elif first is not None and not (len(node.orelse) == 1 and isinstance(first, ast.If)):
            after_body = node.body[-1].end_lineno or node.lineno
            else_line = next(
                (n for n in range(after_body + 1, first.lineno + 1)
                 if self.src.lines[n - 1].strip().startswith("else")),
                None,
            )  # fmt: skip
            if else_line is not None:
                start, end = self.src.line_span(else_line, node.orelse[-1].end_lineno or else_line)
                self.add("drop_branch", start, end, "", else_line)
        elif (
            first is None
            and len(node.body) == 1
            and isinstance(node.body[0], (ast.Return, ast.Raise, ast.Continue, ast.Break))
        ):
            start, end = self.src.line_span(node.lineno, node.end_lineno or node.lineno)
            self.add("drop_branch", start, end, "", node.lineno)


def _neighbour(names: list[str], name: str) -> str | None:
    """The next name after ``name`` in sorted ``names`` (wrapping round), or None when it is alone."""
    if len(names) < 2 or name not in names:
        return None
    return names[(names.index(name) + 1) % len(names)]


def _double_quoted(text: str) -> str:
    """``text`` as a double-quoted literal where it can be written plainly, else Python's own repr."""
    return f'"{text}"' if not set(text) & {'"', "\\", "\n", "\r"} else repr(text)


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
    finder = _Finder(path, _Source(source), tree)
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
