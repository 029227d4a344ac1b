"""The sandbox contract: where untrusted code runs.

``Sandbox`` methods take plain arguments and return plain values. Untrusted code never raises: a
crash, a timeout or a limit hit is an :class:`ExecResult`. Only infrastructure failures (a backend
that cannot start, a path that escapes the workspace) raise :class:`~coderl.errors.SandboxError`.
"""

from __future__ import annotations

import abc
import posixpath
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from coderl.errors import SandboxError

Backend = Literal["bwrap", "docker", "remote", "process"]


class SandboxSpec(BaseModel):
    """What a sandbox holds and the limits it runs under (each exec gets the same limits)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    backend: Backend = "bwrap"
    """bwrap (default: namespaces + rlimits), docker, remote (a `coderl sandbox serve` host) or process (NO isolation)."""
    workspace: Path | None = None
    """Local folder or archive (.tar, .tar.gz, .zip) copied in as the initial workspace; empty = start empty."""
    workdir: str = "/workspace"
    """Absolute path of the workspace inside the sandbox."""
    timeout_s: float = Field(60.0, gt=0)
    """Default wall-clock limit of one exec; the whole process tree is killed when it passes."""
    cpu_seconds: int = Field(120, ge=1)
    """CPU-time limit of one exec (RLIMIT_CPU)."""
    memory_mb: int = Field(2048, ge=16)
    """Address-space limit per process (RLIMIT_AS) / container memory (docker)."""
    max_processes: int = Field(128, ge=4)
    """Most processes and threads alive at once (RLIMIT_NPROC, per-sandbox uid) / pids limit (docker)."""
    max_file_mb: int = Field(256, ge=1)
    """Largest file a process may write (RLIMIT_FSIZE)."""
    max_open_files: int = Field(1024, ge=16)
    """Most open file descriptors per process (RLIMIT_NOFILE)."""
    disk_mb: int = Field(1024, ge=1)
    """Size of the workspace (a tmpfs of this size where the backend can mount one)."""
    max_output_bytes: int = Field(1 << 20, ge=1024)
    """Bytes of stdout and of stderr kept per exec; the rest is dropped and the result marked truncated."""
    network: bool = False
    """Give the sandbox network access (off: no interfaces but its own loopback)."""
    env: dict[str, str] = {}
    """Environment variables of every exec (the host environment is never passed in)."""
    mounts: dict[str, str] = {}
    """Extra writable paths inside the sandbox backed by workspace sub-folders, e.g. {'/tests': '.harbor/tests'} (bwrap)."""
    image: str = "python:3.11-slim"
    """Container image (docker backend)."""
    remote_url: str | None = None
    """Base URL of a `coderl sandbox serve` host (remote backend)."""
    remote_token: str | None = None
    """Bearer token for the remote host (remote backend)."""


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
    async def start(self) -> None:
        """Create the sandbox and fill its workspace from ``spec.workspace``."""

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

    @abc.abstractmethod
    async def close(self) -> None:
        """Kill everything inside and delete the workspace; idempotent."""

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
