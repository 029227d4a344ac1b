"""``coderl tasks validate``: every task's gold patch resolves it; the empty patch and a patch that
only rewrites the tests do not."""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coderl.gathering import gather_all
from coderl.sandbox import SandboxSpec
from coderl.tasks.grading import grade
from coderl.types import Task


@dataclass
class TaskCheck:
    task_id: str
    ok: bool
    problems: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def cheating_test_patch(task: Task) -> str:
    """A cheating patch: every hidden test file replaced by tests that always pass."""
    names = sorted({t.split("::")[-1].split("[")[0] for t in task.fail_to_pass + task.pass_to_pass})
    body = "".join(f"def {n}():\n    pass\n\n\n" for n in names) or "def test_ok():\n    pass\n"
    pieces = []
    for path in sorted(task.hidden_tests) or ["tests/test_cheat.py"]:
        lines = difflib.unified_diff([], body.splitlines(keepends=True), "/dev/null", f"b/{path}")
        pieces.append(f"diff --git a/{path} b/{path}\nnew file mode 100644\n" + "".join(lines))
    return "".join(pieces)


async def check_task(task: Task, spec: SandboxSpec | None = None) -> TaskCheck:
    check = TaskCheck(task.id, True)
    cases: list[tuple[str, str, bool]] = [
        ("empty", "", False),
        ("tests-only", cheating_test_patch(task), False),
    ]
    if task.gold_patch is not None:
        cases.insert(0, ("gold", task.gold_patch, True))
    elif task.verifier == "junit":
        check.problems.append("no gold patch")
    empty = None
    for name, patch, should_resolve in cases:
        result = await grade(task, patch, spec)
        check.seconds[name] = round(result.duration_s, 2)
        if name == "empty":
            empty = result
        if result.resolved != should_resolve:
            detail = {**result.fail_to_pass, **result.pass_to_pass}
            bad = {k: v for k, v in detail.items() if v != "passed"} if should_resolve else {}
            check.problems.append(
                f"{name} patch {'did not resolve' if should_resolve else 'resolved'} the task"
                + (f": {bad}" if bad else "")
                + (f" ({result.error})" if result.error else "")
            )
    if empty is not None and task.gold_patch is not None and task.verifier == "junit":
        still_passing = [t for t, v in empty.fail_to_pass.items() if v == "passed"]
        if still_passing:
            check.problems.append(f"FAIL_TO_PASS tests pass without the fix: {still_passing}")
        broken = [t for t, v in empty.pass_to_pass.items() if v != "passed"]
        if broken:
            check.problems.append(f"PASS_TO_PASS tests fail on the original snapshot: {broken}")
    check.ok = not check.problems
    return check


async def validate_tasks(
    tasks: list[Task],
    spec: SandboxSpec | None = None,
    concurrency: int = 2,
    on_done: Callable[[TaskCheck], None] | None = None,
) -> dict[str, Any]:
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> TaskCheck:
        async with gate:
            check = await check_task(task, spec)
        if on_done:
            on_done(check)
        return check

    checks = await gather_all(one(t) for t in tasks)  # a cancel returns once every check has closed its sandbox
    failures = [{"id": c.task_id, "problems": c.problems} for c in checks if not c.ok]
    return {
        "total": len(checks),
        "ok": sum(c.ok for c in checks),
        "failures": failures,
        "seconds": {c.task_id: c.seconds for c in checks},
    }
