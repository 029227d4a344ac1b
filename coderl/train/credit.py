"""Partial credit for near misses (``train.patch_credit``): a bootstrap for RL where whole groups fail.

A group in which every sample failed has every group-relative advantage 0: it teaches nothing, and a
weak policy makes many such groups. The credit gives an unsolved training sample a reward of
``coef x`` :func:`coderl.tasks.patching.change_overlap` (its patch against the task's gold patch), so
the group's samples differ: one that changed the line the bug is on beats one that changed nothing,
and the fix made faithfully beats the fix with the rest of the function rewritten wrongly. ``coef``
falls linearly from ``train.patch_credit`` to 0 over ``train.patch_credit_steps`` RL steps, so the last
steps train on the hidden tests' verdict alone.

Owns: the coefficient's schedule and each sample's credit, kept in its trajectory's
``metrics["patch_credit"]`` (already scaled; the batch adds it to the reward, dynamic sampling counts
it). Must not: touch ``Trajectory.reward`` or ``resolved`` — pass rates, the curriculum and validation
stay the hidden tests' — nor credit a task it has no gold patch for (held-out tasks are not given).
"""

from __future__ import annotations

from collections.abc import Mapping

from coderl.rollout.runner import RolloutResult
from coderl.tasks.patching import change_overlap, rewrites_only_gold_lines

KEY = "patch_credit"
"""The trajectory metric that holds a sample's (scaled) credit."""


class PatchCredit:
    """``start`` (train.patch_credit) falling to 0 over ``steps`` RL steps; ``golds``: the training
    tasks' gold patches by task id; ``precise`` (train.patch_credit_precise): no credit for a patch that
    rewrites a line the gold patch leaves (:func:`coderl.tasks.patching.rewrites_only_gold_lines`)."""

    def __init__(self, start: float, steps: int, golds: Mapping[str, str], precise: bool = False) -> None:
        if not 0.0 <= start < 1.0:
            raise ValueError(f"patch credit {start!r}: give a number in [0, 1)")
        self.start = start
        self.steps = max(steps, 1)
        self.golds = golds
        self.precise = precise

    def coef(self, step: int) -> float:
        """The credit's weight at RL step ``step`` (1-based): linear from ``start`` to 0 after ``steps``."""
        return self.start * max(0.0, 1.0 - (step - 1) / self.steps)

    def apply(self, results: list[RolloutResult], step: int) -> None:
        """Write each result's credit at ``step`` into its trajectory's metrics (0 for a solved sample,
        a task without a gold patch, or a coefficient that has fallen to 0)."""
        coef = self.coef(step)
        for r in results:
            t = r.trajectory
            gold = self.golds.get(t.task_id, "")
            if r.resolved or not gold or coef <= 0 or (self.precise and not rewrites_only_gold_lines(t.patch, gold)):
                credit = 0.0
            else:
                credit = coef * change_overlap(t.patch, gold)
            t.metrics[KEY] = credit


def credit_of(metrics: Mapping[str, float]) -> float:
    """A trajectory's scaled credit (0 where none was given)."""
    return float(metrics.get(KEY, 0.0))
