"""``coderl eval`` (rollouts + grading + report.json), ``coderl rollout`` (trajectories only) and
``coderl tasks calibrate`` (eval with k samples per task, saved as per-task pass-rate estimates)."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from coderl.cli.common import config_from_args, refuse_early
from coderl.cluster.backend import RolloutBackend
from coderl.config import Config
from coderl.progress import progress_bars
from coderl.rollout.report import build_report
from coderl.rollout.runner import RolloutResult, task_groups
from coderl.rollout.store import TrajectoryStore
from coderl.rundir import create_run_dir
from coderl.runlog import run_log
from coderl.signals import run as run_command
from coderl.tasks import load_tasks


def run_eval(ns: argparse.Namespace) -> int:
    run_command(_run(config_from_args(ns), "eval", grade=True))
    return 0


def run_rollout(ns: argparse.Namespace) -> int:
    run_command(_run(config_from_args(ns), "rollout", grade=False))
    return 0


def run_calibrate(ns: argparse.Namespace) -> int:
    from coderl.cli.train_cmd import train_config
    from coderl.errors import ConfigError
    from coderl.tasks.calibration import Estimate, save_estimates, setting_key

    if ns.k < 1:
        raise ConfigError(f"--k: got {ns.k}; give the samples per task, at least 1")
    # the estimates are for training: the config coderl train would run with the same arguments
    cfg = train_config(ns.config_path, list(ns.config_overrides), bare=ns.bare)
    cfg = cfg.model_copy(
        update={  # the tasks the curriculum draws from: train.tasks
            "rollout": cfg.rollout.model_copy(update={"group_size": ns.k, "pass_k": [1]}),
            "tasks": cfg.tasks.model_copy(update={"source": cfg.train.tasks}),
        }
    )
    results = run_command(_run(cfg, "calibrate", grade=True))
    estimates: dict[str, Estimate] = {}
    for r in results:
        est = estimates.setdefault(r.trajectory.task_id, Estimate())
        est.samples += 1
        est.passed += int(r.resolved)
    key, setting = setting_key(cfg.model, cfg.rollout, policy=ns.policy)
    path = save_estimates(cfg.tasks.source, key, setting, estimates)
    rates = [e.rate for e in estimates.values() if e.rate is not None]
    edge = sum(1 for x in rates if 0 < x < 1)
    Console(stderr=True).print(
        f"{len(estimates)} tasks x {ns.k} samples: {sum(1 for x in rates if x == 0)} never solved, {edge} at the "
        f"edge (0 < pass rate < 1, where GRPO has a signal), {sum(1 for x in rates if x == 1)} always solved; "
        f"estimates for setting {key}: {path}"
    )
    return 0


async def _run(cfg: Config, command: str, grade: bool) -> list[RolloutResult]:
    console = Console(stderr=True)
    tasks = load_tasks(cfg.tasks.source)
    refuse_early(cfg)
    run_dir = create_run_dir(cfg, command)
    with run_log(run_dir, command, console):
        backend = RolloutBackend(cfg, grade=grade)
        store = TrajectoryStore(run_dir)
        try:
            replicas = cfg.cluster.engine_replicas if backend.on_ray else 0
            with console.status(f"launching {replicas} engine replica(s) on the Ray cluster" if replicas else "starting the engine"):
                await backend.start_engine()
            if backend.replicas is not None:
                console.print(f"engine replicas ({cfg.cluster.engine_server}): {', '.join(backend.replicas.urls)}")
            if backend.on_ray:
                with console.status("placing the rollout workers on the Ray cluster"):
                    await backend.serve()
                console.print(backend.describe())
            else:
                await backend.serve()
            with progress_bars(
                console, TextColumn(f"{command}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("pass rate {task.fields[pass_rate]}"), TimeElapsedColumn(),
            ) as progress:  # fmt: skip
                bar = progress.add_task(command, total=len(tasks) * cfg.rollout.group_size, pass_rate="-")
                done: list[RolloutResult] = []

                def on_done(r: RolloutResult) -> None:
                    done.append(r)
                    rate = sum(x.resolved for x in done) / len(done)
                    progress.update(bar, advance=1, pass_rate=f"{rate:.0%}" if grade else "n/a")

                results = await backend.run(task_groups(tasks, cfg.rollout.group_size), on_done=on_done, store=store)
        finally:
            store.close()
            await backend.stop()
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
        return results
