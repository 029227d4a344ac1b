"""First come, first served for bursts of commands on this host.

Rollouts run in step: an engine batch returns, and hundreds of sandboxes start a command at the same
moment. Left to the kernel, those commands share the cores evenly and all end together at the end of
the burst, so every rollout waits for the whole burst, and the next burst (their next commands)
arrives all at once again: each burst adds its full length to every rollout. Taking turns instead,
the first commands of a burst end first, the rollouts they belong to move on, and their next
commands arrive spread out, as the cores can take them.

:class:`BurstGate` hands out ``slots`` turns (this host's cores + 2: a command's round trip has
moments off the CPU). A command keeps its turn until it ends or ``hold_s`` passes, whichever comes
first, so a long or sleeping command gives its turn up early and runs on beside the others as before:
the gate never makes a command wait for another one's end, only for its first ``hold_s``. Below
``slots`` commands in flight nothing waits at all.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


def host_slots() -> int:
    """Turns for this host: the cores this process may use, plus 2."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores + 2


class BurstGate:
    """Turns for commands, taken first come, first served (module doc). One per event loop."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"a burst gate needs at least 1 slot, got {slots}")
        self.slots = slots
        self._free = asyncio.Semaphore(slots)

    async def run(self, work: Awaitable[T], hold_s: float) -> T:
        """Await ``work`` once a turn is free; the turn is given back when ``work`` ends or after
        ``hold_s`` seconds, whichever is first (``hold_s`` <= 0: no turn is taken). Cancelling the
        caller cancels ``work``."""
        if hold_s <= 0:
            return await work
        try:
            await self._free.acquire()
        except BaseException:
            if asyncio.iscoroutine(work):
                work.close()  # never started: no "was never awaited" warning
            raise
        loop = asyncio.get_running_loop()
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if not given_back:
                given_back = True
                self._free.release()

        task = asyncio.ensure_future(work)
        timer = loop.call_later(hold_s, give_back)

        def ended(_: asyncio.Future[T]) -> None:
            timer.cancel()
            give_back()

        task.add_done_callback(ended)
        return await task  # a cancelled caller cancels the task it awaits


_GATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, BurstGate] = weakref.WeakKeyDictionary()


def host_gate() -> BurstGate:
    """The gate of the running event loop (made on first use, :func:`host_slots` turns; an asyncio
    semaphore serves one loop)."""
    loop = asyncio.get_running_loop()
    gate = _GATES.get(loop)
    if gate is None:
        gate = _GATES[loop] = BurstGate(host_slots())
    return gate
