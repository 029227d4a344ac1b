"""The default backend: bubblewrap namespaces + rlimits.

Each sandbox runs one long-lived ``bwrap`` with a tiny exec agent inside (agent_src.py), started
*as the sandbox's own unprivileged uid* when coderl runs as root (see hostsetup). Inside: new user,
PID, IPC, UTS, cgroup and (unless ``network``) network namespaces; the host's /usr and /etc
read-only; the host Python read-only at its own path; the workspace read-write at ``workdir``; a
private /tmp; no host environment. Each exec runs ``bash -c CMD`` (or an argument list) through the
agent, which holds the sandbox's rlimits (the command inherits them) and afterwards kills every
other process in the PID namespace, so nothing outlives an exec; ``close()`` kills the namespace
itself. Namespaces are made once per sandbox, not per exec:
creating and tearing them down is serialised in the kernel and would cap throughput. Run as root,
every sandbox's processes share one CPU-weight group (cpugroup.py), so that they cannot starve
coderl itself.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

from coderl.errors import SandboxError
from coderl.sandbox.agent import AgentDied, AgentProcess
from coderl.sandbox.agent_src import AGENT_SOURCE
from coderl.sandbox.base import ExecResult, SandboxSpec, relative_path
from coderl.sandbox.cpugroup import enter_prefix
from coderl.sandbox.gate import host_gate
from coderl.sandbox.hostfs import HostWorkspace
from coderl.sandbox.hostsetup import (
    UidLease,
    is_root,
    mount_tmpfs,
    python_binds,
    python_path_dirs,
    reachable_source,
    remove_tree,
    state_dir,
    sweep_stale_workspaces,
)
from coderl.sandbox.local import LocalSandbox
from coderl.sandbox.runner import Limits, run_limited

_TMP_MB = 256
log = logging.getLogger(__name__)

_LEFT: dict[Path, UidLease | None] = {}
"""Workspaces this process made and has not removed yet (their uid leases): what it removes at exit."""
_LEFT_LOCK = threading.Lock()


def _remove_left_workspaces() -> None:
    """At exit: remove every workspace whose sandbox was never closed, saying so. A tmpfs left mounted
    keeps its memory until someone unmounts it; a Ctrl-C of ``coderl train`` once left one behind
    (tests/test_interrupt.py, 1 run in about 20, its cause not found), so no path that loses a
    ``close()`` leaves a mount."""
    with _LEFT_LOCK:
        left = list(_LEFT.items())
        _LEFT.clear()
    for path, lease in left:
        log.warning("sandbox workspace %s was never closed: removed at exit", path)
        remove_tree(path)
        if lease is not None:
            lease.release()


atexit.register(_remove_left_workspaces)


def agent_python() -> str:
    """The interpreter for the in-sandbox agent (stdlib only): the system's, which starts faster than
    most virtualenv / pyenv builds, else this one."""
    for candidate in ("/usr/bin/python3", sys.executable):
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise SandboxError("no Python interpreter found for the sandbox agent")


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxError(
            "bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap) or choose "
            "another backend: sandbox.backend=docker|remote|process"
        )
    return path


class BwrapSandbox(LocalSandbox):
    def __init__(self, spec: SandboxSpec) -> None:
        super().__init__(spec)
        self._lease: UidLease | None = None
        self._agent_argv: list[str] = []
        self._oneshot_prefix: list[str] = []
        self._agent: AgentProcess | None = None
        self._agent_lock = asyncio.Lock()
        self._warming: asyncio.Task[None] | None = None
        self._execs = 0

    def _create_workspace(self) -> HostWorkspace:
        bwrap = bwrap_path()
        python = agent_python()
        for host_path in self.spec.host_paths:  # what can refuse refuses before anything is made
            if not Path(host_path).exists():
                raise SandboxError(f"sandbox.host_paths: {host_path} does not exist on this host")
        sweep_stale_workspaces()
        self._lease = UidLease() if is_root() else None
        uid = self._lease.uid if self._lease else None
        path = state_dir() / "ws" / self.id
        path.mkdir(mode=0o700)
        with _LEFT_LOCK:
            _LEFT[path] = self._lease
        try:
            if uid is not None and not mount_tmpfs(path, self.spec.disk_mb, uid):
                os.chown(path, uid, uid)  # mounting is not allowed here: a plain folder
            sandbox = [bwrap, *self._bwrap_args(path)]  # (the task's mounts' folders go in the workspace)
            group = enter_prefix() if self.spec.cpu_group else []
        except BaseException:
            self._destroy_workspace(HostWorkspace(path, uid, uid))  # nothing made is left behind
            raise
        # setpriv rather than Popen(user=...): CPython uses vfork only when no uid change is asked for,
        # and a plain fork of a large process (torch loaded) blocks the caller for milliseconds.
        drop = (
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"] if uid is not None else []
        )
        self._oneshot_prefix = [*group, *drop, *self._limits().prlimit_args(), *sandbox]
        limits = ",".join(f"{name}={value}" for name, value in self._limits().rlimits().items())
        self._agent_argv = [*group, *drop, *sandbox, *self._env(None), "--chdir", self.spec.workdir, "--",
                            python, "-I", "-S", "-c", AGENT_SOURCE, limits, str(self.spec.max_output_bytes)]  # fmt: skip
        return HostWorkspace(path, uid, uid)

    async def _stop_processes(self) -> None:
        warming, self._warming = self._warming, None
        if warming is not None:
            warming.cancel()  # an agent still starting is killed by its own start
            await asyncio.wait([warming])  # its outcome is not ours to raise; our own cancel still is
        await self._drop_agent()

    def _destroy_workspace(self, ws: HostWorkspace) -> None:
        with _LEFT_LOCK:
            if _LEFT.pop(ws.root, False) is False:
                return  # removed at exit already
        remove_tree(ws.root)
        if self._lease is not None:
            self._lease.release()

    def _limits(self) -> Limits:
        s = self.spec
        return Limits(s.cpu_seconds, s.memory_mb, s.max_processes, s.max_file_mb, s.max_open_files)

    def _bwrap_args(self, workspace: Path) -> list[str]:
        s = self.spec
        args = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--disable-userns"]
        if s.network:
            args.append("--share-net")
        args += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), f"/{name}"]
            elif host.is_dir():
                args += ["--ro-bind", str(host), f"/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev", "--size", str(_TMP_MB << 20), "--tmpfs", "/tmp"]
        # After /tmp: a virtualenv made under /tmp (mktemp -d) would be hidden by the private /tmp.
        for source, inside in python_binds():
            args += ["--ro-bind", str(source), str(inside)]
        for path in s.host_paths:  # (each checked to exist by _create_workspace, before the workspace)
            args += ["--ro-bind", str(reachable_source(Path(path))), path]
        args += ["--bind", str(workspace), s.workdir]
        ws = HostWorkspace(workspace, self._uid(), self._uid())
        for mount_point, sub in s.mounts.items():
            backing = ws.resolve(relative_path(s, sub), must_exist=False)
            backing.mkdir(parents=True, exist_ok=True)
            ws.own_tree(workspace)
            args += ["--bind", str(backing), mount_point]
        return args

    def _uid(self) -> int | None:
        return self._lease.uid if self._lease else None

    def _env(self, extra: dict[str, str] | None) -> list[str]:
        args = ["--clearenv"]
        for key, value in self._env_dict(extra).items():
            args += ["--setenv", key, value]
        return args

    def _env_dict(self, extra: dict[str, str] | None) -> dict[str, str]:
        path = ":".join([*python_path_dirs(), "/usr/local/bin", "/usr/bin", "/bin"])
        env = {"PATH": path, "HOME": self.spec.workdir, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        env.update(self.spec.env)
        env.update(extra or {})
        return env

    async def exec(
        self,
        cmd: str | list[str],
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        self._require()
        rel = relative_path(self.spec, cwd or self.spec.workdir)
        limit = timeout or self.spec.timeout_s
        request: dict[str, Any] = {
            "argv": ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd),
            "env": self._env_dict(env),
            "cwd": self.spec.workdir.rstrip("/") + ("/" + rel if rel else ""),
            "timeout": limit,
            "cap": self.spec.max_output_bytes,
        }
        async with self._lock:
            self._execs += 1
            if self._execs == 1 and self._warming is None:
                # A sandbox's first command runs in a one-shot bwrap (no agent to start): short-lived
                # sandboxes (one command, then close) never pay for the agent.
                argv = [
                    *self._oneshot_prefix,
                    *self._env(env),
                    "--chdir",
                    str(request["cwd"]),
                    "--",
                    *request["argv"],
                ]
                result = await run_limited(
                    argv,
                    timeout=limit,
                    max_output_bytes=self.spec.max_output_bytes,
                    env={"PATH": "/usr/bin:/bin"},
                    cwd="/",
                )
                if result.exit_code == 1 and result.stderr.startswith("bwrap:"):
                    raise SandboxError(f"bwrap failed to start the sandbox: {result.stderr.strip()}")
                return result
            try:
                return await self._call(request, limit + 30)
            except asyncio.CancelledError:
                agent, self._agent = self._agent, None
                if agent is not None:
                    agent.kill_in_background()  # the whole PID namespace goes with it
                raise

    async def warm(self) -> None:
        if self._warming is None and not self._closed and self._ws is not None:
            self._warming = asyncio.get_running_loop().create_task(self._warm_agent())

    async def _warm_agent(self) -> None:
        with contextlib.suppress(Exception):  # a failed start is retried (and reported) by the next exec
            await self._ensure_agent()

    async def _ensure_agent(self) -> AgentProcess:
        async with self._agent_lock:
            if self._agent is not None and not self._agent.alive:
                await self._drop_agent()
            if self._agent is None:
                if self._closed:
                    raise SandboxError(f"sandbox {self.id} is closed")
                self._agent = await AgentProcess.start(self._agent_argv)
            return self._agent

    async def _drop_agent(self) -> None:
        agent, self._agent = self._agent, None
        if agent is not None:
            agent.kill()
            await agent.wait()

    async def _call(self, request: dict[str, Any], deadline_s: float) -> ExecResult:
        """(Re)start the agent if needed and run one request through it."""
        agent = await self._ensure_agent()
        try:
            result = await host_gate().run(agent.call(request, deadline_s), self.spec.burst_gate_ms / 1000)
            if agent.retiring:  # its own CPU neared the limit it holds: the next command gets a new one
                await self._drop_agent()
            return result
        except AgentDied:
            await self._drop_agent()
            return ExecResult(
                exit_code=-9,
                stdout="",
                stderr="the sandbox's process namespace ended during this command (the command killed it, it "
                "ran past its time limit, or its output kept the exec agent busy past the CPU limit); the "
                "workspace is kept and the next command starts afresh",
                timed_out=True,
            )
