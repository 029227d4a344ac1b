"""The pristine suite of a repository being synthesised from, and what a mutant's run of it says.

:func:`run_baseline` runs the pristine suite twice (the tests that pass both times are the ones a mutant
can break; one whose outcome flips is flaky) and records which files each test file calls into;
:func:`classify` reads one mutant's run against it (:mod:`coderl.tasks.synth.build` keeps or drops the
mutant on that verdict).
"""

from __future__ import annotations

import logging
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from coderl.errors import TaskError
from coderl.sandbox import SandboxSpec
from coderl.tasks.synth.discovery import test_files
from coderl.tasks.synth.mutate import Mutation
from coderl.tasks.synth.source import is_pypi
from coderl.tasks.synth.suite import NO_PLUGINS, SuiteRun, SuiteRunner

log = logging.getLogger(__name__)


@dataclass
class Baseline:
    """The pristine suite: how it runs, what passes both times, what is flaky, who calls what."""

    run: SuiteRun
    env: dict[str, str]
    lenient: bool
    passing: set[str]
    flaky: list[str]
    trace: dict[str, list[str]]


def layout_env(repo: Path) -> dict[str, str]:
    """``PYTHONPATH=src`` for a ``src/`` layout (its package is not importable from the root otherwise)."""
    src = repo / "src"
    if src.is_dir() and any((d / "__init__.py").is_file() for d in src.iterdir() if d.is_dir()):
        return {"PYTHONPATH": "src"}
    return {}


async def run_baseline(pristine: Path, spec: SandboxSpec, timeout_s: float) -> Baseline:
    """The pristine suite run the way that passes most (without third-party pytest plugins first; with
    the project's pytest settings emptied when nothing passes with them), then once more,
    traced: a test whose outcome differs between the two runs is flaky."""
    layout = layout_env(pristine)
    runs: list[tuple[SuiteRun, dict[str, str], bool]] = []
    for clear in (False, True):
        for env in (NO_PLUGINS, {}):
            async with SuiteRunner(pristine, spec, {**env, **layout}, timeout_s, clear) as suite:
                run = await suite.run()
            runs.append((run, {**env, **layout}, clear))
            if run.passed and all(c.outcome in ("passed", "skipped") for c in run.cases.values()):
                break
        if max(len(r[0].passed) for r in runs) > 0:
            break
    first, env, clear = max(runs, key=lambda r: len(r[0].passed))
    if not first.passed and any(r[0].timed_out for r in runs):
        raise TaskError(
            f"the pristine test suite did not finish within {timeout_s:.0f} s; raise the limit with "
            f"--timeout (for example --timeout {4 * timeout_s:.0f}). Output so far:\n{first.output[-1200:]}"
        )
    async with SuiteRunner(pristine, spec, env, timeout_s, clear) as suite:
        second = await suite.run(trace=True)
    if first.cases and not second.cases:  # the traced run (slower) broke off: flakiness without the trace
        log.warning(
            "the traced run of the pristine suite (it records which files each test file calls into) %s; "
            "each mutant runs every test file instead. Its output ended:\n%s",
            why_no_report(second, 3 * timeout_s), second.output[-600:],
        )  # fmt: skip
        async with SuiteRunner(pristine, spec, env, timeout_s, clear) as suite:
            second = await suite.run()
        if not second.cases:
            raise TaskError(
                f"the pristine test suite passed {len(first.passed)} tests once, and then {why_no_report(second, timeout_s)}; "
                f"a suite must run to its end twice (flaky tests are found that way). Output:\n{second.output[-1200:]}"
            )
    flaky = sorted(t for t in first.cases.keys() | second.cases.keys() if first.outcome(t) != second.outcome(t))
    # a doctest's "file" is the library module the agent must edit: never FAIL_TO_PASS / PASS_TO_PASS
    tests = set(test_files(pristine))
    passing = {t for t in (first.passed & second.passed) - set(flaky) if t.split("::", 1)[0] in tests}
    return Baseline(first, env, clear, passing, flaky, second.trace)


def why_no_report(run: SuiteRun, limit_s: float) -> str:
    """Why a suite run left no test report, in words."""
    if run.timed_out:
        return f"did not finish within {limit_s:.0f} s (raise --timeout)"
    code = run.exit_code
    if code in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        return "was stopped by the sandbox's CPU-time limit (sandbox.cpu_seconds)"
    if code is not None and (code < 0 or code > 128):
        return f"was killed by signal {abs(code) % 128} (out of memory? sandbox.memory_mb)"
    return f"ended without a test report (exit code {code})"


def classify(
    run: SuiteRun, baseline: set[str], files: list[str] | None = None
) -> tuple[str, list[str], list[str], list[str]]:
    """(verdict, FAIL_TO_PASS, PASS_TO_PASS, withheld files) of one mutant's run over the test
    ``files`` (default: the whole suite)."""
    if run.timed_out:
        return "timeout", [], [], []
    if files is not None:
        ran = set(files)
        baseline = {t for t in baseline if t.split("::", 1)[0] in ran}
    failing = sorted(t for t in baseline if run.outcome(t) != "passed")
    if not failing:
        return "uncaught", [], [], []
    if (files is None and len(failing) == len(baseline)) or not run.cases:
        return "breaks_everything", [], [], []
    files = sorted({t.split("::", 1)[0] for t in failing})
    still = sorted(t for t in baseline if t.split("::", 1)[0] in files and run.outcome(t) == "passed")
    if not still:
        return "no_pass_to_pass", [], [], []
    return "kept", failing, still, files


def relevant_files(m: Mutation, trace: dict[str, list[str]], every: list[str]) -> list[str] | None:
    """The test files a mutant runs: those whose tests call into its file; None (all of ``every``)
    for a module-level edit (read at import, by anyone), or when no test file is known to call it."""
    if not m.function or not trace:
        return None
    files = sorted(f for f, called in trace.items() if m.path in called and f in every)
    return files or None


def too_few_passing(given: str, base: Baseline) -> str:
    """Why a pristine suite that passes fewer than two tests makes no task, and the likely cause: test
    files that could not be imported (an sdist may leave out a file its tests import)."""
    run = base.run
    dropped = run.collection_errors
    collected = max(0, len(run.cases) - len(dropped))  # a file pytest could not import is one error case
    counts = f"{collected} collected, {len(base.passing)} passing both runs, {len(base.flaky)} flaky"
    head = (
        f"repository {given!r}: its test suite passes {len(base.passing) or 'no'} test"
        f"{'s' if len(base.passing) != 1 else ''} ({counts}); a task needs a test its bug breaks and "
        "another it leaves passing, so at least two"
    )
    if not dropped:
        todo = "make the suite pass first" if not base.passing else "it needs more tests"
        return f"{head}; {todo}. Output:\n{run.output[-1500:]}"
    named = "\n".join(f"  {path}: {error}" for path, error in list(dropped.items())[:8])
    more = f"\n  ... and {len(dropped) - 8} more" if len(dropped) > 8 else ""
    first, error = next(iter(dropped.items()))
    if not any(imports_own_tests(e) for e in dropped.values()):
        hint = "; install what they import into the Python that runs the suite"
    elif is_pypi(given):
        hint = (
            "; a source distribution may leave out a file its tests import (such as tests/__init__.py): "
            "synthesise from a checkout of the project's repository instead"
        )
    else:
        hint = "; they import from the project's own tests package, which lacks what they import here"
    files = f"{len(dropped)} test file{'s' if len(dropped) != 1 else ''}"
    return (  # the first line stands alone (bench synth's table quotes it)
        f"{head}. {files} could not be imported (e.g. {first}: {error}){hint}."
        f"\nAll of them:\n{named}{more}\nOutput:\n{run.output[-1500:]}"
    )


def imports_own_tests(error: str) -> bool:
    """Whether a collection error is an import from the project's own tests package (``from tests
    import x``, ``tests.helpers``): a file its sdist may leave out, not a dependency to install."""
    return re.search(r"(?:from|module named) '?tests(?:[.']|\b)", error) is not None
