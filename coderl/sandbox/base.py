"""The sandbox contract: where untrusted code runs.

``Sandbox`` methods take plain arguments and return plain values. Untrusted code never raises: a
crash, a timeout or a limit hit is an :class:`ExecResult`. Only infrastructure failures (a backend
that cannot start, a path that escapes the workspace) raise :class:`~coderl.errors.SandboxError`.
"""

from __future__ import annotations

import abc
import asyncio
import posixpath
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from coderl.errors import SandboxError
from coderl.sandbox.config import Backend, SandboxSpec

__all__ = ["Backend", "ExecResult", "Sandbox", "SandboxSpec", "relative_path"]


@dataclass
class ExecResult:
    """What one command did. ``exit_code`` is negative (-signal) when a signal ended it."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class Sandbox(abc.ABC):
    """An isolated workspace with a shell. Use ``async with`` or call ``close()``; nothing survives it."""

    spec: SandboxSpec
    id: str = ""

    @abc.abstractmethod
    async def start(self, warm: bool = False) -> None:
        """Create the sandbox and fill its workspace from ``spec.workspace``. ``warm``: the sandbox
        will run many commands, so get ready for them (:meth:`warm`) as early as possible, while the
        workspace fills."""

    @abc.abstractmethod
    async def exec(
        self,
        cmd: str | list[str],
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a string goes to ``bash -c``) in ``cwd`` (default the workdir)."""

    @abc.abstractmethod
    async def read_file(self, path: str) -> bytes:
        """Bytes of a file in the workspace (``path`` relative to the workdir, or absolute inside it)."""

    @abc.abstractmethod
    async def write_file(self, path: str, data: bytes | str) -> None:
        """Create or replace a file in the workspace (parents created)."""

    @abc.abstractmethod
    async def upload(self, local_dir: str | Path, path: str = ".") -> None:
        """Copy a local folder's contents into the workspace at ``path``."""

    @abc.abstractmethod
    async def download(self, path: str, local_dir: str | Path) -> list[str]:
        """Copy a workspace folder (or file) to a local folder; returns the skipped entries (unsafe links)."""

    async def warm(self) -> None:
        """Get ready for many commands without waiting (bwrap starts its exec agent in the background,
        so the first command does not pay for it). Other backends need nothing; never raises."""
        return None

    _closing: asyncio.Future[None] | None = None
    """The removal under way or done, once close() was called."""

    @property
    def _closed(self) -> bool:
        """close() was called (its removal may still be under way)."""
        return self._closing is not None

    async def close(self) -> None:
        """Kill everything inside and delete the workspace; idempotent.

        The removal runs as its own task: a caller cancelled while it waits (a Ctrl-C, a cancelled
        rollout) does not cut it short, and a second close() waits for the first one's rather than
        returning at once. A close cut short used to leave the workspace (or the server's sandbox)
        behind, marked closed for good."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    @abc.abstractmethod
    async def _close(self) -> None:
        """Remove the sandbox and all that runs in it; run once, by close()."""

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def relative_path(spec: SandboxSpec, path: str) -> str:
    """``path`` as a normalised path relative to the workdir; SandboxError if it leaves the workspace."""
    if "\x00" in path:
        raise SandboxError(f"path {path!r} contains a NUL byte")
    workdir = spec.workdir.rstrip("/") or "/"
    if posixpath.isabs(path):
        norm = posixpath.normpath(path)
        if norm != workdir and not norm.startswith(workdir + "/"):
            raise SandboxError(f"path {path!r} is outside the workspace {workdir}; use a path under it")
        rel = posixpath.relpath(norm, workdir)
    else:
        rel = posixpath.normpath(path)
    if rel == ".." or rel.startswith("../"):
        raise SandboxError(f"path {path!r} leaves the workspace {workdir}; '..' may not climb out of it")
    return "" if rel == "." else rel
