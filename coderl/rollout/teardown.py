"""Sandbox tear-down off a rollout's critical path.

A rollout's result is ready once its patch is collected; taking its sandbox down (killing the agent,
unmounting and removing the workspace) can go on while the caller trains on the result. A
:class:`Teardowns` owned by the caller collects those closes: :func:`coderl.rollout.runner.run_rollouts`
hands each finished rollout's close to it and returns without waiting, the next ``run_rollouts`` with
the same ``Teardowns`` first waits for the previous ones (so the sandboxes alive at once stay within
the bound), and the owner waits for the rest with :meth:`Teardowns.drain` before it exits. A close that
fails is logged, never raised: the result it followed is already delivered.

A close can be *held* (``defer(..., hold=True)``): it starts only at :meth:`Teardowns.release` (or
:meth:`~Teardowns.drain`). ``run_rollouts`` holds a finished rollout's close while no rollout waits for
a sandbox slot and releases them when it returns, so tear-downs do not take CPU from the rollouts still
running (with hundreds of sandboxes, their closes competed with the last rollouts' commands).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Teardowns:
    """Closes running in the background, waited for by :meth:`drain`."""

    def __init__(self) -> None:
        self._pending: set[asyncio.Task[None]] = set()
        self._held: list[tuple[list[Awaitable[None]], Callable[[], None]]] = []

    @property
    def pending(self) -> int:
        """Closes not finished yet, held ones included."""
        return len(self._pending) + len(self._held)

    @property
    def held(self) -> int:
        """Closes waiting for :meth:`release`."""
        return len(self._held)

    def defer(self, closes: list[Awaitable[None]], then: Callable[[], None], *, hold: bool = False) -> None:
        """Run ``closes`` (one rollout's) in the background, then call ``then`` (it frees the
        rollout's slot), whatever they raised; with ``hold``, only from the next :meth:`release` on."""
        if hold:
            self._held.append((closes, then))
        else:
            self._start(closes, then)

    def release(self) -> None:
        """Start every held close."""
        held, self._held = self._held, []
        for closes, then in held:
            self._start(closes, then)

    def _start(self, closes: list[Awaitable[None]], then: Callable[[], None]) -> None:
        task = asyncio.ensure_future(self._run(closes, then))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _run(self, closes: list[Awaitable[None]], then: Callable[[], None]) -> None:
        try:
            for close in closes:
                try:
                    await close
                except Exception as exc:  # the rollout's result is delivered; the close is logged
                    log.warning("a sandbox tear-down failed: %s: %s", type(exc).__name__, exc)
        finally:
            then()

    async def drain(self) -> None:
        """Wait until every close handed over so far has finished, held ones released first (closes
        are never cancelled: a sandbox half taken down would be left behind)."""
        self.release()
        while self._pending:
            await asyncio.wait(set(self._pending))
