"""Run tasks x G samples concurrently, grade them, and store trajectories as they finish.

Two separate bounds: ``max_engine_requests`` (requests in flight to the engine, through
:class:`LimitedEngine`) and ``max_sandboxes`` (rollouts alive at once, each holding at most one
sandbox). One failing rollout is recorded with its error and never cancels the others.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coderl.agents.base import AgentContext, get_loop
from coderl.engine.base import Engine, EngineView
from coderl.engine.params import SamplingParams
from coderl.rollout.store import TrajectoryStore
from coderl.sandbox import SandboxSpec
from coderl.tasks.grading import RewardMode, grade
from coderl.types import Completion, Task, Trajectory

if TYPE_CHECKING:
    pass


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
class RolloutResult:
    trajectory: Trajectory
    resolved: bool
    grade: dict[str, Any] | None


@dataclass
class RolloutSettings:
    agent: str = "swe"
    group_size: int = 1
    max_engine_requests: int = 16
    max_sandboxes: int = 8
    grade: bool = True
    reward: RewardMode = "resolved"


async def run_rollouts(
    tasks: list[Task],
    engine: Engine,
    make_ctx: Callable[[Engine, str], AgentContext],
    settings: RolloutSettings,
    sandbox: SandboxSpec,
    store: TrajectoryStore | None = None,
    on_done: Callable[[RolloutResult], None] | None = None,
) -> list[RolloutResult]:
    """Roll out every task ``group_size`` times; grade each trajectory; store each as it finishes."""
    limited = LimitedEngine(engine, settings.max_engine_requests)
    alive = asyncio.Semaphore(settings.max_sandboxes)

    async def one(task: Task, sample: int) -> RolloutResult:
        group_id = f"{task.id}#g"
        async with alive:
            loop = get_loop(settings.agent)
            ctx = make_ctx(limited, group_id)
            t0 = time.perf_counter()
            try:
                traj = await loop.run(task, ctx)
            except Exception as exc:  # a loop bug must not cancel the siblings
                traj = Trajectory(
                    task_id=task.id,
                    group_id=group_id,
                    prompt_ids=[],
                    exit_status="error",
                    error=f"{type(exc).__name__}: {exc}",
                )
            traj.metrics["rollout_s"] = time.perf_counter() - t0
            traj.metrics["sample"] = float(sample)
            verdict: dict[str, Any] | None = None
            resolved = False
            if settings.grade:
                try:
                    g = await grade(task, traj.patch, sandbox, settings.reward)
                    resolved, verdict = g.resolved, g.to_dict()
                    for seq in traj.sequences():  # every sequence of the rollout shares its reward
                        seq.reward = g.reward
                    verdict.pop("test_output", None)
                except Exception as exc:
                    traj.error = (traj.error or "") + f" grading failed: {type(exc).__name__}: {exc}"
        result = RolloutResult(traj, resolved, verdict)
        if store is not None:
            store.add(traj, {"resolved": resolved, "tier": task.tier, "grade": verdict or {}})
        if on_done is not None:
            on_done(result)
        return result

    jobs = [one(task, i) for task in tasks for i in range(settings.group_size)]
    return list(await asyncio.gather(*jobs))
