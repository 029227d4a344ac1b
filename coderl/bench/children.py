"""The commands a bench runs as processes of their own (``coderl train``, ``sft``, ``eval``,
``export``), started so that they stop with the bench.

A child asks the kernel for SIGTERM when the bench process dies (Linux), so a bench killed outright
does not leave an hour-long run going. A bench *stopped* (Ctrl-C or SIGTERM, which raise
KeyboardInterrupt in its main thread) does not die at once: it tells every child it started to stop
(SIGTERM: each winds down as ``coderl`` does, closing its sandboxes), waits for them, and only then
goes on stopping, so the threads that wait for the children return and nothing is killed mid-write.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

STOP_GRACE_S = 120.0
"""How long a stopping bench waits for a child to wind down before it kills it."""

_live: set[subprocess.Popen[bytes]] = set()
_lock = threading.Lock()


def run_child(command: Sequence[str], env: dict[str, str] | None = None) -> int:
    """Run ``command`` (its stdout on the bench's stderr: the bench's stdout may be --json) to its end;
    its exit status. A KeyboardInterrupt while waiting stops every child first (:func:`stop_children`)."""
    proc = subprocess.Popen(list(command), stdout=2, preexec_fn=_die_with_parent, env=env)
    with _lock:
        _live.add(proc)
    try:
        return proc.wait()
    except BaseException:
        stop_children()
        raise
    finally:
        with _lock:
            _live.discard(proc)


def stop_children(grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every child still running, wait up to ``grace_s`` for each, then SIGKILL what is left."""
    with _lock:
        children = [p for p in _live if p.poll() is None]
    for proc in children:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    for proc in children:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_stopping_children(wait: Callable[[], T]) -> T:
    """``wait()`` (the main thread waiting for threads that run children); a KeyboardInterrupt meanwhile
    stops the children first, so those threads return before the bench goes on stopping."""
    try:
        return wait()
    except BaseException:
        stop_children()
        raise


def _die_with_parent() -> None:
    """In the child, before it runs: on Linux, ask for SIGTERM when the bench process dies; elsewhere
    nothing."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
