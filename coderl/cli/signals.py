"""SIGTERM stops a command as Ctrl-C does. ``timeout``, ``kill``, systemd, Slurm and Kubernetes end a
process with SIGTERM, whose default is to die on the spot: sandboxes stay mounted, containers stay up,
the work in flight is not wound down. Here SIGTERM goes through whatever SIGINT does at that moment (in
``asyncio.run``: cancel the main task, then raise KeyboardInterrupt; elsewhere raise it), so every
``finally`` runs, and the command exits 143 (128 + SIGTERM) instead of 130."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_state = {"terminated": False}


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Inside: SIGTERM goes through the current SIGINT handler; the previous SIGTERM handler is put
    back after. Outside the main thread (where no handler can be set) it changes nothing."""
    _state["terminated"] = False
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def terminated() -> bool:
    """Whether SIGTERM arrived since :func:`stop_on_sigterm` was entered."""
    return _state["terminated"]


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _state["terminated"] = True
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):  # asyncio.run's, or Python's default_int_handler
        handler(signum, frame)
        return
    raise KeyboardInterrupt  # SIGINT ignored (a background job) or default: stop all the same
