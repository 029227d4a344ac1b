"""``coderl bench learn``: does training move the numbers? A fixed task set, fixed seeds, ~20 steps of
``coderl train`` (packaged defaults unless overridden); the pass rate and the (shaped) reward of the
first and the last ``window`` steps, and whether they rose. A measurement for BENCHMARKS.md, not a
pass/fail test: a 135M model on CPU may well not improve in 20 steps, and the figure says so.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rich.console import Console

from coderl.bench.report import machine_info
from coderl.config import Config
from coderl.rundir import create_run_dir
from coderl.train.checkpoints import read_metrics


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    values = [float(r.get(key, 0.0)) for r in rows]
    return sum(values) / len(values) if values else 0.0


def summarise(rows: list[dict[str, Any]], window: int) -> dict[str, Any]:
    """First / last ``window`` steps of a run's metric rows."""
    w = max(1, min(window, len(rows) // 2 or 1))
    first, last = rows[:w], rows[-w:]
    out: dict[str, Any] = {"steps": len(rows), "window": w}
    for key, name in (
        ("pass_rate", "pass_rate"),
        ("shaped_reward_mean", "reward"),
        ("format_errors_mean", "format_errors"),
    ):
        out[f"first_{name}"] = _mean(first, key)
        out[f"last_{name}"] = _mean(last, key)
    out["pass_rate_rose"] = out["last_pass_rate"] > out["first_pass_rate"]
    out["reward_rose"] = out["last_reward"] > out["first_reward"]
    return out


def bench_learn(cfg: Config, window: int = 5, console: Console | None = None) -> dict[str, Any]:
    from coderl.train.loop import Trainer

    console = console or Console(stderr=True)
    run_dir = create_run_dir(cfg, "bench-learn")
    asyncio.run(Trainer(cfg, run_dir, console).run())
    rows = read_metrics(run_dir / "metrics.jsonl")
    return {
        "machine": machine_info(),
        "run_dir": str(run_dir),
        "tasks": cfg.train.tasks,
        "seed": cfg.run.seed,
        "samples_per_step": cfg.train.tasks_per_step * cfg.train.group_size,
        **summarise(rows, window),
        "minutes": sum(r["step_s"] for r in rows) / 60,
    }


def to_markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    return "\n".join(
        [
            "## Learning check (`coderl bench learn`)",
            "",
            f"Command: `{r['command']}` — {m['cpu']}, {m['cores']} cores, torch {m['torch']}. "
            f"Tasks `{r['tasks']}`, seed {r['seed']}, {r['steps']} steps of {r['samples_per_step']} samples "
            f"({r['minutes']:.0f} min), packaged `coderl train` defaults otherwise. Run: `{r['run_dir']}`.",
            "",
            f"| mean over | first {r['window']} steps | last {r['window']} steps | rose |",
            "|---|---|---|---|",
            f"| pass rate (tasks solved) | {r['first_pass_rate']:.3f} | {r['last_pass_rate']:.3f} | "
            f"{'yes' if r['pass_rate_rose'] else 'no'} |",
            f"| reward incl. format shaping | {r['first_reward']:.3f} | {r['last_reward']:.3f} | "
            f"{'yes' if r['reward_rose'] else 'no'} |",
            f"| format errors per trajectory | {r['first_format_errors']:.2f} | {r['last_format_errors']:.2f} | |",
        ]
    )
