"""Host side of the in-sandbox exec agent (see agent_src.py): start it, talk to it, kill it.

Everything here runs on the event loop: the agent's pipes are asyncio transports, so a command in
flight holds no thread (hundreds of sandboxes at once would otherwise hold hundreds of threads, and
the loop would wait on each one's start).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import marshal
import os
import signal
import subprocess
import time
from typing import Any

from coderl.errors import SandboxError
from coderl.sandbox.base import ExecResult

_REAPING: set[asyncio.Task[None]] = set()  # agents killed by a cancelled command, until they are reaped


class AgentDied(Exception):
    """The agent (and with it the sandbox's PID namespace) is gone."""


class AgentProcess:
    """One long-lived ``bwrap ... python -c AGENT`` process; calls are made one at a time. Make one
    with :meth:`start`."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        reader: asyncio.StreamReader,
        transports: list[asyncio.BaseTransport],
    ) -> None:
        self.proc = proc
        self._reader = reader
        self._transports = transports
        self.retiring = False
        """The agent said it exits after its last reply (its own CPU neared the limit it holds)."""

    @classmethod
    async def start(cls, argv: list[str], timeout_s: float = 60.0) -> AgentProcess:
        """Launch the agent and wait for its ready frame; SandboxError if it does not come."""
        # Popen, not asyncio.create_subprocess_exec: that one (Python < 3.12) waits for each child in a
        # thread of its own. Popen returns once the child has exec'd (vfork), and the pipes are then
        # handed to the loop.
        proc = subprocess.Popen(  # noqa: ASYNC220
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},  # bwrap itself sees no host secrets
            cwd="/",
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transports: list[asyncio.BaseTransport] = []  # filled as they connect; kill() closes what is there
        agent = cls(proc, reader, transports)
        try:
            out, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), proc.stdout)
            transports.append(out)
            into, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, proc.stdin)
            transports.append(into)
            await agent._read_frame(timeout_s)
            return agent
        except AgentDied:
            agent.kill()
            await _reaped(proc, close_stderr=False)
            assert proc.stderr is not None
            with proc.stderr:  # every writer is gone: read to its end without waiting
                err = proc.stderr.read().decode(errors="replace")
            raise SandboxError(f"the sandbox did not start: {err.strip()[-800:] or 'no output'}") from None
        except BaseException:  # cancelled (the sandbox closed while its agent started), or worse
            agent.kill_in_background()
            raise

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    async def call(self, request: dict[str, Any], deadline_s: float) -> ExecResult:
        body = marshal.dumps(request, 4)  # read by the agent's marshal (a built-in: see agent_src.py)
        into = self._transports[1]
        if into.is_closing():
            raise AgentDied()
        assert isinstance(into, asyncio.WriteTransport)
        into.write(len(body).to_bytes(8, "big") + body)  # buffered by the loop; the reply implies it went
        reply = await self._read_frame(deadline_s)
        self.retiring = bool(reply.get("retire"))
        return ExecResult(
            exit_code=int(reply["exit_code"]),
            stdout=base64.b64decode(reply["stdout"]).decode("utf-8", errors="replace"),
            stderr=base64.b64decode(reply["stderr"]).decode("utf-8", errors="replace"),
            timed_out=bool(reply["timed_out"]),
            truncated=bool(reply["truncated"]),
            duration_s=float(reply["duration_s"]),
        )

    async def _read_frame(self, timeout_s: float) -> dict[str, Any]:
        try:
            header = await asyncio.wait_for(self._reader.readexactly(8), timeout_s)
            start = time.monotonic()
            n = int.from_bytes(header, "big")
            body = await asyncio.wait_for(
                self._reader.readexactly(n), max(1.0, timeout_s - (time.monotonic() - start))
            )
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            raise AgentDied() from None
        data: dict[str, Any] = json.loads(body)
        return data

    def kill(self) -> None:
        """SIGKILL the agent's process group (bwrap; the PID namespace goes with it) and close the pipes.
        The process is reaped by :meth:`wait`."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for transport in self._transports:
            transport.close()

    async def wait(self) -> None:
        """Until the killed process is reaped (at most 10 s)."""
        await _reaped(self.proc)

    def kill_in_background(self) -> None:
        """:meth:`kill`, the reaping left to a task of its own (for a command being cancelled)."""
        self.kill()
        _reap_later(self.proc)


async def _reaped(proc: subprocess.Popen[bytes], limit_s: float = 10.0, close_stderr: bool = True) -> None:
    """Poll a killed process until it is reaped (at most ``limit_s``), then close its stderr."""
    deadline, pause = time.monotonic() + limit_s, 0.001
    while proc.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.05)
    if close_stderr and proc.stderr is not None:
        with contextlib.suppress(OSError):
            proc.stderr.close()


def _reap_later(proc: subprocess.Popen[bytes]) -> None:
    task = asyncio.get_running_loop().create_task(_reaped(proc))
    _REAPING.add(task)
    task.add_done_callback(_REAPING.discard)
