"""The ``sandbox`` config section: what a sandbox holds and the limits it runs under."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from coderl.section import Section

Backend = Literal["bwrap", "docker", "remote", "process"]


class SandboxSpec(Section):
    """What a sandbox holds and the limits it runs under (each exec gets the same limits)."""

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
    cpu_group: bool = True
    """Run the sandbox's processes in the host-wide cgroup `coderl-sandboxes` (root with a writable cpu
    controller only; elsewhere ignored): all sandboxes together weigh one process, so busy commands cannot
    starve coderl's own loop (bwrap)."""
    burst_gate_ms: float = Field(20.0, ge=0)
    """Commands started while this host's cores + 2 others are running wait their turn, first come first
    served, each keeping it until it ends or this many milliseconds pass (0: off; bwrap): a burst of short
    commands from many sandboxes ends in arrival order instead of all at the burst's end."""
    network: bool = False
    """Give the sandbox network access (off: no interfaces but its own loopback)."""
    env: dict[str, str] = {}
    """Environment variables of every exec (the host environment is never passed in)."""
    mounts: dict[str, str] = {}
    """Extra writable paths inside the sandbox backed by workspace sub-folders, e.g. {'/tests': '.harbor/tests'} (bwrap)."""
    host_paths: list[str] = []
    """Host folders (absolute paths) bound read-only at the same path inside the sandbox, e.g. an agent
    program installed outside /usr such as ~/.nvm or a cache folder (bwrap, docker; the process backend
    sees the whole host anyway). A path that does not exist is an error when the sandbox starts."""

    @field_validator("host_paths")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not path.startswith("/") or ".." in Path(path).parts:
                raise ValueError(f"sandbox.host_paths: {path!r} is not an absolute path without '..'")
        return paths

    image: str | None = None
    """Container image (docker backend); None: coderl's task image, made on this machine by `coderl sandbox
    image build` (Debian with Python 3, pytest, git and patch; no registry needed)."""
    remote_url: str | None = None
    """Base URL of a `coderl sandbox serve` host (remote backend)."""
    remote_token: str | None = None
    """Bearer token for the remote host (remote backend)."""

    @model_validator(mode="after")
    def _remote_needs_its_host(self) -> SandboxSpec:
        if self.backend == "remote" and not (self.remote_url and self.remote_token):
            missing = " and ".join(
                k for k, v in (("sandbox.remote_url", self.remote_url), ("sandbox.remote_token", self.remote_token)) if not v
            )
            raise ValueError(
                f"sandbox.backend=remote needs {missing}: the URL of a `coderl sandbox serve` host and a client "
                "token it accepts (its server.tokens)"
            )
        return self
