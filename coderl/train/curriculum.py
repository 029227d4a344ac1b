"""Which training tasks a step draws: a seeded shuffled cycle, or tasks at the policy's edge.

GRPO learns nothing from a group whose samples all pass or all fail: every advantage is zero. DAPO's
dynamic sampling drops such groups after the fact; ``train.curriculum=edge`` avoids drawing them. It
keeps, per task, samples and passes — starting from ``coderl tasks calibrate``'s estimates for this
model and these rollout settings, then adding every training rollout — and draws first the tasks
whose observed pass rate is strictly between 0 and 1, then tasks never tried, then the others (the
ones nearest a rate of 1/2 first). Ties break by a seeded random order, so a run is reproducible.

In either mode, tasks named in ``redraw`` come first: the tasks an asynchronous run had drawn and not
yet trained on when it saved a checkpoint, so resuming it does not skip them.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from coderl.rollout.runner import RolloutResult
from coderl.tasks.calibration import Estimate
from coderl.types import Task

CurriculumName = Literal["none", "edge"]


class Curriculum:
    def __init__(
        self,
        tasks: list[Task],
        mode: CurriculumName,
        estimates: dict[str, Estimate],
        seed: int,
        edge_draws: int | None = None,
    ) -> None:
        self.tasks = list(tasks)
        self.mode = mode
        self.edge_draws = edge_draws
        """Mode edge: draws of an edge task after which the never-tried tasks come before it (None: no
        limit). Without it a few edge tasks are drawn step after step and the policy learns those."""
        self.draws: dict[str, int] = {}  # task id -> times drawn
        self.counts = {t.id: Estimate(e.samples, e.passed) for t in tasks if (e := estimates.get(t.id))}
        self.rng = random.Random(seed)
        self.cursor = 0  # the data position of the cycle (mode none)
        self.redraw: list[str] = []  # task ids drawn before anything else (module doc)

    def draw(self, n: int) -> list[Task]:
        """The next ``n`` tasks to roll out (a task appears at most once per draw in mode edge, apart
        from ``redraw``)."""
        by_id = {t.id: t for t in self.tasks}
        first = [by_id[tid] for tid in self.redraw[:n] if tid in by_id]  # a task no longer trained on: gone
        self.redraw = self.redraw[n:]
        picked = first + self._draw(n - len(first))
        for task in picked:
            self.draws[task.id] = self.draws.get(task.id, 0) + 1
        return picked

    def _draw(self, n: int) -> list[Task]:
        if n <= 0:
            return []
        if self.mode == "none":
            picked = [self.tasks[(self.cursor + i) % len(self.tasks)] for i in range(n)]
            self.cursor += n
            return picked
        ranked = sorted(self.tasks, key=lambda t: (self._band(t), self.rng.random()))
        picked = ranked[: min(n, len(ranked))]
        while len(picked) < n:  # more groups than tasks: go round again
            picked.append(ranked[len(picked) % len(ranked)])
        return picked

    def _band(self, task: Task) -> tuple[int, int, float]:
        est = self.counts.get(task.id)
        rate = est.rate if est is not None else None
        drawn = self.draws.get(task.id, 0)
        if rate is None:
            return 1, 0, 0.0  # never tried
        if 0.0 < rate < 1.0:  # at the edge: GRPO has a signal here (the least drawn first)
            spent = self.edge_draws is not None and drawn >= self.edge_draws
            return (2 if spent else 0), drawn, abs(rate - 0.5)
        return 3, drawn, abs(rate - 0.5)

    def update(self, results: list[RolloutResult]) -> None:
        """Add the outcomes of training rollouts."""
        for r in results:
            est = self.counts.setdefault(r.trajectory.task_id, Estimate())
            est.samples += 1
            est.passed += int(r.resolved)

    def restart(self, results: list[RolloutResult]) -> None:
        """Forget every estimate (they belong to other weights: before a warm start) and count these
        rollouts of the current policy (a calibration pass)."""
        self.counts = {}
        self.update(results)

    def edge_fraction(self) -> float:
        """Share of the training tasks whose observed pass rate is strictly between 0 and 1."""
        at_edge = sum(1 for t in self.tasks if self._band(t)[0] == 0)
        return at_edge / max(len(self.tasks), 1)

    def state(self, redraw: list[str] | None = None) -> dict[str, Any]:
        """What a checkpoint keeps; ``redraw``: the tasks drawn and not yet trained on (module doc)."""
        return {
            "cursor": self.cursor,
            "redraw": [*(redraw or []), *self.redraw],
            "counts": {tid: [e.samples, e.passed] for tid, e in self.counts.items()},
            "draws": dict(self.draws),
            "rng": self.rng.getstate(),
        }

    def load(self, state: dict[str, Any]) -> None:
        self.cursor = int(state.get("cursor", 0))
        self.redraw = [str(tid) for tid in state.get("redraw", [])]
        self.counts = {tid: Estimate(int(s), int(p)) for tid, (s, p) in state.get("counts", {}).items()}
        self.draws = {str(tid): int(n) for tid, n in state.get("draws", {}).items()}
        if "rng" in state:
            rng = state["rng"]
            self.rng.setstate((rng[0], tuple(rng[1]), rng[2]))
