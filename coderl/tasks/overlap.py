"""Which functions a task's fix touches, so held-out tasks stay held out at the level of code.

Tasks generated from one repository (``coderl tasks synth``) often fix different lines of the same
function. A task is held out so that its fix is never learned; a training task that fixes the same
function shows that function (its correct lines included) in every demonstration and rewards every
rollout that repairs it. So a split holds out *functions*: a training task whose gold patch changes a
function that a held-out task's gold patch changes is removed from training (and counted).

A function is named by (repository, file, enclosing ``def``'s qualified name); code outside any
function is named by its file alone, so a module-level fix excludes every module-level fix of that
file. Tasks with no gold patch, or whose changed files cannot be parsed, are compared by id only.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from coderl.tasks.patching import split_patch
from coderl.types import Task

FunctionKey = tuple[str, str, str]
"""(repository, file path, qualified function name or ``<module>``)."""


def repository_of(task: Task) -> str:
    """The repository a task's snapshot comes from (the bundled suite's library name, SWE-bench's
    ``owner/name``), or its snapshot folder."""
    meta = task.metadata or {}
    return str(meta.get("repo_name") or meta.get("repo") or task.repo)


def changed_old_lines(file_diff: str) -> list[int]:
    """1-based lines of the old file that a one-file unified diff removes or inserts after."""
    lines: list[int] = []
    old = 0  # the next old line a context or removed row stands for (0: before the first hunk)
    for row in file_diff.splitlines():
        header = re.match(r"@@ -(\d+)(?:,(\d+))? ", row)
        if header:  # "-N,0" inserts after line N; otherwise the hunk starts at line N
            old = int(header.group(1)) + (1 if header.group(2) == "0" else 0)
        elif old and row.startswith("-"):
            lines.append(old)
            old += 1
        elif old and row.startswith("+"):
            lines.append(max(old - 1, 1))
        elif old and row.startswith(" "):
            old += 1
    return lines


def enclosing_functions(source: str) -> list[tuple[str, int, int]]:
    """Every function of ``source`` as (qualified name, first line incl. decorators, last line)."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    found.append((name, first, child.end_lineno or child.lineno))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def fixed_functions(task: Task) -> set[FunctionKey]:
    """The functions (innermost ``def`` around each changed line) the task's gold patch changes, read
    from the task's starting snapshot; empty when there is no gold patch or a file cannot be parsed."""
    keys: set[FunctionKey] = set()
    repo = repository_of(task)
    for piece in split_patch(task.gold_patch or ""):
        path = Path(task.repo) / piece.path
        try:
            functions = enclosing_functions(path.read_text()) if path.suffix == ".py" else []
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
            return set()
        for line in changed_old_lines(piece.text):
            around = [f for f in functions if f[1] <= line <= f[2]]
            innermost = max(around, key=lambda f: f[1]) if around else None
            keys.add((repo, piece.path, innermost[0] if innermost else "<module>"))
    return keys


def without_overlap(tasks: list[Task], held_out: list[Task]) -> tuple[list[Task], list[str]]:
    """``tasks`` minus every task that is held out or fixes a function a held-out task fixes, and the
    ids removed."""
    ids = {t.id for t in held_out}
    functions = set().union(*(fixed_functions(t) for t in held_out)) if held_out else set()
    kept: list[Task] = []
    removed: list[str] = []
    for task in tasks:
        if task.id in ids or (functions and fixed_functions(task) & functions):
            removed.append(task.id)
        else:
            kept.append(task)
    return kept, sorted(removed)
