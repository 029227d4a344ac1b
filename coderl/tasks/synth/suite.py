"""A repository's own test suite, run in a sandbox, with per-test outcomes from a JUnit report.

One sandbox holds the repository for the length of a :class:`SuiteRunner`; each run may replace some
files (a mutant), runs pytest, reads the report and puts the originals back, so hundreds of mutants
cost one sandbox each per worker and a test run each.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from coderl.sandbox import Sandbox, SandboxSpec, create_sandbox
from coderl.tasks.junit import JUnitCase, Outcome, junit_cases

_REPORT = ".coderl-synth/junit.xml"
_WORST = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
NO_PLUGINS = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


@dataclass
class SuiteRun:
    """What one run of the suite did."""

    cases: dict[str, JUnitCase] = field(default_factory=dict)
    """node id -> the test's case (its worst outcome when reported twice)."""
    timed_out: bool = False
    output: str = ""
    seconds: float = 0.0

    def outcome(self, node_id: str) -> Outcome | None:
        case = self.cases.get(node_id)
        return case.outcome if case else None

    @property
    def passed(self) -> set[str]:
        return {n for n, c in self.cases.items() if c.outcome == "passed"}


def test_files(repo: Path) -> list[str]:
    """The repository's test files (pytest's default discovery: test_*.py and *_test.py), relative."""
    found = [
        p for p in repo.rglob("*.py")
        if (p.name.startswith("test_") or p.name.endswith("_test.py"))
        and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(repo).parts)
    ]  # fmt: skip
    return sorted(str(p.relative_to(repo)) for p in found)


class SuiteRunner:
    """``async with SuiteRunner(repo, spec, env) as suite: run = await suite.run({path: text})``."""

    def __init__(self, repo: Path, spec: SandboxSpec, env: dict[str, str], timeout_s: float = 60.0) -> None:
        self.repo = repo
        self.spec = spec.model_copy(update={"workspace": repo, "env": {**spec.env, **env}})
        self.timeout_s = timeout_s
        self.files = test_files(repo)
        self._box: Sandbox | None = None

    async def __aenter__(self) -> SuiteRunner:
        self._box = await create_sandbox(self.spec)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._box is not None:
            await self._box.close()

    async def run(self, changed: dict[str, str] | None = None) -> SuiteRun:
        """Run the suite with ``changed`` (repo-relative path -> text) in place of the originals."""
        assert self._box is not None, "use SuiteRunner as an async context manager"
        box = self._box
        changed = changed or {}
        for path, text in changed.items():
            await box.write_file(path, text)
        t0 = time.perf_counter()
        try:
            targets = " ".join(shlex.quote(f) for f in self.files)
            command = (
                f"rm -f {_REPORT}; python -m pytest -p no:cacheprovider -q -o junit_family=xunit1 "
                f"--junitxml={_REPORT} {targets}"
            )
            r = await box.exec(command, timeout=self.timeout_s)
            run = SuiteRun(timed_out=r.timed_out, output=(r.stdout + r.stderr)[-4000:])
            try:
                report = (await box.read_file(_REPORT)).decode("utf-8", "replace")
            except Exception:
                report = ""
            for case in junit_cases(report):
                known = run.cases.get(case.node_id)
                if known is None or _WORST[case.outcome] > _WORST[known.outcome]:
                    run.cases[case.node_id] = case
        finally:
            for path in changed:
                await box.write_file(path, (self.repo / path).read_bytes())
        run.seconds = time.perf_counter() - t0
        return run
