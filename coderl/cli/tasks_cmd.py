"""``coderl tasks list|validate|convert``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from coderl.cli.common import config_from_args
from coderl.errors import ConfigError
from coderl.progress import progress_bars
from coderl.signals import run as run_command
from coderl.tasks import load_tasks


def run_tasks_list(ns: argparse.Namespace) -> int:
    cfg = config_from_args(ns)
    tasks = load_tasks(cfg.tasks.source)
    rows: list[dict[str, Any]] = [
        {
            "id": t.id,
            "tier": t.tier,
            "source": t.source,
            "fail_to_pass": len(t.fail_to_pass),
            "pass_to_pass": len(t.pass_to_pass),
            "has_gold_patch": t.gold_patch is not None,
            "title": t.instruction.splitlines()[0][:100] if t.instruction else "",
        }
        for t in tasks
    ]
    if ns.json:
        print(json.dumps(rows))
        return 0
    table = Table(title=f"{len(rows)} tasks from {cfg.tasks.source}")
    for col in ("id", "tier", "source", "F2P", "P2P", "title"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["id"], r["tier"], r["source"], str(r["fail_to_pass"]), str(r["pass_to_pass"]), r["title"]
        )
    Console().print(table)
    return 0


def run_tasks_validate(ns: argparse.Namespace) -> int:
    from coderl.tasks.validate import TaskCheck, validate_tasks

    cfg = config_from_args(ns)
    tasks = load_tasks(cfg.tasks.source)
    console = Console(stderr=True)
    with progress_bars(
        console, TextColumn("validating"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[failing]} failing"),
        TimeElapsedColumn(),
    ) as progress:  # fmt: skip
        bar = progress.add_task("validating", total=len(tasks), failing=0)

        def done(check: TaskCheck) -> None:
            progress.update(bar, advance=1, failing=progress.tasks[0].fields["failing"] + (not check.ok))
            if not check.ok:
                progress.console.print(f"[red]{check.task_id}[/red]: " + "; ".join(check.problems))

        report = run_command(validate_tasks(tasks, cfg.sandbox, cfg.tasks.concurrency, done))
    if ns.json:
        print(json.dumps(report))
    else:
        console.print(f"{report['ok']}/{report['total']} tasks valid")
    return 0 if report["ok"] == report["total"] else 1


def run_tasks_convert(ns: argparse.Namespace) -> int:
    from coderl.tasks.dataset import write_parquet

    out = Path(ns.output)
    if out.suffix != ".parquet" or out.is_dir():
        raise ConfigError(
            f"tasks convert: the output {ns.output!r} is {'a folder' if out.is_dir() else 'not a .parquet file'}; "
            "give the file to write first: coderl tasks convert OUT.parquet [CONFIG.yaml] [tasks.source=...]"
        )
    cfg = config_from_args(ns)
    tasks = load_tasks(cfg.tasks.source)
    if ns.format == "verl":
        from coderl.integrations.verl_bridge import write_verl_parquet

        write_verl_parquet(tasks, out, agent_name=ns.agent_name)
    else:
        write_parquet(tasks, out)
    Console(stderr=True).print(f"wrote {len(tasks)} tasks to {out} ({ns.format} format)")
    return 0


def _no_task_advice(summary: dict[str, Any], path: str) -> str:
    """What to try when a synthesis kept no task, from what its summary (at ``path``) says went wrong."""
    if not summary["mutation_sites"]:
        return "its library code offers no mutation site (no function this synthesis can change)"
    if not summary["eligible_sites"]:
        return (
            f"none of its {summary['mutation_sites']} mutation sites was left to try (overlapping existing tasks "
            f"{summary['dropped']['overlaps_existing_task']}, not called by the tests "
            f"{summary['sites_not_called_by_tests']}, in longer functions {summary['sites_in_long_functions']}); "
            "widen the choice (--bug-in, --max-lines)"
        )
    failed = summary["dropped"].get("failed_validation", 0)
    if failed:  # mutants were caught, and their tasks did not hold up: more of them would fare the same
        return (
            f"all {failed} caught mutant{'s' if failed != 1 else ''} failed validation as tasks (the gold patch must "
            "resolve a task, the empty patch and a test-only patch must not): the suite ran otherwise when graded "
            f"than when synthesised; validation_failures in {path} says how, for each"
        )
    advice = []
    if summary["tried"] < summary["eligible_sites"]:
        advice.append(f"allow more mutants with --max-tries ({summary['eligible_sites']} could be tried)")
    if summary["bug_in"] or summary["max_lines"]:
        advice.append("widen the choice (--bug-in, --max-lines)")
    dropped = summary["test_files_dropped"]
    if dropped:
        advice.append(
            f"{len(dropped)} test file{'s' if len(dropped) != 1 else ''} could not be imported and "
            f"{'were' if len(dropped) != 1 else 'was'} left out (test_files_dropped in {path}): with them the "
            "suite may catch more"
        )
    if summary["tried"] >= 10 and summary["dropped"]["uncaught"] > summary["tried"] // 2:  # not from a handful
        advice.append(
            f"most mutants were caught by no test: the {summary['baseline_passing_tests']} passing tests "
            "exercise little of the library"
        )
    return "; ".join(advice) or f"every eligible mutation site was tried; see the dropped counts in {path}"


def run_tasks_synth(ns: argparse.Namespace) -> int:
    from coderl.tasks.synth.build import SynthOptions, progress_callback, synthesize

    cfg = config_from_args(ns)
    opts = SynthOptions(
        n=ns.n, seed=ns.seed, tier=ns.tier, concurrency=ns.concurrency, max_tries=ns.max_tries,
        timeout_s=ns.timeout, validate=not ns.no_validate, bug_in=ns.bug_in,
        max_lines=ns.max_lines,
    )  # fmt: skip
    console = Console(stderr=True)
    with progress_bars(console) as progress:
        on_progress = progress_callback(progress, opts.n)
        summary = run_command(synthesize(ns.repo, Path(ns.out), opts, cfg.sandbox, ns.name, on_progress))
    if ns.json:
        print(json.dumps(summary))
        return 0 if summary["kept"] else 1
    dropped = ", ".join(f"{k} {v}" for k, v in summary["dropped"].items() if v) or "none"
    surplus = f"; {summary['surplus']} caught after the last place was filled" if summary["surplus"] else ""
    ran = f"{summary['tried']} of {summary['mutation_sites']} mutants run; dropped: {dropped}{surplus}"
    path = Path(ns.out) / f"synth-{summary['name']}.json"
    if not summary["kept"]:
        console.print(f"coderl: error: no task kept ({ran}); {_no_task_advice(summary, str(path))}", highlight=False)
        return 1
    short = summary["requested"] - summary["kept"]
    console.print(
        f"{summary['kept']} tasks in {ns.out}/tasks ({ran}); load them with tasks.source=native:{ns.out}; "
        f"counts in {path}", highlight=False,
    )  # fmt: skip
    if short > 0:
        failed = summary["dropped"]["failed_validation"]
        why = "no more of the mutants tried were kept" + (
            f" ({failed} failed validation and were replaced as far as the mutants went; failed_mutations "
            "in the counts)" if failed else ""
        )
        console.print(f"{short} fewer than --n {summary['requested']}: {why}", highlight=False)
    kinds = summary["by_kind"]
    if kinds:  # each kind's share of the kept tasks, and how many of its mutants were kept
        console.print("by kind (share of kept, kept/tried, a surplus mutant counted as tried): " + ", ".join(
            f"{k} {v['kept'] / max(summary['kept'], 1):.0%} ({v['kept']}/{v['tried']})" for k, v in kinds.items()
        ))  # fmt: skip
    return 0 if summary["kept"] else 1
