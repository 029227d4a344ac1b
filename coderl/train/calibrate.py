"""The calibration pass between the warm start and RL: per-task pass rates under the policy RL starts from.

Owns which training tasks are sampled (``train.calibrate_tasks`` of them, ``train.calibrate_from``
picks the pool), ``train.calibrate_samples`` rollouts of each, stored under ``calibration/`` and never
trained on, the curriculum restarted from what they show (earlier estimates, of other weights, are
dropped), and the phase's metrics row. Must not save checkpoints or roll out by itself: the trainer
gives the rollout function and saves the row.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from coderl.config import Config
from coderl.rollout.runner import RolloutGroup, RolloutResult, task_groups
from coderl.rollout.store import TrajectoryStore
from coderl.train.curriculum import Curriculum
from coderl.types import Task

Roll = Callable[[list[RolloutGroup]], Awaitable[list[RolloutResult]]]


async def calibrate(
    cfg: Config,
    tasks: list[Task],
    demonstrated: set[str],
    curriculum: Curriculum,
    roll: Roll,
    run_dir: Path,
    console: Console,
) -> dict[str, Any]:
    """Run the pass of the module doc over ``tasks`` (the training tasks) with ``roll``; returns the
    ``phase: calibrate`` row (the caller adds its policy version)."""
    t = cfg.train
    began = time.perf_counter()
    pool, which = calibration_pool(tasks, demonstrated, t.calibrate_from)
    picked = random.Random(cfg.run.seed).sample(pool, min(t.calibrate_tasks, len(pool)))
    results = await roll(task_groups(picked, t.calibrate_samples, tag="cal."))
    store = TrajectoryStore(run_dir / "calibration")
    for r in results:
        store.add(r.trajectory, r.record(step=0))
    store.close()
    curriculum.restart(results)
    rates = [e.rate for tid in {x.id for x in picked} if (e := curriculum.counts.get(tid)) and e.rate is not None]
    row: dict[str, Any] = {
        "step": 0, "phase": "calibrate",
        "calibrate_tasks": len(picked), "calibrate_samples": t.calibrate_samples,
        "calibrate_edge": sum(1 for p in rates if 0 < p < 1), "calibrate_always": sum(1 for p in rates if p == 1),
        "calibrate_never": sum(1 for p in rates if p == 0),
        "calibrate_pass_rate": sum(r.resolved for r in results) / max(len(results), 1),
        "calibrate_s": round(time.perf_counter() - began, 2),
    }  # fmt: skip
    console.print(
        f"calibration: {len(picked)} {which} tasks x {t.calibrate_samples} samples at T={cfg.rollout.temperature:g}: "
        f"{row['calibrate_edge']} sometimes solved (the curriculum draws these first), {row['calibrate_always']} "
        f"always, {row['calibrate_never']} never; pass rate {row['calibrate_pass_rate']:.0%} "
        f"({row['calibrate_s'] / 60:.1f} min)"
    )
    return row


def calibration_pool(tasks: list[Task], demonstrated: set[str], which: str) -> tuple[list[Task], str]:
    """The training tasks ``train.calibrate_from=which`` samples, and what they are called in the console:
    the ``demonstrated`` ones or the ``undemonstrated`` ones, every task when the warm start's
    demonstrations are unknown or the split leaves none, and every task for ``all``."""
    if which != "all" and demonstrated:
        pool = [x for x in tasks if (x.id in demonstrated) == (which == "demonstrated")]
        if pool:
            return pool, which
    return tasks, "training"
