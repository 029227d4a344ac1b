"""A rollout worker: runs agent loops and their sandboxes on its own node, generating through an engine
served over HTTP, and grades each rollout there.

A plain class: :mod:`coderl.cluster.ray_rollouts` makes it a Ray actor (its async methods then run
concurrently on the actor's event loop). Each call is one rollout, so a worker lost mid-step loses only
the rollouts it was running; those it finished were already returned.
"""

from __future__ import annotations

import time
from typing import Any

from coderl.chat import ChatFormat
from coderl.config import Config
from coderl.engine.config import EngineConfig
from coderl.engine.http_client import HTTPEngine
from coderl.rollout.context import ContextFactory
from coderl.rollout.runner import RolloutBounds, RolloutGroup, RolloutResult, RolloutSettings, run_rollouts
from coderl.tasks.dataset import row_task
from coderl.types import Task


class RolloutWorker:
    """Rolls out one sample of a task per :meth:`rollout` call (graded unless ``grade`` is false), at most ``rollout.max_sandboxes`` at once
    (``rollout.max_engine_requests`` requests in flight to the engine)."""

    def __init__(self, cfg: Config, engine_url: str, api_key: str | None, grade: bool = True) -> None:
        self.cfg = cfg
        self.engine = HTTPEngine(
            engine_url,
            EngineConfig(type="http", urls=[engine_url], request_timeout_s=cfg.engine.request_timeout_s),
            api_key=api_key,
        )
        self.contexts = ContextFactory(cfg.rollout, cfg.sandbox, ChatFormat.for_model(cfg.model))
        self.settings = RolloutSettings.from_config(cfg.rollout, cfg.tasks, grade=grade)
        self.bounds: RolloutBounds | None = None  # made on the actor's event loop (its semaphores)
        self._tasks: dict[str, Task] = {}
        self.running = 0
        self.finished = 0
        self.started_at = time.time()

    async def ready(self) -> dict[str, Any]:
        """Connects to the engine; answers once the worker can roll out (also a liveness probe)."""
        if self.bounds is None:
            await self.engine.start()
            self.bounds = RolloutBounds(self.engine, self.settings)
        return self.stats()

    def stats(self) -> dict[str, Any]:
        """Where the worker runs (host, pid, Ray node id when in Ray) and its rollouts so far."""
        import os
        import socket
        import sys

        ray = sys.modules.get("ray")
        node = ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else ""
        return {
            "host": socket.gethostname(),
            "node": node,
            "pid": os.getpid(),
            "running": self.running,
            "finished": self.finished,
            "started_at": self.started_at,
        }

    async def rollout(
        self, task_row: dict[str, Any], group_id: str, sample: int, temperature: float | None
    ) -> RolloutResult:
        """One sample of the task ``task_row`` (:func:`coderl.tasks.dataset.task_row`) in group
        ``group_id``, graded, at ``temperature`` (None: ``rollout.temperature``)."""
        await self.ready()
        assert self.bounds is not None
        task = self._tasks.get(task_row["id"])
        if task is None:
            task = self._tasks[task_row["id"]] = row_task(task_row)
        contexts = self.contexts if temperature is None else self.contexts.with_temperature(temperature)
        self.running += 1
        try:
            (result,) = await run_rollouts(
                [RolloutGroup(task, group_id, 1)], self.engine, contexts, self.settings, bounds=self.bounds
            )
        finally:
            self.running -= 1
        self.finished += 1
        result.trajectory.metrics["sample"] = float(sample)
        return result
