"""The ``docker`` backend: one container per sandbox, through the Docker (or Podman) CLI.

The container runs ``sleep infinity`` from ``spec.image`` with ``--network none`` (unless
``network``), memory / pids / CPU limits, all capabilities dropped and no-new-privileges; commands run
with ``docker exec`` under ``timeout -s KILL``; files move with ``docker cp`` or through ``cat``
inside the container, so paths are resolved by the container, never on the host.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

from coderl.errors import SandboxError
from coderl.sandbox.base import ExecResult, Sandbox, SandboxSpec, relative_path
from coderl.sandbox.runner import run_limited


def docker_cli() -> str:
    for name in (os.environ.get("CODERL_DOCKER", ""), "docker", "podman"):
        if name and shutil.which(name):
            return name
    raise SandboxError("no docker or podman CLI found; install one or use sandbox.backend=bwrap")


async def docker_available() -> str | None:
    """None when a daemon answers; otherwise the reason it cannot be used."""
    try:
        cli = docker_cli()
    except SandboxError as exc:
        return str(exc)
    r = await run_limited([cli, "info", "--format", "{{.ServerVersion}}"], timeout=10, max_output_bytes=4096)
    if r.exit_code != 0 or r.timed_out:
        return f"no Docker daemon is reachable ({cli} info: {(r.stderr or r.stdout).strip()[:200]})"
    return None


class DockerSandbox(Sandbox):
    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.id = uuid.uuid4().hex[:12]
        self.name = f"coderl-{self.id}"
        self._cli = ""
        self._started = False
        self._closed = False

    async def _run(self, *args: str, timeout: float = 60, stdin: bytes | None = None) -> ExecResult:
        return await run_limited(
            [self._cli, *args], timeout=timeout, max_output_bytes=self.spec.max_output_bytes, stdin=stdin
        )

    async def _check(self, *args: str, timeout: float = 60, stdin: bytes | None = None) -> ExecResult:
        r = await self._run(*args, timeout=timeout, stdin=stdin)
        if r.exit_code != 0 or r.timed_out:
            raise SandboxError(f"{self._cli} {args[0]} failed: {(r.stderr or r.stdout).strip()[:500]}")
        return r

    async def start(self, warm: bool = False) -> None:
        reason = await docker_available()
        if reason:
            raise SandboxError(reason)
        self._cli = docker_cli()
        s = self.spec
        args = [
            "run", "-d", "--name", self.name, "--memory", f"{s.memory_mb}m", "--memory-swap", f"{s.memory_mb}m",
            "--pids-limit", str(s.max_processes), "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--ulimit", f"fsize={s.max_file_mb << 20}", "--ulimit", f"nofile={s.max_open_files}",
            "--tmpfs", "/tmp:rw,size=256m", "--workdir", s.workdir,
        ]  # fmt: skip
        if not s.network:
            args += ["--network", "none"]
        for path in s.host_paths:
            if not Path(path).exists():
                raise SandboxError(f"sandbox.host_paths: {path} does not exist on this host")
            args += ["--volume", f"{path}:{path}:ro"]
        await self._check(*args, s.image, "sleep", "infinity", timeout=300)
        self._started = True
        await self._check("exec", self.name, "mkdir", "-p", s.workdir)
        if s.workspace is not None:
            await self.upload(s.workspace, ".")

    async def exec(
        self,
        cmd: str | list[str],
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        self._require()
        rel = relative_path(self.spec, cwd or self.spec.workdir)
        workdir = self.spec.workdir.rstrip("/") + ("/" + rel if rel else "")
        limit = timeout or self.spec.timeout_s
        env_args = [a for k, v in {**self.spec.env, **(env or {})}.items() for a in ("-e", f"{k}={v}")]
        command = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        inner = ["timeout", "-s", "KILL", str(max(1, int(limit + 0.999))), *command]
        r = await self._run("exec", "-w", workdir, *env_args, self.name, *inner, timeout=limit + 10)
        if r.exit_code == 137 and r.duration_s >= limit:
            r.timed_out = True
        return r

    async def read_file(self, path: str) -> bytes:
        self._require()
        target = self._inside(path)
        with tempfile.TemporaryDirectory() as tmp:
            await self._check("cp", f"{self.name}:{target}", tmp)
            files = list(Path(tmp).iterdir())
            if len(files) != 1 or not files[0].is_file():
                raise SandboxError(f"{path!r} is not a regular file in the sandbox")
            return files[0].read_bytes()

    async def write_file(self, path: str, data: bytes | str) -> None:
        self._require()
        raw = data.encode() if isinstance(data, str) else data
        target = self._inside(path)
        await self._check(
            "exec",
            "-i",
            self.name,
            "sh",
            "-c",
            'mkdir -p "$(dirname "$1")" && cat > "$1"',
            "sh",
            target,
            stdin=raw,
        )

    async def upload(self, local_dir: str | Path, path: str = ".") -> None:
        self._require()
        source = Path(local_dir)
        target = self._inside(path)
        await self._check("exec", self.name, "mkdir", "-p", target)
        await self._check("cp", f"{source}/." if source.is_dir() else str(source), f"{self.name}:{target}")

    async def download(self, path: str, local_dir: str | Path) -> list[str]:
        self._require()
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        await self._check("cp", f"{self.name}:{self._inside(path)}/.", str(local_dir))
        return []

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._started:
            await self._run("rm", "-f", self.name, timeout=60)

    def _inside(self, path: str) -> str:
        rel = relative_path(self.spec, path)
        return self.spec.workdir.rstrip("/") + ("/" + rel if rel else "")

    def _require(self) -> None:
        if self._closed or not self._started:
            raise SandboxError(f"docker sandbox {self.id} is {'closed' if self._closed else 'not started'}")
