"""``coderl bench scale``: synchronous against asynchronous training, steps per second.

The same short training run three times (``--quick``: the first two): ``train.mode=sync``, then
``async`` at ``max_staleness`` 1 and 2. The engine is the scripted one with a fixed latency per call (so
rollout time is set by the bench, not by model speed); everything else is real: the ``swe``
loop in bubblewrap sandboxes, grading by hidden tests, the actor's forward, backward and AdamW step on
the real model, the weight sync. The first step of each run has nothing to overlap with, so steps/s
counts the steps after it. The ratio async / sync is the figure; the per-step engine and trainer idle
fractions say where the time went.

Where Ray is installed, the bench also times rollouts (no training) through 1 and then 2 rollout workers
(``cluster.backend=ray``, Ray worker processes on a local cluster, each running at most
``rollout.max_sandboxes`` rollouts) on the same scripted engine: rollouts per second, start-up of the
workers not counted.
"""

from __future__ import annotations

import importlib.util
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from coderl import signals
from coderl.bench.report import machine_info
from coderl.config import Config
from coderl.engine.scripted import ScriptedEngine
from coderl.rollout.runner import task_groups
from coderl.tasks import load_tasks
from coderl.train import checkpoints
from coderl.train.loop import Trainer

MODES: list[tuple[str, int]] = [("sync", 1), ("async", 1), ("async", 2)]
QUICK_MODES = MODES[:2]
"""``--quick`` (a smoke run) leaves out max_staleness 2."""


def _one(cfg: Config, mode: str, staleness: int, latency_s: float, console: Console) -> dict[str, Any]:
    run_cfg = cfg.model_copy(
        update={"train": cfg.train.model_copy(update={"mode": mode, "max_staleness": staleness})}
    )
    with tempfile.TemporaryDirectory(prefix="coderl-bench-scale-") as tmp:
        run_dir = Path(tmp)
        trainer = Trainer(run_cfg, run_dir, console, engine=ScriptedEngine(latency_s=latency_s))
        signals.run(trainer.run())
        rows = [r for r in checkpoints.read_metrics(run_dir / "metrics.jsonl") if "pass_rate" in r]
    timed = rows[1:]
    seconds = sum(r["step_s"] for r in timed)

    def mean(key: str) -> float:
        return statistics.fmean(float(r.get(key, 0.0)) for r in timed)

    return {
        "mode": mode,
        "max_staleness": staleness if mode == "async" else None,
        "steps_timed": len(timed),
        "seconds": seconds,
        "steps_per_s": len(timed) / max(seconds, 1e-9),
        "update_s_mean": statistics.fmean(r["stage_s"].get("update", 0.0) for r in timed),
        "rollout_wait_s_mean": statistics.fmean(r["stage_s"].get("rollout", 0.0) for r in timed),
        "engine_idle_fraction": mean("engine_idle_fraction"),
        "trainer_idle_fraction": mean("trainer_idle_fraction"),
        "stale_dropped": sum(int(r.get("stale_dropped", 0)) for r in timed),
        "policy_lag_max": max((int(r.get("policy_lag_max", 0)) for r in timed), default=0),
    }


def ray_throughput(cfg: Config, latency_s: float, workers: int, console: Console) -> dict[str, Any]:
    """Rollouts per second through ``workers`` Ray rollout workers: two rounds of ``train.tasks_per_step``
    tasks x ``train.group_size`` samples, graded, on the scripted engine."""
    from coderl.cluster.ray_rollouts import RayRollouts

    cluster = cfg.cluster.model_copy(
        update={"backend": "ray", "address": "local", "rollout_workers": workers}
    )
    tasks = load_tasks(cfg.train.tasks)[: cfg.train.tasks_per_step]
    groups = task_groups(tasks * 2, cfg.train.group_size)

    async def run() -> tuple[float, int, int]:
        engine = ScriptedEngine(latency_s=latency_s)
        await engine.start()
        remote = RayRollouts(cfg.model_copy(update={"cluster": cluster}))
        try:
            await remote.start(engine, "scripted")
            began = time.perf_counter()
            results = await remote.run(groups)
            return time.perf_counter() - began, len(results), sum(r.trajectory.num_turns for r in results)
        finally:
            await remote.stop()
            await engine.stop()

    console.print(f"[bold]ray[/] ({workers} rollout worker{'s' if workers > 1 else ''})")
    seconds, rollouts, turns = signals.run(run())
    return {
        "workers": workers,
        "max_sandboxes_per_worker": cfg.rollout.max_sandboxes,
        "rollouts": rollouts,
        "turns": turns,
        "seconds": seconds,
        "rollouts_per_s": rollouts / max(seconds, 1e-9),
    }


def bench_scale(
    cfg: Config, latency_s: float, console: Console | None = None, quick: bool = False
) -> dict[str, Any]:
    console = console or Console(stderr=True)
    if cfg.train.steps < 2:
        raise ValueError(
            f"train.steps: got {cfg.train.steps}; the bench times the steps after the first, so >= 2"
        )
    runs = []
    for mode, staleness in QUICK_MODES if quick else MODES:
        console.print(f"[bold]{mode}[/]{f' (max_staleness {staleness})' if mode == 'async' else ''}")
        runs.append(_one(cfg, mode, staleness, latency_s, console))
    sync = runs[0]["steps_per_s"]
    ray: dict[str, Any] = {"skipped": "Ray is not installed (pip install 'coderl[ray]')"}
    if importlib.util.find_spec("ray") is not None:
        from coderl.cluster.ray_rollouts import connect, import_ray

        started = connect(cfg.cluster.model_copy(update={"address": "local"}), "coderl-bench-scale")
        try:  # one local cluster for both runs
            one, two = (ray_throughput(cfg, latency_s, n, console) for n in (1, 2))
        finally:
            if started:
                import_ray().shutdown()
        ray = {"runs": [one, two], "speedup_2_workers": two["rollouts_per_s"] / one["rollouts_per_s"]}
    return {
        "machine": machine_info(),
        "latency_s": latency_s,
        "steps": cfg.train.steps,
        "tasks_per_step": cfg.train.tasks_per_step,
        "group_size": cfg.train.group_size,
        "tasks": cfg.train.tasks,
        "agent": cfg.rollout.agent,
        "max_turns": cfg.rollout.max_turns,
        "max_tokens": cfg.rollout.max_tokens,
        "runs": runs,
        "async_speedup_staleness_1": runs[1]["steps_per_s"] / sync,
        **({"async_speedup_staleness_2": runs[2]["steps_per_s"] / sync} if len(runs) > 2 else {}),
        "ray": ray,
    }


def to_markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [
        "## Synchronous vs asynchronous training (`coderl bench scale`)",
        "",
        f"Command: `{r['command']}` — {m['cpu']}, {m['cores']} cores, torch {m['torch']}. `{r['tasks']}`, "
        f"{r['tasks_per_step']} tasks × {r['group_size']} samples a step, the `{r['agent']}` loop "
        f"({r['max_turns']} turns of at most {r['max_tokens']} tokens) in bubblewrap sandboxes, graded by the "
        f"hidden tests; the scripted engine answers each call after {r['latency_s']:.1f} s; the actor updates "
        f"the real model. {r['steps']} steps a run; steps/s over the steps after the first.",
        "",
        "| mode | steps/s | update s (mean) | waiting for rollouts s (mean) | engine idle | trainer idle | stale dropped | max lag |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in r["runs"]:
        name = run["mode"] + (f", max_staleness {run['max_staleness']}" if run["max_staleness"] else "")
        lines.append(
            f"| {name} | {run['steps_per_s']:.4f} | {run['update_s_mean']:.1f} | {run['rollout_wait_s_mean']:.1f} | "
            f"{run['engine_idle_fraction']:.0%} | {run['trainer_idle_fraction']:.0%} | {run['stale_dropped']} | "
            f"{run['policy_lag_max']} |"
        )
    lines += [
        "",
        f"Async ÷ sync steps/s: **{r['async_speedup_staleness_1']:.2f}×** at max_staleness 1"
        + (f", **{r['async_speedup_staleness_2']:.2f}×** at 2" if "async_speedup_staleness_2" in r else "")
        + " (target ≥ 1.5× at 1 where rollout and update times "
        "are comparable). On one machine the actor's update and the sandboxes share its cores.",
        "",
    ]
    ray = r["ray"]
    if "skipped" in ray:
        lines.append(f"Rollout workers on Ray: not measured ({ray['skipped']}).")
        return "\n".join(lines)
    lines += [
        "Rollouts alone (no training) through Ray rollout workers on a local Ray cluster on this machine, the "
        f"same scripted engine, {ray['runs'][0]['max_sandboxes_per_worker']} rollouts at once per worker:",
        "",
        "| rollout workers | rollouts | turns | seconds | rollouts/s |",
        "|---|---|---|---|---|",
    ]
    for run in ray["runs"]:
        lines.append(
            f"| {run['workers']} | {run['rollouts']} | {run['turns']} | {run['seconds']:.1f} | {run['rollouts_per_s']:.3f} |"
        )
    lines += ["", f"2 workers ÷ 1: **{ray['speedup_2_workers']:.2f}×** rollouts/s."]
    return "\n".join(lines)
