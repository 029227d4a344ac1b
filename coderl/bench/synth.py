"""``coderl bench synth``: ``coderl tasks synth`` on public libraries fetched from PyPI at run time, one
row per library: its layout, tests, mutants tried and kept, drops by reason, validation, minutes.

Owns: the default list of libraries (projects whose sdists carry their tests and run unbuilt, plus three
that must be refused: one that needs its C build, one whose sdist has no tests, one whose tests cannot be
imported from its sdist) and the table. It does not
synthesise anything itself (:func:`coderl.tasks.synth.build.synthesize` does) and commits nothing
from those libraries: tasks are made under the bench's run folder.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console

from coderl import signals
from coderl.bench.report import machine_info
from coderl.errors import TaskError
from coderl.progress import progress_bars
from coderl.sandbox import SandboxSpec

LIBRARIES = (
    "toolz==0.12.1",  # tests inside the package (toolz/tests)
    "cachetools==5.5.0",  # a src/ layout, tests at the root
    "humanize==4.11.0",  # a src/ layout; some test files need freezegun (left out, counted, where missing)
    "boltons==24.1.0",  # many modules, tests at the root
    "tomlkit==0.13.2",  # tests/ with a conftest.py and data-driven tests over toml-test's files
    "inflection==0.5.1",  # one test module beside the package, at the root
    "markupsafe==3.0.2",  # C speedups over a pure-Python fallback: run unbuilt, on the pure-Python code
    "ujson==5.10.0",  # a C extension it cannot import without: refused
    "sortedcontainers==2.4.0",  # an sdist without tests: refused
    "jmespath==1.1.0",  # its tests import from tests/__init__.py, which the sdist leaves out: refused
)
"""What ``coderl bench synth`` runs by default (pinned: the table must be reproducible)."""


async def bench_synth(
    spec: SandboxSpec,
    libraries: list[str],
    n: int,
    out: Path,
    timeout_s: float = 120.0,
    console: Console | None = None,
) -> dict[str, Any]:
    """``tasks synth pypi:LIB --n n`` for each library (a library that is refused gives its reason)."""
    console = console or Console(stderr=True)
    rows = [await _library(lib, spec, n, out, timeout_s, console) for lib in libraries]
    return {"libraries": rows, "n": n, "timeout_s": timeout_s, "machine": machine_info()}


async def _library(lib: str, spec: SandboxSpec, n: int, out: Path, timeout_s: float, console: Console) -> dict[str, Any]:
    from coderl.tasks.synth.build import SynthOptions, progress_callback, synthesize

    t0 = time.perf_counter()
    row: dict[str, Any] = {"library": lib}
    with progress_bars(console, name=f"bench synth {lib}") as progress:
        tick = progress_callback(progress, n, "run")
        try:
            options = SynthOptions(n=n, seed=0, timeout_s=timeout_s)
            summary = await synthesize(f"pypi:{lib}", out, options, spec, on_progress=tick)
        except TaskError as exc:
            row["refused"] = str(exc).splitlines()[0]
            console.print(f"bench synth: {lib} refused: {row['refused']}")
            summary = {}
    if summary:
        row.update({k: summary[k] for k in (
            "tried", "kept", "dropped", "by_kind", "baseline_passing_tests", "flaky_tests", "test_files",
            "test_files_dropped", "lenient_settings", "pristine_s", "mutant_run_s_mean", "validation_failures",
        )})  # fmt: skip
        row["src_layout"] = summary["env"].get("PYTHONPATH") == "src"
    row["minutes"] = round((time.perf_counter() - t0) / 60, 2)
    return row


def run(cfg: Any, libraries: list[str], n: int, quick: bool, console: Console) -> dict[str, Any]:
    out = Path(cfg.run.dir or "runs") / "bench-synth"
    chosen = libraries[:1] if quick else libraries
    if not chosen:
        raise TaskError("bench synth: --libraries names no library; give NAME==VERSION,... (or leave it out)")
    result = signals.run(bench_synth(cfg.sandbox, chosen, 3 if quick else n, out, console=console))
    if all("refused" in row for row in result["libraries"]):  # a typo'd name, not a measurement
        reasons = "; ".join(f"{row['library']}: {row['refused']}" for row in result["libraries"])
        raise TaskError(f"bench synth: every library was refused ({reasons})")
    return result


def to_markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = []
    kinds: dict[str, int] = {}
    for row in r["libraries"]:
        if "refused" in row:
            refused = row["refused"].replace("|", "\\|")  # a bar would end the table's cell
            lines.append(f"| `{row['library']}` | refused: {refused} | | | | | {row['minutes']:.1f} |")
            continue
        dropped = ", ".join(f"{k} {v}" for k, v in row["dropped"].items() if v) or "none"
        files = f"{row['test_files']} test file{'s' if row['test_files'] != 1 else ''}" + (
            f" (+{len(row['test_files_dropped'])} left out: pytest could not import them)" if row["test_files_dropped"] else ""
        )
        tests = f"{row['baseline_passing_tests']}" + (f" ({len(row['flaky_tests'])} flaky)" if row["flaky_tests"] else "")
        layout = "src/" if row["src_layout"] else "flat"
        valid = f"{row['kept']} of {row['kept'] + len(row['validation_failures'])}"
        lines.append(
            f"| `{row['library']}` | {layout}; {files}; {tests} tests pass | {row['tried']} | "
            f"{row['kept']} | {dropped} | {valid} | {row['minutes']:.1f} |"
        )
        for kind, v in row["by_kind"].items():
            kinds[kind] = kinds.get(kind, 0) + v["kept"]
    total = sum(kinds.values())
    shares = ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])) if total else "none"
    return f"""## Tasks from public libraries (`coderl bench synth`)

Command: `{r.get("command", "coderl bench synth")}` — {m["cpu"]}, {m["cores"]} cores. Each library's sdist
is fetched with pip at run time (nothing of it is committed), its suite run twice (flaky tests left out)
and up to {r["n"]} tasks synthesised (seed 0), each proven by validation; a suite run may take {r["timeout_s"]:.0f} s.

| library | layout and suite | mutants run | kept | dropped | validated | minutes |
|---|---|---|---|---|---|---|
{chr(10).join(lines)}

Kept tasks by kind (all libraries): {shares}.
"""
