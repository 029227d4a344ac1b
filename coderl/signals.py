"""SIGTERM stops a command as Ctrl-C does. ``timeout``, ``kill``, systemd, Slurm and Kubernetes end a
process with SIGTERM, whose default is to die on the spot: sandboxes stay mounted, containers stay up,
the work in flight is not wound down. Here SIGTERM cancels the command's main task, as ``asyncio.run``
does on Ctrl-C (its work unwinds: every ``finally`` runs, every sandbox is closed), also when SIGINT
is ignored (a job started in the background); outside :func:`run` it raises KeyboardInterrupt as
Ctrl-C does. Inside :func:`run` Ctrl-C and SIGTERM are one stop request: the first of either cancels
the main task and lets it unwind, a second of either raises KeyboardInterrupt at once (as a second
Ctrl-C does in ``asyncio.run``; before, Ctrl-C then SIGTERM was a second cancel cutting the unwinding
short). The command exits 143 (128 + SIGTERM) when SIGTERM came first, 130 when Ctrl-C did."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

_state: dict[str, Any] = {"terminated": False, "stopping": False, "main": None}


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Inside: SIGTERM stops the command (module doc); the previous SIGTERM handler is put back after.
    Outside the main thread (where no handler can be set) it changes nothing."""
    _state["terminated"] = False
    _state["stopping"] = False
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def terminated() -> bool:
    """Whether the command's stop came from SIGTERM (the first stop signal since :func:`stop_on_sigterm`
    was entered)."""
    return bool(_state["terminated"])


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` for a command: the first Ctrl-C or SIGTERM cancels ``main`` and waits for it
    to unwind, then raises KeyboardInterrupt (as Ctrl-C does in ``asyncio.run``); a second raises it at once."""
    here = threading.current_thread() is threading.main_thread()
    # Ctrl-C handled here too (asyncio.run then sets no handler of its own), unless SIGINT is ignored
    own_sigint = here and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    before = signal.signal(signal.SIGINT, _on_signal) if own_sigint else None
    try:
        return asyncio.run(_as_main(main))
    except asyncio.CancelledError:
        if _state["stopping"]:
            raise KeyboardInterrupt from None
        raise
    finally:
        if own_sigint:
            signal.signal(signal.SIGINT, before)


async def _as_main(main: Coroutine[Any, Any, T]) -> T:
    here = threading.current_thread() is threading.main_thread()
    if here:
        _state["main"] = asyncio.current_task()
    try:
        return await main
    finally:
        if here:
            _state["main"] = None


def _on_signal(signum: int, frame: FrameType | None) -> None:
    first = not _state["stopping"]
    _state["stopping"] = True
    if first:
        _state["terminated"] = signum == signal.SIGTERM
    task = _state["main"]
    if first and task is not None and not task.done():
        task.cancel()
        task.get_loop().call_soon_threadsafe(lambda: None)  # wake the loop from its wait
        return
    raise KeyboardInterrupt  # outside an event loop, or a second stop signal: stop now, as Ctrl-C does
