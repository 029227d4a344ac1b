"""``coderl eval`` (rollouts + grading + report.json) and ``coderl rollout`` (trajectories only)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coderl.agents import AgentContext, AgentLimits
from coderl.agents.baseline import BaselineCache
from coderl.chat import ChatFormat
from coderl.cli.common import config_from_args
from coderl.config import Config
from coderl.engine import SamplingParams, create_engine
from coderl.engine.base import Engine
from coderl.rollout.report import build_report
from coderl.rollout.runner import RolloutResult, RolloutSettings, run_rollouts
from coderl.rollout.store import TrajectoryStore
from coderl.rundir import create_run_dir
from coderl.sandbox import Sandbox, create_sandbox
from coderl.tasks import load_tasks
from coderl.types import Task


def run_eval(ns: argparse.Namespace) -> int:
    return asyncio.run(_run(config_from_args(ns), "eval", grade=True))


def run_rollout(ns: argparse.Namespace) -> int:
    return asyncio.run(_run(config_from_args(ns), "rollout", grade=False))


def context_factory(cfg: Config, chat: ChatFormat) -> Any:
    r = cfg.rollout
    if r.agent == "remote" and not r.remote_command.strip():
        from coderl.errors import ConfigError

        raise ConfigError(
            "rollout.remote_command: empty — rollout.agent=remote runs an agent program; give its command "
            "(e.g. the one in coderl/configs/remote_mini_swe_agent.yaml)"
        )
    sampling = SamplingParams(max_tokens=r.max_tokens, temperature=r.temperature, top_p=r.top_p)
    limits = AgentLimits(r.max_turns, r.max_total_tokens, r.max_context_tokens, r.max_tool_output_chars)

    async def make_sandbox(task: Task) -> Sandbox:
        return await create_sandbox(
            cfg.sandbox.model_copy(update={"workspace": task.repo, "workdir": task.workdir})
        )

    baselines = BaselineCache()  # one per run: each snapshot's git baseline is made once

    def make(engine: Engine, group_id: str) -> AgentContext:
        return AgentContext(
            engine,
            chat,
            sampling,
            make_sandbox,
            limits,
            group_id,
            baselines,
            response_prefix=r.response_prefix,
            remote_command=r.remote_command,
            remote_timeout_s=r.remote_timeout_s,
        )

    return make


async def _run(cfg: Config, command: str, grade: bool) -> int:
    from coderl.checkpoint import load_tokenizer, resolve_checkpoint

    console = Console(stderr=True)
    tasks = load_tasks(cfg.tasks.source)
    bad_k = [k for k in cfg.rollout.pass_k if k > cfg.rollout.group_size]
    if bad_k:
        from coderl.errors import ConfigError

        raise ConfigError(
            f"rollout.pass_k: got {bad_k} — each k needs rollout.group_size >= k (group_size={cfg.rollout.group_size})"
        )
    run_dir = create_run_dir(cfg, command)
    engine = create_engine(cfg.engine, cfg.model, seed=cfg.run.seed)
    with console.status("starting the engine"):
        await engine.start()
    chat = ChatFormat(load_tokenizer(resolve_checkpoint(cfg.model.path, cfg.model.cache_dir)))
    store = TrajectoryStore(run_dir)
    settings = RolloutSettings(
        agent=cfg.rollout.agent, group_size=cfg.rollout.group_size, max_engine_requests=cfg.rollout.max_engine_requests,
        max_sandboxes=cfg.rollout.max_sandboxes, grade=grade, reward=cfg.tasks.reward,
    )  # fmt: skip
    total = len(tasks) * cfg.rollout.group_size
    try:
        with Progress(
            TextColumn(f"{command}"), BarColumn(), MofNCompleteColumn(), TextColumn("pass rate {task.fields[rate]}"),
            TimeElapsedColumn(), console=console,
        ) as progress:  # fmt: skip
            bar = progress.add_task(command, total=total, rate="-")
            done: list[RolloutResult] = []

            def on_done(r: RolloutResult) -> None:
                done.append(r)
                rate = sum(x.resolved for x in done) / len(done)
                progress.update(bar, advance=1, rate=f"{rate:.0%}" if grade else "n/a")

            results = await run_rollouts(
                tasks, engine, context_factory(cfg, chat), settings, cfg.sandbox, store, on_done
            )
    finally:
        store.close()
        await engine.stop()
    if grade:
        rows = [{"task_id": r.trajectory.task_id, "resolved": r.resolved, "reward": r.trajectory.reward,
                 "exit_status": r.trajectory.exit_status} for r in results]  # fmt: skip
        report = build_report(rows, {t.id: t.tier for t in tasks}, cfg.rollout.pass_k)
        (run_dir / "report.json").write_text(json.dumps(report, indent=2))
        console.print(
            f"resolved {report['resolved_instances']}/{report['total_instances']}, pass@1 {report['pass@1']:.3f}; "
            f"report: {Path(run_dir) / 'report.json'}"
        )
    else:
        console.print(f"{len(results)} trajectories in {run_dir / 'trajectories'}")
    return 0
