"""Rollouts that run ahead of the update (``train.mode=async``).

:class:`RolloutProducer` keeps ``ahead`` groups rolling out at all times: when a step takes finished
groups, as many fresh ones are drawn and started, so the engine samples the next step's groups while
the actor trains on this one's. With ``ahead = train.tasks_per_step x train.max_staleness`` a group
started just before an update is taken about ``max_staleness`` updates later, so its oldest tokens are
that many versions behind; groups that finish out of order can be older, and the trainer drops those
(:func:`stale_groups`). Finished groups wait in completion order. :meth:`RolloutProducer.pending`
names the tasks of the groups drawn and not yet taken, which a checkpoint keeps so a resumed run draws
them again (their rollouts die with the run). A failing rollout is data (recorded by
:func:`coderl.rollout.runner.run_rollouts`); an exception out of ``roll`` itself is a bug, raised by
the next :meth:`RolloutProducer.take`.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

from coderl.rollout.runner import RolloutGroup, RolloutResult

Group = list[RolloutResult]
"""One group's finished rollouts (every sample of one draw of a task)."""


class RolloutProducer:
    """Keeps ``ahead`` groups in flight: ``draw(n)`` names the next ``n`` groups, ``roll(group)`` rolls
    one out and grades it."""

    def __init__(
        self,
        draw: Callable[[int], list[RolloutGroup]],
        roll: Callable[[RolloutGroup], Coroutine[Any, Any, Group]],
        ahead: int,
    ) -> None:
        if ahead < 1:
            raise ValueError(f"ahead: got {ahead}, at least one group must be in flight")
        self._draw = draw
        self._roll = roll
        self.ahead = ahead
        self._running: set[asyncio.Task[Group]] = set()
        self._finished: asyncio.Queue[Group | BaseException] = asyncio.Queue()
        self._untaken: dict[str, str] = {}  # group id -> task id, for every group drawn and not taken
        self.waited_s = 0.0
        """Seconds :meth:`take` spent waiting for groups to finish (the trainer idle)."""

    @property
    def in_flight(self) -> int:
        return len(self._running)

    def start(self) -> None:
        self._launch(self.ahead - len(self._running) - self._finished.qsize())

    def _launch(self, n: int) -> None:
        if n <= 0:
            return
        for group in self._draw(n):
            self._untaken[group.group_id] = group.task.id
            task = asyncio.create_task(self._roll(group), name=f"rollout {group.group_id}")
            self._running.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Group]) -> None:
        self._running.discard(task)
        if not task.cancelled():
            error = task.exception()
            self._finished.put_nowait(task.result() if error is None else error)

    async def take(self, n: int) -> list[Group]:
        """The next ``n`` groups to finish (waiting for them as needed); as many are started in their
        place, so ``ahead`` stay in flight or finished-and-waiting."""
        out: list[Group] = []
        began = time.perf_counter()
        while len(out) < n:
            if not self._running and self._finished.empty():
                self.start()  # fewer than n in flight (n > ahead): start more
            got = await self._finished.get()
            if isinstance(got, BaseException):
                raise got
            for r in got:
                self._untaken.pop(r.trajectory.group_id, None)
            out.append(got)
        self.waited_s += time.perf_counter() - began
        self._launch(self.ahead - len(self._running) - self._finished.qsize())
        return out

    def pending(self) -> list[str]:
        """The task of every group drawn and not yet taken (rolling out, or finished and waiting), in
        the order they were drawn."""
        return list(self._untaken.values())

    async def stop(self) -> None:
        """Cancel what is still rolling out (its sandboxes are torn down by the loops' own clean-up)."""
        for task in list(self._running):
            task.cancel()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        self._running.clear()


def lag(result: RolloutResult, version: int) -> int:
    """Policy versions between the oldest token of a rollout (every sequence of it) and ``version``."""
    return version - min(seq.policy_version for seq in result.trajectory.sequences())


def stale_groups(groups: list[Group], version: int, max_staleness: int) -> tuple[list[Group], list[Group]]:
    """(fresh, stale): a group is stale when any of its rollouts is more than ``max_staleness`` versions
    behind ``version`` (a group is trained whole or not at all: its samples are each other's baseline)."""
    fresh: list[Group] = []
    stale: list[Group] = []
    for group in groups:
        (stale if any(lag(r, version) > max_staleness for r in group) else fresh).append(group)
    return fresh, stale


def lag_counts(results: list[RolloutResult], version: int) -> dict[str, int]:
    """How many rollouts are 0, 1, 2, ... versions behind ``version`` (JSON keys)."""
    counts = Counter(lag(r, version) for r in results)
    return {str(k): counts[k] for k in sorted(counts)}
