"""Run a host process with rlimits, a wall-clock limit and capped output.

Limits are applied by exec'ing through util-linux ``prlimit`` (no ``preexec_fn``: the process is
multi-threaded — the engine runs in a thread — and Python code between fork and exec can deadlock
there). On timeout the whole process group is killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO

from coderl.sandbox.base import ExecResult

_CHUNK = 1 << 16


@dataclass
class Limits:
    cpu_seconds: int
    memory_mb: int
    max_processes: int
    max_file_mb: int
    max_open_files: int

    def rlimits(self) -> dict[str, int]:
        """Each limit by its ``prlimit`` option name (``cpu``, ``as``, ...), in seconds, bytes or counts."""
        mb = 1 << 20
        return {
            "cpu": self.cpu_seconds,
            "as": self.memory_mb * mb,
            "nproc": self.max_processes,
            "fsize": self.max_file_mb * mb,
            "nofile": self.max_open_files,
            "core": 0,
        }

    def prlimit_args(self) -> list[str]:
        """``prlimit --cpu=... --``: argv to put in front of a command (soft and hard limits both)."""
        return ["prlimit", *(f"--{name}={value}" for name, value in self.rlimits().items()), "--"]


class _Capped:
    """Keeps the first ``cap`` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


# Sandboxed processes are spawned and tended from worker threads, never from the event loop: with
# hundreds of rollouts on two cores, each spawn can block for milliseconds waiting for the CPU, and
# in the loop thread that stalls every other rollout.
EXEC_POOL = ThreadPoolExecutor(max_workers=1024, thread_name_prefix="coderl-exec")


async def run_limited(
    argv: Sequence[str],
    *,
    timeout: float,
    max_output_bytes: int,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    stdin: bytes | None = None,
) -> ExecResult:
    """Run ``argv`` in a new session; kill its process group at ``timeout``; keep capped output.
    Cancelling the awaiting task kills the process group too."""
    pids: list[int] = []
    future = asyncio.get_running_loop().run_in_executor(
        EXEC_POOL, _run_sync, list(argv), timeout, max_output_bytes, env, cwd, stdin, pids
    )
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        for pid in pids:
            _kill_group(pid)
        with contextlib.suppress(Exception):
            await future
        raise


def _run_sync(
    argv: list[str],
    timeout: float,
    cap: int,
    env: dict[str, str] | None,
    cwd: str | None,
    stdin: bytes | None,
    pids: list[int],
) -> ExecResult:
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    pids.append(proc.pid)
    if stdin is not None and proc.stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
    sinks = {proc.stdout.fileno(): _Capped(cap), proc.stderr.fileno(): _Capped(cap)}  # type: ignore[union-attr]
    out, err = sinks.values()
    timed_out = False
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        for fd in sinks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            now = time.perf_counter()
            if not timed_out and now - start > timeout:
                timed_out = True
                _kill_group(proc.pid)
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 1.0:
                _kill_group(proc.pid)  # descendants that escaped still hold the pipes: stop reading
                break
            for key, _ in sel.select(0.2 if exited_at is None else 0.05):
                data = os.read(key.fd, _CHUNK)
                if data:
                    sinks[key.fd].feed(data)
                else:
                    sel.unregister(key.fd)
    try:
        code = proc.wait(max(0.1, timeout - (time.perf_counter() - start)))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        code = proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return ExecResult(
        exit_code=code,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        truncated=bool(out.dropped or err.dropped),
        duration_s=time.perf_counter() - start,
    )


def _feed(pipe: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):
        pipe.write(data)
    with contextlib.suppress(BrokenPipeError, OSError):
        pipe.close()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
