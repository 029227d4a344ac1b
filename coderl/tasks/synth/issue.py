"""The issue text of a synthesised task, written from what a user running the tests would see.

It quotes the failing test's id, the statement of the test that failed (from the test file, never the
library) and the first lines of the error message. It never shows the fix, the library file or the
line of the bug: tracebacks are not copied (their library frames show the buggy line), and message
lines that name a source file are left out.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re
from pathlib import Path

from coderl.tasks.junit import JUnitCase

MAX_MESSAGE_LINES = 6
MAX_LINE_CHARS = 160


def failing_statement(case: JUnitCase, repo: Path) -> str | None:
    """The statement of the test function that failed: the test file's line named in the traceback,
    widened to the whole statement it belongs to."""
    test_file = case.node_id.split("::", 1)[0]
    lines = [int(n) for n in re.findall(rf"^{re.escape(test_file)}:(\d+):", case.text, re.M)]
    source_path = repo / test_file
    if not lines or not source_path.is_file():
        return None
    source = source_path.read_text()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    line = lines[-1]  # the innermost frame in the test file
    best: ast.stmt | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ):
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                if best is None or node.lineno >= best.lineno:
                    best = node
    segment = ast.get_source_segment(source, best) if best is not None else None
    return segment.strip() if segment else None


def message_lines(case: JUnitCase) -> list[str]:
    """The error message's first lines, without any that name a source file or line."""
    out: list[str] = []
    text = case.message or (case.text.strip().splitlines()[-1] if case.text.strip() else "")
    for raw in text.splitlines():
        line = raw.rstrip()
        if re.search(r"\.py\b|line \d+|^\s*Use -v to get", line):
            continue
        if not line.strip() and (not out or not out[-1].strip()):
            continue
        out.append(line[:MAX_LINE_CHARS])
        if len(out) >= MAX_MESSAGE_LINES:
            break
    while out and not out[-1].strip():
        out.pop()
    return out


def _title(node_id: str) -> str:
    name = node_id.rsplit("::", 1)[-1].split("[")[0]
    words = name.removeprefix("test_").replace("_", " ").strip()
    return f"{words} is broken" if words else "A test fails"


def issue_text(failures: list[JUnitCase], repo: Path, others: int = 0) -> str:
    """The instruction of a task whose bug makes ``failures`` fail (the first one or two are quoted);
    ``others``: how many more tests fail."""
    first = failures[0]
    parts = [_title(first.node_id).capitalize(), ""]
    for case in failures[:2]:
        parts.append(f"Running the test suite, `{case.node_id}` fails:")
        parts.append("")
        statement = failing_statement(case, repo)
        quoted = ([statement] if statement else []) + message_lines(case)
        parts += ["    " + line for text in quoted for line in text.splitlines()] or ["    (no message)"]
        parts.append("")
    more = others + max(0, len(failures) - 2)
    if more:
        parts.append(
            f"{more} other test{'s' if more > 1 else ''} fail{'' if more > 1 else 's'} the same way."
        )
    parts.append(
        "These tests are not in the repository you were given. Fix the library so that they pass; "
        "do not change any tests."
    )
    return "\n".join(parts).strip() + "\n"


_CALL = re.compile(r"(pytest\.)?\b([A-Za-z_]\w*)\(")


def issue_callee(instruction: str) -> str | None:
    """The first function the issue text shows being called — skipping keywords, builtins and
    ``pytest.``'s own helpers — the name a reader looks up first (None when nothing is called)."""
    for m in _CALL.finditer(instruction):
        name = m.group(2)
        if not m.group(1) and not keyword.iskeyword(name) and not hasattr(builtins, name):
            return name
    return None


BUG_IN = ("callee", "helper")
"""Where a synthesised bug can lie as its issue text shows it (:func:`bug_in`)."""


def bug_in(instruction: str, function: str) -> str:
    """Where a synthesised bug lies as its issue text shows it: ``callee`` when the mutated function
    (qualified name) is the one the issue calls first, ``helper`` otherwise (another function, a
    method, module-level code) — a reader of the issue finds a ``callee`` bug by looking up one name."""
    callee = issue_callee(instruction)
    return "callee" if callee and function and function.rsplit(".", 1)[-1] == callee else "helper"
