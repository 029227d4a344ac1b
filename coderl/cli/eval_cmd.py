"""``coderl eval`` (rollouts + grading + report.json) and ``coderl rollout`` (trajectories only)."""

from __future__ import annotations

import argparse
import asyncio
import json

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coderl.chat import ChatFormat
from coderl.cli.common import config_from_args
from coderl.config import Config
from coderl.engine import create_engine
from coderl.rollout.context import ContextFactory
from coderl.rollout.report import build_report
from coderl.rollout.runner import RolloutResult, RolloutSettings, run_rollouts, task_groups
from coderl.rollout.store import TrajectoryStore
from coderl.rundir import create_run_dir
from coderl.tasks import load_tasks


def run_eval(ns: argparse.Namespace) -> int:
    return asyncio.run(_run(config_from_args(ns), "eval", grade=True))


def run_rollout(ns: argparse.Namespace) -> int:
    return asyncio.run(_run(config_from_args(ns), "rollout", grade=False))


async def _run(cfg: Config, command: str, grade: bool) -> int:

    console = Console(stderr=True)
    tasks = load_tasks(cfg.tasks.source)
    run_dir = create_run_dir(cfg, command)
    engine = create_engine(cfg.engine, cfg.model, seed=cfg.run.seed)
    with console.status("starting the engine"):
        await engine.start()
    chat = ChatFormat.for_model(cfg.model)
    contexts = ContextFactory(cfg.rollout, cfg.sandbox, chat)
    settings = RolloutSettings.from_config(cfg.rollout, cfg.tasks, grade=grade)
    groups = task_groups(tasks, cfg.rollout.group_size)
    store = TrajectoryStore(run_dir)
    try:
        with Progress(
            TextColumn(f"{command}"), BarColumn(), MofNCompleteColumn(), TextColumn("pass rate {task.fields[rate]}"),
            TimeElapsedColumn(), console=console,
        ) as progress:  # fmt: skip
            bar = progress.add_task(command, total=len(tasks) * cfg.rollout.group_size, rate="-")
            done: list[RolloutResult] = []

            def on_done(r: RolloutResult) -> None:
                done.append(r)
                rate = sum(x.resolved for x in done) / len(done)
                progress.update(bar, advance=1, rate=f"{rate:.0%}" if grade else "n/a")

            results = await run_rollouts(groups, engine, contexts, settings, store, on_done)
    finally:
        store.close()
        await engine.stop()
    if grade:
        report = build_report(
            [r.report_row() for r in results], {t.id: t.tier for t in tasks}, cfg.rollout.pass_k
        )
        (run_dir / "report.json").write_text(json.dumps(report, indent=2))
        console.print(
            f"resolved {report['resolved_instances']}/{report['total_instances']}, pass@1 {report['pass@1']:.3f}; "
            f"report: {run_dir / 'report.json'}"
        )
    else:
        console.print(f"{len(results)} trajectories in {run_dir / 'trajectories'}")
    return 0
