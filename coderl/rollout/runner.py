"""Roll out groups of samples concurrently, grade each rollout, and store trajectories as they finish.

This is the one place that rolls out, grades and sets rewards: ``coderl eval`` / ``coderl rollout``,
the trainer's steps and its validation all call :func:`run_rollouts`. The caller names the groups
(:class:`RolloutGroup`: the trainer makes a fresh group every time it draws a task, eval one group per
task); every sequence of a rollout - its parts included - gets that group id and the rollout's reward
through :meth:`coderl.types.Trajectory.label`.

Three bounds: ``max_engine_requests`` (requests in flight to the engine, through
:class:`LimitedEngine`), ``max_sandboxes`` (rollouts alive at once, each holding at most one sandbox:
the agent's, then the grader's) and ``grade_concurrency`` (grading runs at once), held by a
:class:`RolloutBounds`: each call makes its own unless given one, so concurrent calls (the trainer's
asynchronous mode rolls out group by group) share the same bounds. A rollout is graded as soon as its
loop returns, so grading overlaps the generation of the others. One failing rollout is recorded with
its error and never cancels the others.

Given a :class:`~coderl.rollout.teardown.Teardowns`, a rollout's sandbox is taken down in the
background once the call's last rollout is done (overlapping the caller's next work), or at once while
another rollout waits for a ``max_sandboxes`` slot: a tear-down takes CPU, and the rollouts still
running need it more. The rollout's slot is held until its tear-down ends, and a call with bounds of
its own first waits for the tear-downs its predecessor left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from coderl.agents.base import get_loop
from coderl.agents.baseline import BaselineCache
from coderl.agents.guide import Guide
from coderl.engine.base import Engine, EngineView
from coderl.engine.params import SamplingParams
from coderl.gathering import gather_all
from coderl.rollout.config import RolloutConfig
from coderl.rollout.context import ContextFactory
from coderl.rollout.store import TrajectoryStore
from coderl.rollout.teardown import Teardowns
from coderl.sandbox import SandboxSpec
from coderl.tasks.config import TasksConfig
from coderl.tasks.grading import RewardMode, grade
from coderl.types import Completion, Task, Trajectory


class LimitedEngine(EngineView):
    """An engine view that lets at most ``limit`` requests through at once."""

    def __init__(self, inner: Engine, limit: int) -> None:
        super().__init__(inner)
        self._gate = asyncio.Semaphore(limit)

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None = None
    ) -> Completion:
        async with self._gate:
            return await self.inner.generate(prompt_ids, params, session_id=session_id)


@dataclass
class RolloutGroup:
    """``size`` samples of ``task`` whose rewards are compared with each other (one GRPO group)."""

    task: Task
    group_id: str
    size: int
    guide: Guide | None = None
    """The task's demonstration, for guided samples (:mod:`coderl.agents.guide`)."""
    guided: int = 0
    """How many of the group's samples (its last ones) are guided by ``guide``."""

    def guide_of(self, sample: int) -> Guide | None:
        """The guide of sample ``sample`` (0-based), or None for an unguided one."""
        return self.guide if sample >= self.size - self.guided else None


def task_groups(tasks: list[Task], size: int, tag: str = "") -> list[RolloutGroup]:
    """One group of ``size`` samples per task, named ``<task id>#<tag><k>`` (k = its place in ``tasks``,
    so a task listed twice makes two groups)."""
    return [RolloutGroup(task, f"{task.id}#{tag}{k}", size) for k, task in enumerate(tasks)]


@dataclass
class RolloutResult:
    """A finished rollout: its trajectory (reward set when graded) and the grader's verdict."""

    trajectory: Trajectory
    resolved: bool
    grade: dict[str, Any] | None
    tier: str = ""

    def report_row(self) -> dict[str, Any]:
        """The row :func:`coderl.rollout.report.build_report` counts."""
        t = self.trajectory
        return {
            "task_id": t.task_id,
            "resolved": self.resolved,
            "reward": t.reward,
            "exit_status": t.exit_status,
        }

    def record(self, **extra: Any) -> dict[str, Any]:
        """What the trajectory store keeps beside the trajectory."""
        return {"resolved": self.resolved, "tier": self.tier, "grade": self.grade or {}, **extra}


@dataclass
class RolloutSettings:
    agent: str = "swe"
    max_engine_requests: int = 16
    max_sandboxes: int = 8
    grade: bool = True
    reward: RewardMode = "resolved"
    grade_concurrency: int = 2

    @classmethod
    def from_config(cls, rollout: RolloutConfig, tasks: TasksConfig, grade: bool = True) -> RolloutSettings:
        """The settings every command uses: the agent and bounds of ``rollout``, grading of ``tasks``."""
        return cls(
            agent=rollout.agent,
            max_engine_requests=rollout.max_engine_requests,
            max_sandboxes=rollout.max_sandboxes,
            grade=grade,
            reward=tasks.reward,
            grade_concurrency=tasks.concurrency,
        )


class RolloutBounds:
    """The three bounds of :func:`run_rollouts` (module doc), shareable by concurrent calls."""

    def __init__(self, engine: Engine, settings: RolloutSettings) -> None:
        self.engine = LimitedEngine(engine, settings.max_engine_requests)
        self.alive = asyncio.Semaphore(settings.max_sandboxes)
        self.grading = asyncio.Semaphore(settings.grade_concurrency)
        self.waiting = 0
        """Rollouts waiting for an ``alive`` slot."""

    async def take_slot(self, teardowns: Teardowns | None) -> None:
        """Acquire an ``alive`` slot; one that has to wait first releases the tear-downs held for
        later (their slots are what it waits for)."""
        if not self.alive.locked():
            await self.alive.acquire()  # free: returns without yielding
            return
        self.waiting += 1
        try:
            if teardowns is not None:
                teardowns.release()
            await self.alive.acquire()
        finally:
            self.waiting -= 1


async def run_rollouts(
    groups: list[RolloutGroup],
    engine: Engine,
    contexts: ContextFactory,
    settings: RolloutSettings,
    store: TrajectoryStore | None = None,
    on_done: Callable[[RolloutResult], None] | None = None,
    bounds: RolloutBounds | None = None,
    teardowns: Teardowns | None = None,
) -> list[RolloutResult]:
    """Roll out every group's samples, grade each rollout as it finishes (``settings.grade``), label
    every sequence with its group and reward, store each; results in group order, then sample order.
    ``bounds`` (made for ``engine`` and ``settings``) is shared with other calls; by default the call
    has its own. ``teardowns``: sandboxes are taken down in the background (module doc)."""
    if teardowns is not None and bounds is None:  # shared bounds count the sandboxes still going down
        await teardowns.drain()
    bounds = bounds or RolloutBounds(engine, settings)
    limited, alive, grading = bounds.engine, bounds.alive, bounds.grading
    baselines = BaselineCache()
    get_loop(settings.agent)  # an unknown loop fails here, once, not in every rollout

    async def one(group: RolloutGroup, sample: int) -> RolloutResult:
        task = group.task
        closes: list[Awaitable[None]] = []
        await bounds.take_slot(teardowns)
        try:
            t0 = time.perf_counter()
            try:
                loop = get_loop(settings.agent)  # a fresh instance per rollout: loops may keep state
                defer = closes.append if teardowns is not None else None
                guide = group.guide_of(sample)
                ctx = contexts(limited, group.group_id, baselines, defer, guide)
                traj = await loop.run(task, ctx)
            except Exception as exc:  # a loop bug must not cancel the siblings
                traj = Trajectory(
                    task_id=task.id, group_id=group.group_id, prompt_ids=[], exit_status="error",
                    error=f"{type(exc).__name__}: {exc}",
                )  # fmt: skip
            traj.label(group_id=group.group_id)
            traj.metrics["rollout_s"] = time.perf_counter() - t0
            traj.metrics["sample"] = float(sample)
            traj.metrics["guided"] = float(group.guide_of(sample) is not None)
            result = RolloutResult(traj, False, None, task.tier)
            if settings.grade:
                async with grading:
                    await _grade(result, task, contexts.sandbox, settings.reward)
        finally:
            if closes and teardowns is not None:  # held while no rollout waits for a slot (module doc)
                teardowns.defer(closes, then=alive.release, hold=bounds.waiting == 0)
            else:
                alive.release()
        if store is not None:
            store.add(traj, result.record())
        if on_done is not None:
            on_done(result)
        return result

    try:  # every rollout has handed over its sandbox before the tear-downs are released
        return await gather_all(one(group, i) for group in groups for i in range(group.size))
    finally:
        if teardowns is not None:
            teardowns.release()
        await baselines.aclose()


async def _grade(result: RolloutResult, task: Task, sandbox: SandboxSpec, reward: RewardMode) -> None:
    """Grade the rollout's patch; a grading failure is data (reward 0, the error on the trajectory)."""
    traj = result.trajectory
    t0 = time.perf_counter()
    try:
        verdict = await grade(task, traj.patch, sandbox, reward)
    except Exception as exc:
        traj.error = (traj.error or "") + f" grading failed: {type(exc).__name__}: {exc}"
        traj.label(reward=0.0)
        return
    finally:
        traj.metrics["grade_s"] = time.perf_counter() - t0
    result.resolved = verdict.resolved
    result.grade = {k: v for k, v in verdict.to_dict().items() if k != "test_output"}
    traj.label(reward=verdict.reward)
