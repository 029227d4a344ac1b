"""A repository's own test suite, run in a sandbox, with per-test outcomes from a JUnit report.

One sandbox holds the repository for the length of a :class:`SuiteRunner`; each run may replace some
files (a mutant), runs pytest, reads the report and puts the originals back, so hundreds of mutants
cost one sandbox each per worker and a test run each. A run may name the test files to run (the ones
that exercise the mutated file, from :data:`TRACE_PLUGIN`'s record of the pristine run); a test file
that cannot be collected (an optional test dependency that is missing) is reported, not fatal.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from coderl.sandbox import Sandbox, SandboxSpec, create_sandbox
from coderl.tasks.junit import JUnitCase, Outcome, junit_cases
from coderl.tasks.synth.discovery import test_files

_REPORT = ".coderl-synth/junit.xml"
_TRACE = ".coderl-synth/trace.json"
_COLLECTION_ERROR = re.compile(r"^ERROR (\S+\.py)(?: - (.*))?$", re.M)
TRACE_PLUGIN = '''"""coderl tasks synth: which of the repository's files each test file's tests call into."""
import json, os, sys

_root = os.getcwd() + os.sep
_calls = {}


def _profile(frame, event, arg):
    if event == "call":
        _current.add(frame.f_code.co_filename)


_current = set()


def pytest_runtest_call(item):
    sys.setprofile(_profile)


def pytest_runtest_teardown(item):
    sys.setprofile(None)
    mine = _calls.setdefault(item.nodeid.split("::", 1)[0], set())  # collected from, not defined in
    mine.update(f[len(_root):] for f in _current if f.startswith(_root))
    _current.clear()


def pytest_sessionfinish(session):
    with open(os.path.join(_root, ".coderl-synth", "trace.json"), "w") as out:
        json.dump({k: sorted(v) for k, v in _calls.items()}, out)
'''
"""A pytest plugin (run once, on the pristine repository): test file -> the repository files its tests'
calls entered. A mutant of a function then runs only the test files that call into its file."""
_WORST = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
NO_PLUGINS = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
LENIENT = "-o addopts= -o filterwarnings= -W ignore"
"""pytest options that empty a project's own ``addopts`` and warning filters (see ``SuiteRunner.lenient``)."""


@dataclass
class SuiteRun:
    """What one run of the suite did."""

    cases: dict[str, JUnitCase] = field(default_factory=dict)
    """node id -> the test's case (its worst outcome when reported twice)."""
    timed_out: bool = False
    output: str = ""
    seconds: float = 0.0
    collection_errors: dict[str, str] = field(default_factory=dict)
    """Test file -> why pytest could not collect it (a missing optional test dependency, most often)."""
    trace: dict[str, list[str]] = field(default_factory=dict)
    """Test file -> the repository files its tests called into (a traced run only)."""
    exit_code: int | None = None
    """pytest's exit code (negative: the signal that ended it)."""

    def outcome(self, node_id: str) -> Outcome | None:
        case = self.cases.get(node_id)
        return case.outcome if case else None

    @property
    def passed(self) -> set[str]:
        return {n for n, c in self.cases.items() if c.outcome == "passed"}


def collection_errors(output: str) -> dict[str, str]:
    """Test file -> why pytest could not collect it, from its output: the summary's ``ERROR file.py``
    lines, each with the first ``E   `` line of its ``ERROR collecting`` section (the exception)."""
    found: dict[str, str] = {}
    for m in _COLLECTION_ERROR.finditer(output):
        reason = (m.group(2) or "").strip()
        section = output.find(f"ERROR collecting {m.group(1)}")
        if not reason and section >= 0:
            detail = re.search(r"^E\s+(.+)$", output[section:], re.M)
            reason = detail.group(1).strip() if detail else ""
        found[m.group(1)] = reason
    return found


class SuiteRunner:
    """``async with SuiteRunner(repo, spec, env) as suite: run = await suite.run({path: text})``."""

    def __init__(
        self, repo: Path, spec: SandboxSpec, env: dict[str, str], timeout_s: float = 60.0, lenient: bool = False
    ) -> None:
        self.repo = repo
        # a run may use the CPU its wall-clock limit allows (the traced run three times that): the
        # sandbox's default CPU limit (120 s) once killed chardet's traced run mid-suite, under a
        # --timeout of 180 s
        cpu = max(spec.cpu_seconds, math.ceil(3 * timeout_s))
        self.spec = spec.model_copy(update={"workspace": repo, "env": {**spec.env, **env}, "cpu_seconds": cpu})
        self.timeout_s = timeout_s
        self.lenient = lenient
        """Run with the project's ``addopts`` and ``filterwarnings`` emptied and warnings ignored: settings
        that need plugins this Python lacks (``--cov``), or that turn another pytest's deprecation
        warnings into errors, would otherwise stop the suite before a test runs."""
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

    async def run(
        self, changed: dict[str, str] | None = None, files: list[str] | None = None, trace: bool = False
    ) -> SuiteRun:
        """Run the suite's test ``files`` (default: all) with ``changed`` (repo-relative path -> text) in
        place of the originals; ``trace`` records which files each test file calls into (slower)."""
        assert self._box is not None, "use SuiteRunner as an async context manager"
        box = self._box
        changed = changed or {}
        for path, text in changed.items():
            await box.write_file(path, text)
        t0 = time.perf_counter()
        try:
            targets = " ".join(shlex.quote(f) for f in (self.files if files is None else files))
            options = LENIENT + " " if self.lenient else ""
            prefix = ""
            if trace:
                await box.write_file(".coderl-synth/coderl_synth_trace.py", TRACE_PLUGIN)
                options += "-p coderl_synth_trace "
                prefix = f"rm -f {_TRACE}; PYTHONPATH=.coderl-synth${{PYTHONPATH:+:$PYTHONPATH}} "
            command = (
                f"rm -f {_REPORT}; {prefix}python -m pytest -p no:cacheprovider -q -o junit_family=xunit1 "
                f"--continue-on-collection-errors {options}--junitxml={_REPORT} {targets}"
            )
            r = await box.exec(command, timeout=self.timeout_s * (3 if trace else 1))
            output = r.stdout + r.stderr
            run = SuiteRun(timed_out=r.timed_out, output=output[-4000:], exit_code=r.exit_code)
            run.collection_errors = collection_errors(output)
            try:
                report = (await box.read_file(_REPORT)).decode("utf-8", "replace")
            except Exception:
                report = ""
            if trace:
                try:
                    run.trace = json.loads((await box.read_file(_TRACE)).decode("utf-8", "replace"))
                except Exception:
                    run.trace = {}
            for case in junit_cases(report):
                known = run.cases.get(case.node_id)
                if known is None or _WORST[case.outcome] > _WORST[known.outcome]:
                    run.cases[case.node_id] = case
        finally:
            for path in changed:
                await box.write_file(path, (self.repo / path).read_bytes())
        run.seconds = time.perf_counter() - t0
        return run
