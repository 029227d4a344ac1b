"""Host side of the in-sandbox exec agent (see agent_src.py): start it, talk to it, kill it."""

from __future__ import annotations

import base64
import contextlib
import json
import marshal
import os
import select
import signal
import struct
import subprocess
import time
from typing import Any

from coderl.errors import SandboxError
from coderl.sandbox.base import ExecResult


class AgentDied(Exception):
    """The agent (and with it the sandbox's PID namespace) is gone."""


class AgentProcess:
    """One long-lived ``bwrap ... python -c AGENT`` process; calls are made one at a time."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},  # bwrap itself sees no host secrets
            cwd="/",
            start_new_session=True,
        )
        try:
            self._read_frame(time.monotonic() + 60)
        except AgentDied:
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
            self.kill()
            raise SandboxError(f"the sandbox did not start: {err.strip()[-800:] or 'no output'}") from None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, request: dict[str, Any], deadline_s: float) -> ExecResult:
        body = marshal.dumps(request, 4)  # read by the agent's marshal (a built-in: see agent_src.py)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(struct.pack(">Q", len(body)) + body)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise AgentDied() from None
        reply = self._read_frame(time.monotonic() + deadline_s)
        return ExecResult(
            exit_code=int(reply["exit_code"]),
            stdout=base64.b64decode(reply["stdout"]).decode("utf-8", errors="replace"),
            stderr=base64.b64decode(reply["stderr"]).decode("utf-8", errors="replace"),
            timed_out=bool(reply["timed_out"]),
            truncated=bool(reply["truncated"]),
            duration_s=float(reply["duration_s"]),
        )

    def _read_frame(self, deadline: float) -> dict[str, Any]:
        header = self._read_exact(8, deadline)
        (n,) = struct.unpack(">Q", header)
        data: dict[str, Any] = json.loads(self._read_exact(n, deadline))
        return data

    def _read_exact(self, n: int, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        poller = select.poll()  # not select(): hundreds of sandboxes push descriptors past 1024
        poller.register(fd, select.POLLIN | select.POLLHUP)
        buf = bytearray()
        while len(buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AgentDied()
            if not poller.poll(min(remaining, 1.0) * 1000):
                continue
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                raise AgentDied()
            buf += chunk
        return bytes(buf)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.close()
