"""``coderl bench scale``: synchronous against asynchronous training, steps per second.

The same short training run three times: ``train.mode=sync``, then ``async`` at ``max_staleness`` 1
and 2. The engine is the scripted one with a fixed latency per call (so rollout time is set by the
bench, not by model speed, and is comparable to the update's); everything else is real: the ``swe``
loop in bubblewrap sandboxes, grading by hidden tests, the actor's forward, backward and AdamW step on
the real model, the weight sync. The first step of each run has nothing to overlap with, so steps/s
counts the steps after it. The ratio async / sync is the figure; the per-step engine and trainer idle
fractions say where the time went.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from coderl.bench.report import machine_info
from coderl.config import Config
from coderl.engine.scripted import ScriptedEngine
from coderl.train import checkpoints
from coderl.train.loop import Trainer

MODES: list[tuple[str, int]] = [("sync", 1), ("async", 1), ("async", 2)]


def _one(cfg: Config, mode: str, staleness: int, latency_s: float, console: Console) -> dict[str, Any]:
    run_cfg = cfg.model_copy(
        update={"train": cfg.train.model_copy(update={"mode": mode, "max_staleness": staleness})}
    )
    with tempfile.TemporaryDirectory(prefix="coderl-bench-scale-") as tmp:
        run_dir = Path(tmp)
        trainer = Trainer(run_cfg, run_dir, console, engine=ScriptedEngine(latency_s=latency_s))
        asyncio.run(trainer.run())
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


def bench_scale(cfg: Config, latency_s: float, console: Console | None = None) -> dict[str, Any]:
    console = console or Console(stderr=True)
    if cfg.train.steps < 2:
        raise ValueError(f"train.steps: got {cfg.train.steps}; the bench times the steps after the first, so >= 2")
    runs = []
    for mode, staleness in MODES:
        console.print(f"[bold]{mode}[/]{f' (max_staleness {staleness})' if mode == 'async' else ''}")
        runs.append(_one(cfg, mode, staleness, latency_s, console))
    sync = runs[0]["steps_per_s"]
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
        "async_speedup_staleness_2": runs[2]["steps_per_s"] / sync,
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
        f"Async ÷ sync steps/s: **{r['async_speedup_staleness_1']:.2f}×** at max_staleness 1, "
        f"**{r['async_speedup_staleness_2']:.2f}×** at 2 (target ≥ 1.5× at 1 where rollout and update times "
        "are comparable). On one machine the actor's update and the sandboxes share its cores.",
    ]
    return "\n".join(lines)
