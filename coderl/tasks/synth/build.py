"""``coderl tasks synth REPO OUT_DIR``: many validated bug-fix tasks from any Python repository with a
passing pytest suite (the SWE-smith / R2E-Gym recipe: mutate, keep what the tests catch).

1. The repository (a folder, or ``pypi:NAME[==VERSION]``: its sdist, :mod:`coderl.tasks.synth.source`)
   is copied to ``OUT_DIR/repos/<name>`` and its suite run twice: the tests that pass both times are
   the ones a mutant can break (a test whose outcome flips is flaky, never FAIL_TO_PASS or
   PASS_TO_PASS; a suite that passes fewer than two tests, or does not finish within the limit, is
   refused with the reason). The second run records which files each test file calls into. A test file
   pytest cannot import (an optional test dependency missing, or a helper the sdist leaves out) is left
   out, warned about and counted. ``src/`` layouts run
   with ``PYTHONPATH=src``; a project whose pytest settings stop its suite here (``addopts`` naming
   plugins this Python lacks, ``filterwarnings`` turning this pytest's deprecations into errors) runs
   with them emptied, when nothing passes otherwise.
2. Seeded mutations of the library code (:mod:`coderl.tasks.synth.mutate`), each kind in turn, are
   run in sandboxes, one worker per ``concurrency``, each against the test files that call into the
   mutated file (all of them for a module-level edit, or when none is known to). The tasks kept are the
   first ``n`` caught in the seeded order, however the workers' runs interleave: the same repository,
   seed and options give the same tasks on every machine.
3. A mutant is kept when some passing tests now fail (FAIL_TO_PASS) and some tests of the same files
   still pass (PASS_TO_PASS); it is dropped, and counted, when no test catches it (an equivalent or
   untested mutant), when it breaks every test (an import-level break), when the suite times out,
   when no test of the failing files still passes, or when it touches a line another task of the
   suite fixes (so a synthesised training task never repeats a hand-written held-out one).
4. Each kept mutant becomes a task folder ``OUT_DIR/tasks/<name>-sNNN`` in the native format: the
   gold patch is the inverse diff (mutant -> pristine); the test files that catch the bug are
   withheld from the agent's snapshot and run only at grading; the issue text is written from the
   failing tests' names, statements and messages (:mod:`coderl.tasks.synth.issue`), never the fix.
5. Every task is then proven the way ``coderl tasks validate`` does (the gold patch resolves it; the
   empty patch and a patch that only rewrites tests do not); one that fails is dropped, counted, and
   replaced by the next mutant caught in the seeded order (numbered after the last task written), round
   after round, until ``n`` hold up or the mutants run out.

The counts go to ``OUT_DIR/synth-<name>.json`` and are returned. The pristine runs and a mutant's
verdict are :mod:`coderl.tasks.synth.baseline`'s; the task folders, :mod:`coderl.tasks.synth.writer`'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coderl.errors import TaskError
from coderl.gathering import gather_all
from coderl.sandbox import SandboxSpec
from coderl.tasks.junit import JUnitCase
from coderl.tasks.native import load_native_task
from coderl.tasks.overlap import enclosing_functions
from coderl.tasks.synth.baseline import classify, relevant_files, run_baseline, too_few_passing
from coderl.tasks.synth.discovery import describe, read_discovery, test_files
from coderl.tasks.synth.issue import BUG_IN, bug_in, issue_text
from coderl.tasks.synth.mutate import Mutation, find_mutations, interleave
from coderl.tasks.synth.source import fetch_pypi, is_pypi, native_sources, needs_c_build, pypi_spec
from coderl.tasks.synth.suite import SuiteRunner
from coderl.tasks.synth.writer import (
    Kept,
    pristine_copy,
    protected_lines,
    remove_tasks,
    write_task,
)
from coderl.tasks.validate import check_task

if TYPE_CHECKING:
    from rich.progress import Progress

log = logging.getLogger(__name__)

DROP_REASONS = (
    "uncaught", "breaks_everything", "timeout", "no_pass_to_pass", "overlaps_existing_task", "bug_elsewhere",
    "failed_validation",
)  # fmt: skip


@dataclass
class SynthOptions:
    n: int = 50
    """Tasks wanted."""
    seed: int = 0
    tier: str = "synth"
    concurrency: int = 2
    """Sandboxes running mutants at once."""
    max_tries: int | None = None
    """Most mutants run (None = until ``n`` are kept or the mutants run out)."""
    timeout_s: float = 60.0
    """Limit of one run of the suite (a mutant that passes it is dropped as a timeout)."""
    validate: bool = True
    bug_in: str | None = None
    """Keep only tasks whose bug lies there as their issue text shows it (:func:`bug_in`: ``callee``,
    the function the issue calls first; ``helper``, anywhere else); the others are dropped as
    ``bug_elsewhere`` and ``n`` counts the kept ones. With ``callee``, only functions some test file
    calls by name are mutated."""
    max_lines: int | None = None
    """Mutate only functions of at most this many lines (decorators and docstring included; module-level
    code not at all): tasks the size of the functions an agent writes back whole."""


@dataclass
class _State:
    queue: Iterator[tuple[int, Mutation]]
    want: int
    kept: list[Kept] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    tried: Counter[str] = field(default_factory=Counter)
    kept_kinds: Counter[str] = field(default_factory=Counter)
    surplus: int = 0
    written: int = 0
    """Tasks written so far (validated as they are written, when they are)."""
    run_s: list[float] = field(default_factory=list)
    """Seconds of each mutant's test run."""
    test_files_dropped: dict[str, str] = field(default_factory=dict)
    """Test files the pristine run could not import (path: error), left out of every mutant's run."""
    summary: Path | None = None
    """Where the counts will be written (``OUT_DIR/synth-<name>.json``)."""
    native_sources: list[str] = field(default_factory=list)
    """C (Cython, Rust) sources the project runs without: its optional speedups, never built here."""


def library_files(repo: Path) -> list[str]:
    """The repository's Python files that are not tests (as its pytest configuration names them),
    test helpers, packaging or docs. (Not everything under ``testpaths``: projects name their package
    there, for the tests and doctests inside it.)"""
    tests = set(test_files(repo))
    skip_dirs = {"tests", "test", "docs", "doc", "examples", "scripts", "benchmarks", "build", "dist"}
    out = []
    for p in sorted(repo.rglob("*.py")):
        rel = p.relative_to(repo)
        if str(rel) in tests or rel.name in ("conftest.py", "setup.py", "noxfile.py"):
            continue
        if any(part in skip_dirs or part.startswith(".") or part == "__pycache__" for part in rel.parts[:-1]):
            continue
        out.append(str(rel))
    return out


def progress_callback(progress: Progress, n: int, label: str = "mutants run") -> Callable[[str, _State], None]:
    """Two bars on ``progress`` that follow a :func:`synthesize` (its ``on_progress``): mutants kept
    of ``n`` (with how many were run), then the kept tasks validated."""
    kept = progress.add_task("mutants kept", total=n, info="")
    checked = progress.add_task("validated", total=None, info="", visible=False)

    def tick(stage: str, state: _State) -> None:
        if stage == "baseline":
            if state.native_sources:
                shown = ", ".join(state.native_sources[:2]) + (" ..." if len(state.native_sources) > 2 else "")
                progress.console.print(
                    f"note: C sources ({shown}) are not built here; the suite passes without them, so its tests "
                    "and the tasks run on the pure-Python code",
                    highlight=False,
                )
            if state.test_files_dropped:  # said before the mutants run: few tests may catch few bugs
                first, error = next(iter(state.test_files_dropped.items()))
                n = len(state.test_files_dropped)
                progress.console.print(
                    f"warning: {n} test file{'s' if n != 1 else ''} could not be imported and "
                    f"{'are' if n != 1 else 'is'} left out (e.g. {first}: {error}); the full list goes to "
                    f"test_files_dropped in {state.summary}",
                    highlight=False,
                )
        elif stage == "mutants":
            good = min(len(state.kept), state.want) - state.dropped["failed_validation"]  # a failed task is replaced
            progress.update(kept, completed=good, info=f"{sum(state.tried.values())} {label}")
        else:
            failing = state.dropped["failed_validation"]
            progress.update(checked, advance=1, visible=True, total=state.written, info=f"failing {failing}" if failing else "")

    return tick


async def synthesize(
    repo: Path | str,
    out: Path,
    opts: SynthOptions,
    spec: SandboxSpec | None = None,
    name: str | None = None,
    on_progress: Callable[[str, _State], None] | None = None,
) -> dict[str, Any]:
    """Synthesise up to ``opts.n`` tasks from ``repo`` (a folder, or ``pypi:NAME[==VERSION]``) into
    the suite folder ``out`` (module doc)."""
    _check_arguments(repo, out, opts, name)
    started = time.perf_counter()
    spec = spec or SandboxSpec()
    given = str(repo)  # as named: the summary does not record this machine's absolute paths
    repo = fetch_pypi(given, out / "sources") if is_pypi(given) else Path(repo).resolve()
    name = name or repo.name
    if not repo.is_dir():
        raise TaskError(f"repository {str(repo)!r} is not a folder")
    if not test_files(repo):
        raise TaskError(
            f"repository {given if is_pypi(given) else str(repo)!r} has no test files ({describe(read_discovery(repo))}; "
            "an sdist may leave its tests out): tasks are made from "
            "what its own pytest suite catches, so it needs one"
        )
    pristine = pristine_copy(repo, out / "repos" / name)
    pristine_t0 = time.perf_counter()
    base = await run_baseline(pristine, spec, opts.timeout_s)
    pristine_s = time.perf_counter() - pristine_t0
    baseline, env, passing = base.run, base.env, base.passing
    native = native_sources(pristine)
    if len(passing) < 2:  # a task needs a test its bug breaks and another it leaves passing
        if native:  # its tests need the C build they did not get
            raise TaskError(needs_c_build(pypi_spec(given) if is_pypi(given) else given, native, len(passing)))
        raise TaskError(too_few_passing(given, base))
    every = [f for f in test_files(pristine) if f not in baseline.collection_errors]
    sites = _sites(pristine, every, protected_lines(out / "tasks", name, opts.tier), opts)
    mutations = sites.mutations
    remove_tasks(out / "tasks", name, opts.tier)
    order = interleave(mutations, opts.seed)
    if opts.max_tries is not None:
        order = (m for _, m in zip(range(opts.max_tries), order, strict=False))
    state = _State(
        enumerate(order), opts.n, test_files_dropped=dict(baseline.collection_errors), summary=out / f"synth-{name}.json",
        native_sources=native,
    )
    state.dropped["overlaps_existing_task"] = sites.overlaps
    if on_progress is not None:
        on_progress("baseline", state)

    async def worker() -> None:
        async with SuiteRunner(pristine, spec, env, opts.timeout_s, base.lenient) as suite:
            suite.files = every
            while len(state.kept) < state.want:
                item = next(state.queue, None)
                if item is None:
                    return
                place, m = item
                source = (pristine / m.path).read_text()
                subset = relevant_files(m, base.trace, every)
                run = await suite.run({m.path: m.apply(source)}, subset)
                state.run_s.append(run.seconds)
                state.tried[m.kind] += 1
                verdict, f2p, p2p, files = classify(run, passing, subset)
                failures = [run.cases[t] for t in f2p if t in run.cases] if verdict == "kept" else []
                instruction = _issue(f2p, failures, pristine) if verdict == "kept" else ""
                if verdict == "kept" and opts.bug_in and bug_in(instruction, m.function) != opts.bug_in:
                    verdict = "bug_elsewhere"
                if verdict != "kept":
                    state.dropped[verdict] += 1
                else:
                    state.kept.append(Kept(m, f2p, p2p, files, failures, place, instruction))
                if on_progress is not None:
                    on_progress("mutants", state)

    written: list[tuple[str, Kept]] = []  # (task id, what it is), in the seeded order
    failures: dict[str, list[str]] = {}
    while True:  # a round: run mutants until enough are caught, write and validate the new tasks
        await gather_all(worker() for _ in range(max(1, opts.concurrency)))  # a cancel waits for every suite runner
        # the first places caught in the seeded order, whichever worker finished first: every mutant before
        # the last of them ran (the queue hands them out in order, and each one taken runs to its end)
        state.kept.sort(key=lambda k: k.order)
        fresh = state.kept[len(written) : state.want]  # each round's mutants come after the last round's
        new: list[tuple[str, Kept]] = []
        for i, k in enumerate(fresh):  # numbered on from the last task written (a failed one keeps its number)
            task_id = write_task(
                out / "tasks", name, len(written) + i + 1, k, pristine, env,
                tier=opts.tier, seed=opts.seed, timeout_s=opts.timeout_s, lenient=base.lenient,
            )  # fmt: skip
            new.append((task_id, k))
        written += new
        state.written = len(written)
        if not opts.validate or not new:
            break
        round_failures: dict[str, list[str]] = {}

        def checked(found: dict[str, list[str]] = round_failures) -> None:  # the bar says how many failed so far
            state.dropped["failed_validation"] = len(failures) + len(found)
            if on_progress is not None:
                on_progress("validate", state)

        await _validate([out / "tasks" / task_id for task_id, _ in new], spec, opts.concurrency, checked, round_failures)
        for task_id in round_failures:
            shutil.rmtree(out / "tasks" / task_id, ignore_errors=True)
        failures.update(round_failures)
        state.dropped["failed_validation"] = len(failures)
        if not round_failures:
            break
        state.want += len(round_failures)  # a task that failed validation is replaced by the next one caught
        if on_progress is not None:
            on_progress("mutants", state)
    state.surplus = max(0, len(state.kept) - state.want)  # caught after the last place was filled
    del state.kept[state.want :]
    state.kept_kinds.update(k.mutation.kind for task_id, k in written if task_id not in failures)
    summary = {
        "repo": given,
        "name": name,
        "seed": opts.seed,
        "tier": opts.tier,
        "requested": opts.n,
        "mutation_sites": len(mutations) + sites.overlaps + sites.uncalled + sites.long,
        "eligible_sites": len(mutations),  # what is left after the overlaps, --bug-in and --max-lines
        "bug_in": opts.bug_in,
        "sites_not_called_by_tests": sites.uncalled,
        "max_lines": opts.max_lines,
        "sites_in_long_functions": sites.long,
        "tried": sum(state.tried.values()),
        "kept": len(written) - len(failures),
        "replacements": min(len(failures), max(0, len(written) - opts.n)),  # tasks written for ones that failed validation
        "dropped": {reason: state.dropped.get(reason, 0) for reason in DROP_REASONS},
        "surplus": state.surplus,
        "by_kind": {k: {"tried": state.tried[k], "kept": state.kept_kinds[k]} for k in sorted(state.tried)},
        "baseline_passing_tests": len(passing),
        "baseline_failing_tests": max(
            0, len(baseline.cases) - len(passing) - len(base.flaky) - len(baseline.collection_errors)
        ),  # a test file pytest could not import is counted in test_files_dropped, not here
        "flaky_tests": base.flaky,
        "test_files": len(every),
        "test_files_dropped": baseline.collection_errors,
        "lenient_settings": base.lenient,
        "native_sources": native,  # optional speedups: the tests ran on the pure-Python code
        "pristine_s": round(pristine_s, 1),
        "mutant_run_s_mean": round(sum(state.run_s) / len(state.run_s), 2) if state.run_s else None,
        "env": env,
        "validation_failures": failures,
        "failed_mutations": {  # what each task that failed validation was (its folder is removed)
            task_id: {"kind": k.mutation.kind, "path": k.mutation.path, "line": k.mutation.line}
            for task_id, k in written if task_id in failures
        },
        "task_ids": sorted(task_id for task_id, _ in written if task_id not in failures),
        "seconds": round(time.perf_counter() - started, 1),
    }
    assert state.summary is not None
    state.summary.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _check_arguments(repo: Path | str, out: Path, opts: SynthOptions, name: str | None) -> None:
    """Refuse, before any work, options and folders a synthesis cannot use."""
    if opts.bug_in not in (None, *BUG_IN):
        raise TaskError(f"tasks synth: bug_in={opts.bug_in!r}; use one of {', '.join(BUG_IN)} (or none)")
    if opts.max_lines is not None and opts.max_lines < 1:
        raise TaskError(f"tasks synth: max_lines={opts.max_lines}; give a number of lines, 1 or more")
    if out.exists() and not out.is_dir():
        raise TaskError(f"tasks synth: OUT_DIR {str(out)!r} is a file; name a folder for the suite")
    if name is not None and (not name or name in (".", "..") or "/" in name or "\\" in name):
        raise TaskError(f"tasks synth: --name {name!r} must be a plain name (no path separators), e.g. mylib")
    if not is_pypi(str(repo)) and out.resolve().is_relative_to(Path(repo).resolve()):
        raise TaskError(
            f"tasks synth: OUT_DIR {str(out)!r} is inside the repository {str(repo)!r}, which it copies; "
            "name a folder outside it"
        )


@dataclass
class _Sites:
    """The mutations a synthesis may run, and how many sites each filter left out."""

    mutations: list[Mutation]
    overlaps: int
    """Sites on a line another tier's task fixes."""
    long: int
    """Sites in functions longer than ``max_lines``."""
    uncalled: int
    """Sites in functions no test calls by name (``bug_in=callee``)."""


def _sites(pristine: Path, every: list[str], protected: dict[str, set[int]], opts: SynthOptions) -> _Sites:
    """Every mutation of the library files, less those on ``protected`` lines, in functions over
    ``opts.max_lines`` lines, and (``bug_in=callee``) in functions none of the test files ``every``
    calls by name."""
    mutations: list[Mutation] = []
    overlaps = 0
    for rel in library_files(pristine):
        for m in find_mutations(rel, (pristine / rel).read_text()):
            if m.line in protected.get(rel, set()):
                overlaps += 1
            else:
                mutations.append(m)
    long_sites = 0
    if opts.max_lines is not None:
        sizes = function_lines(pristine, {m.path for m in mutations})
        short = [m for m in mutations if 0 < sizes.get((m.path, m.function), 0) <= opts.max_lines]
        long_sites, mutations = len(mutations) - len(short), short
    uncalled = 0
    if opts.bug_in == "callee":  # a bug the issue can show being called: in a function a test calls by name
        called = called_names(pristine, every)
        uncalled = sum(1 for m in mutations if m.function.rsplit(".", 1)[-1] not in called)
        mutations = [m for m in mutations if m.function.rsplit(".", 1)[-1] in called]
    return _Sites(mutations, overlaps, long_sites, uncalled)


def _issue(fail_to_pass: list[str], failures: list[JUnitCase], pristine: Path) -> str:
    """The issue text of a kept mutant (:func:`coderl.tasks.synth.issue.issue_text`)."""
    others = max(0, len(fail_to_pass) - len(failures))
    return issue_text(failures, pristine, others) if failures else "Some tests fail.\n"


def function_lines(repo: Path, paths: set[str]) -> dict[tuple[str, str], int]:
    """(path, qualified name) -> lines of every function of the files ``paths`` (decorators included)."""
    sizes: dict[tuple[str, str], int] = {}
    for rel in sorted(paths):
        for name, first, last in enclosing_functions((repo / rel).read_text()):
            sizes[(rel, name)] = max(sizes.get((rel, name), 0), last - first + 1)
    return sizes


def called_names(repo: Path, files: list[str]) -> set[str]:
    """Names the test ``files`` call (``name(`` or ``module.name(``): the functions an issue written
    from their failures can show being called first (:func:`coderl.tasks.synth.issue.issue_callee`)."""
    called: set[str] = set()
    for rel in files:
        text = (repo / rel).read_text(errors="replace")
        called.update(m.group(1) for m in _CALLED.finditer(text))
    return called


_CALLED = re.compile(r"\b([A-Za-z_]\w*)\(")


async def _validate(
    folders: list[Path], spec: SandboxSpec, concurrency: int, tick: Callable[[], object], failures: dict[str, list[str]]
) -> None:
    """Into ``failures``: task id -> problems, for the written tasks that ``check_task`` does not prove."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(folder: Path) -> None:
        async with gate:
            try:
                problems = (await check_task(load_native_task(folder), spec)).problems
            except TaskError as exc:
                problems = [str(exc)]
        if problems:
            failures[folder.name] = problems
        tick()

    await gather_all(one(f) for f in folders)
