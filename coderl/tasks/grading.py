"""Grade a patch against a task's hidden tests, honestly.

1. A fresh sandbox from the task's original snapshot (never the agent's sandbox).
2. The patch minus any change to a test file (those are reported as discarded), applied with
   ``git apply``, falling back to ``git apply --recount``, then ``patch -p1 --fuzz=2``.
3. The hidden tests written in only now (files, or SWE-bench's test patch).
4. The tests run with a JUnit XML report; per-test outcomes come from that report (printed text
   counts for nothing). Harbor tasks instead run ``tests/test.sh``, which writes the reward file.
5. resolved iff every FAIL_TO_PASS and PASS_TO_PASS test passed; reward 0/1 (``resolved``) or the
   share of those tests that passed (``fraction``).
"""

from __future__ import annotations

import json
import math
import shlex
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from coderl.sandbox import Sandbox, SandboxSpec, create_sandbox
from coderl.tasks.junit import Outcome, parse_junit
from coderl.tasks.patching import split_patch, without_test_changes
from coderl.types import Task

RewardMode = Literal["resolved", "fraction"]
_JUNIT = ".coderl-grade/junit.xml"
_PATCH = ".coderl-grade/patch.diff"


@dataclass
class GradeResult:
    """The verdict on one patch, SWE-bench style."""

    task_id: str
    resolved: bool
    reward: float
    patch_applied: bool
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    """FAIL_TO_PASS test id -> passed | failed | error | skipped | missing."""
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    discarded_test_files: list[str] = field(default_factory=list)
    error: str | None = None
    duration_s: float = 0.0
    test_output: str = ""
    """Tail of the test run's output, for debugging (never used for the verdict)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def grade(
    task: Task, patch: str, spec: SandboxSpec | None = None, reward_mode: RewardMode = "resolved"
) -> GradeResult:
    """Grade ``patch`` (a unified diff against the task snapshot; may be empty) on ``task``."""
    start = time.perf_counter()
    base = spec or SandboxSpec()
    box_spec = base.model_copy(update=_spec_fields(task, base))
    protected = set(task.hidden_tests) | {p.path for p in split_patch(task.test_patch or "")}
    filtered, discarded = without_test_changes(patch or "", protected)
    result = GradeResult(task.id, False, 0.0, patch_applied=True, discarded_test_files=discarded)
    async with await create_sandbox(box_spec) as sb:
        if filtered.strip():
            applied, log = await apply_patch(sb, filtered)
            if not applied:
                result.patch_applied = False
                result.error = f"the patch does not apply: {log[-1500:]}"
                result.duration_s = time.perf_counter() - start
                return result
        if task.verifier == "harbor":
            await _run_harbor(sb, task, result)
        elif await _install_hidden_tests(sb, task, result):
            await _run_junit(sb, task, result)
        else:
            result.duration_s = time.perf_counter() - start
            return result
    tests = {**result.fail_to_pass, **result.pass_to_pass}
    passed = sum(1 for v in tests.values() if v == "passed")
    if task.verifier == "junit":
        result.resolved = bool(tests) and passed == len(tests)
        result.reward = 1.0 if result.resolved else 0.0
        if reward_mode == "fraction" and tests:
            result.reward = passed / len(tests)
    result.duration_s = time.perf_counter() - start
    return result


def _spec_fields(task: Task, base: SandboxSpec) -> dict[str, Any]:
    # the hidden tests may use the CPU time their wall-clock limit allows (one process at a time): a
    # task whose suite needs 150 s under a 180 s limit is not killed at the sandbox's default 120
    cpu = max(base.cpu_seconds, math.ceil(task.timeout_s))
    fields: dict[str, Any] = {"workspace": task.repo, "workdir": task.workdir, "cpu_seconds": cpu}
    if task.env:
        fields["env"] = {**base.env, **task.env}
    if task.verifier == "harbor":
        fields["mounts"] = {"/tests": ".coderl-harbor/tests", "/logs": ".coderl-harbor/logs"}
    return fields


async def apply_patch(sb: Sandbox, patch: str) -> tuple[bool, str]:
    """Apply a diff inside the sandbox's workdir: git apply, then --recount, then patch(1)."""
    if not patch.endswith("\n"):
        patch += "\n"
    await sb.write_file(_PATCH, patch)
    log = ""
    for cmd in (
        f"git apply --whitespace=nowarn {_PATCH}",
        f"git apply --whitespace=nowarn --recount {_PATCH}",
        f"patch -p1 --forward --batch --fuzz=2 -i {_PATCH}",
    ):
        r = await sb.exec(cmd, timeout=60)
        if r.exit_code == 0:
            await sb.exec(f"rm -f {_PATCH}")
            return True, r.stdout
        log += f"$ {cmd}\n{r.stdout}{r.stderr}\n"
    await sb.exec(f"rm -f {_PATCH}")
    return False, log


async def _install_hidden_tests(sb: Sandbox, task: Task, result: GradeResult) -> bool:
    for path, content in task.hidden_tests.items():
        await sb.write_file(path, content)
    if task.test_patch:
        ok, log = await apply_patch(sb, task.test_patch)
        if not ok:
            result.error = f"the task's test patch does not apply on top of this patch: {log[-800:]}"
            return False
    return True


def default_test_command(task: Task) -> str:
    """pytest on the files named by the task's test ids, with a JUnit report. A file or class pytest
    cannot collect costs its own tests, not the whole run (``--continue-on-collection-errors``, as
    ``coderl tasks synth`` ran the suite: Markdown's suite has a helper class pytest refuses to collect
    under its warnings-as-errors settings, and every one of its tasks' tests was reported missing)."""
    files = sorted({t.split("::")[0] for t in task.fail_to_pass + task.pass_to_pass if "::" in t})
    if not files:
        files = sorted(task.hidden_tests) or ["."]
    targets = " ".join(shlex.quote(f) for f in files)
    return (
        "python -m pytest -p no:cacheprovider -q -o junit_family=xunit1 --continue-on-collection-errors "
        f"--junitxml={{junit}} {targets}"
    )


async def _run_junit(sb: Sandbox, task: Task, result: GradeResult) -> None:
    command = (task.test_command or default_test_command(task)).replace("{junit}", _JUNIT)
    run = await sb.exec(f"mkdir -p .coderl-grade && {command}", timeout=task.timeout_s)
    result.test_output = (run.stdout + run.stderr)[-4000:]
    try:
        outcomes: dict[str, Outcome] = parse_junit((await sb.read_file(_JUNIT)).decode("utf-8", "replace"))
    except Exception:
        outcomes = {}
    if not outcomes:
        result.error = "the test run wrote no JUnit report" + (" (timed out)" if run.timed_out else "")
    result.fail_to_pass = {t: outcomes.get(t, "missing") for t in task.fail_to_pass}
    result.pass_to_pass = {t: outcomes.get(t, "missing") for t in task.pass_to_pass}


async def _run_harbor(sb: Sandbox, task: Task, result: GradeResult) -> None:
    """Harbor's verifier: /tests/test.sh writes /logs/verifier/reward.txt (a number) or reward.json."""
    for path, content in task.hidden_tests.items():
        await sb.write_file(f".coderl-harbor/{path}", content)  # hidden_tests paths start with tests/
    run = await sb.exec("mkdir -p /logs/verifier && bash /tests/test.sh", timeout=task.timeout_s)
    result.test_output = (run.stdout + run.stderr)[-4000:]
    reward: float | None = None
    try:
        reward = float((await sb.read_file(".coderl-harbor/logs/verifier/reward.txt")).decode().strip())
    except Exception:
        try:
            data = json.loads(await sb.read_file(".coderl-harbor/logs/verifier/reward.json"))
            reward = float(data["reward"] if isinstance(data, dict) and "reward" in data else data)
        except Exception:
            reward = None
    if reward is None:
        result.error = "tests/test.sh wrote no /logs/verifier/reward.txt or reward.json" + (
            " (timed out)" if run.timed_out else ""
        )
        reward = 0.0
    result.reward = reward
    result.resolved = reward >= 1.0
