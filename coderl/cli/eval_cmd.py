"""``coderl eval`` (rollouts + grading + report.json), ``coderl rollout`` (trajectories only) and
``coderl tasks calibrate`` (eval with k samples per task, saved as per-task pass-rate estimates)."""

from __future__ import annotations

import argparse
import asyncio
import json

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from coderl.chat import ChatFormat
from coderl.cli.common import config_from_args
from coderl.cluster.engines import RayEngines
from coderl.cluster.ray_rollouts import RayRollouts, connect, import_ray
from coderl.config import Config
from coderl.engine import create_engine
from coderl.progress import progress_bars
from coderl.rollout.context import ContextFactory
from coderl.rollout.report import build_report
from coderl.rollout.runner import RolloutResult, RolloutSettings, run_rollouts, task_groups
from coderl.rollout.store import TrajectoryStore
from coderl.rundir import create_run_dir
from coderl.tasks import load_tasks


def run_eval(ns: argparse.Namespace) -> int:
    asyncio.run(_run(config_from_args(ns), "eval", grade=True))
    return 0


def run_rollout(ns: argparse.Namespace) -> int:
    asyncio.run(_run(config_from_args(ns), "rollout", grade=False))
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
    results = asyncio.run(_run(cfg, "calibrate", grade=True))
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
    run_dir = create_run_dir(cfg, command)
    remote = RayRollouts(cfg, grade=grade) if cfg.cluster.backend == "ray" else None
    replicas: RayEngines | None = None  # cluster.engine_replicas: servers launched on the Ray cluster
    ray_started = False
    if remote is not None and cfg.cluster.engine_replicas:
        ray_started = connect(cfg.cluster, remote.namespace)
        replicas = RayEngines(cfg, remote.namespace)
        try:
            with console.status(f"launching {cfg.cluster.engine_replicas} engine replica(s) on the Ray cluster"):
                engine = await replicas.start()
        except BaseException:
            await _leave_cluster(replicas, ray_started)
            raise
        console.print(f"engine replicas ({cfg.cluster.engine_server}): {', '.join(replicas.urls)}")
    else:
        engine = create_engine(cfg.engine, cfg.model, seed=cfg.run.seed)
        with console.status("starting the engine"):
            await engine.start()
    chat = ChatFormat.for_model(cfg.model)
    contexts = ContextFactory(cfg.rollout, cfg.sandbox, chat)
    settings = RolloutSettings.from_config(cfg.rollout, cfg.tasks, grade=grade)
    groups = task_groups(tasks, cfg.rollout.group_size)
    store = TrajectoryStore(run_dir)
    try:
        if remote is not None:
            with console.status("placing the rollout workers on the Ray cluster"):
                await remote.start(engine, str(cfg.model.path or "coderl-policy"))
            console.print(remote.describe())
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

            if remote is None:
                results = await run_rollouts(groups, engine, contexts, settings, store, on_done)
            else:  # the workers return each rollout as it finishes; stored here, as run_rollouts does

                def store_and_count(r: RolloutResult) -> None:
                    store.add(r.trajectory, r.record())
                    on_done(r)

                results = await remote.run(groups, on_done=store_and_count)
    finally:
        if remote is not None:
            await remote.stop()
        store.close()
        await engine.stop()
        if replicas is not None:
            await _leave_cluster(replicas, ray_started)
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


async def _leave_cluster(replicas: RayEngines, ray_started: bool) -> None:
    """Stop the launched engine replicas, and the local Ray cluster if this command started it."""
    await replicas.stop()
    if ray_started:
        import_ray().shutdown()
