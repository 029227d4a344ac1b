"""The ``docker`` backend: one container per sandbox, through the Docker (or Podman) CLI.

The container runs ``sleep infinity`` from ``spec.image`` under an init that reaps orphans
(``--init``), with ``--network none`` (unless ``network``), a read-only root file system, the
workspace a tmpfs of ``disk_mb`` at ``workdir`` and ``/tmp`` a tmpfs of 256 MiB (so untrusted code
cannot fill the host's disk), memory and pids limits, all capabilities dropped and
no-new-privileges. One operation runs at a time per sandbox. Each exec runs ``bash -c`` (or an
argument list) under the spec's rlimits (``ulimit``: CPU, address space, file size, open files) and
``timeout -s KILL``; when it ends, every process it left behind is killed, so nothing outlives the
exec. Files move as tar streams through ``docker exec``; paths are resolved inside the container and
must stay in the workspace; links are never written through, and links out of the folder are never
copied out (``download`` reports them). ``sandbox.mounts`` (workspace sub-folders at other paths) is
refused: a read-only root has nowhere to put them. Containers whose process died without removing them
are removed by the next process's first sandbox (:mod:`coderl.sandbox.docker_sweep`).

The image needs bash, coreutils (``timeout``, ``realpath``) and tar: ``coderl sandbox image build``
makes one with Python 3, pytest, git and patch (see :mod:`coderl.sandbox.image`).
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import tarfile
import tempfile
import uuid
from pathlib import Path

from coderl.errors import SandboxError
from coderl.sandbox.base import ExecResult, Sandbox, SandboxSpec, relative_path
from coderl.sandbox.docker_sweep import LABEL, owner_label, sweep_stale_containers
from coderl.sandbox.hostfs import extract_archive
from coderl.sandbox.image import docker_cli, image_tag
from coderl.sandbox.runner import EXEC_POOL, run_limited

TMP_MB = 256
LAUNCH_WAIT_S = 30.0
"""How long a close waits for a ``docker run`` its cancelled start left going before stopping it."""
ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")
"""A workspace source with one of these endings is extracted, as the host-workspace backends do."""
READ_LIMIT = 64 << 20
"""Largest file ``read_file`` returns (as the host-workspace backends)."""

# $1: PIDs to spare (the init and its `sleep`), $2: seconds, $3-$6: rlimits, $7: the bytes of stdout and
# of stderr kept; then the command. bash's ulimit sets soft and hard limits both; -v and -f count KiB.
# The command writes into two FIFOs, each read by a filter that passes the first cap + 1 bytes on (one
# more than is kept, so the host marks the result truncated) and drains the rest in the container: a
# flood never crosses the daemon's stream (a 1 GiB line took 38 s through it, 2026-11-30). After the
# command, every process but the spared ones, the filters and their `head`s is killed (sweeps until none
# is left, at most ten; then the filters too); the filters then see the end of their input.
_EXEC = r"""keep=" $1 "; secs=$2; cap=$(( $7 + 1 ))
ulimit -t "$3" -v "$4" -f "$5" -n "$6" -c 0 || exit 126
shift 7
d=$(mktemp -d) && mkfifo "$d/o" "$d/e" || { echo "coderl: no room in /tmp for the output pipes" >&2; exit 126; }
{ head -c "$cap"; exec cat >/dev/null; } < "$d/o" & fo=$!
{ head -c "$cap" >&2; exec cat >/dev/null; } < "$d/e" & fe=$!
timeout -s KILL "$secs" "$@" > "$d/o" 2> "$d/e"; rc=$?
for ((i = 0; i < 10; i++)); do
  left=
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    case "$keep $fo $fe " in *" $p "*) continue ;; esac
    st=; pp=
    while read -r k v _; do case "$k" in State:) st=$v ;; PPid:) pp=$v; break ;; esac; done 2>/dev/null < "/proc/$p/status"
    case "$st: $fo $fe " in Z:*|*" $pp "*) continue ;; esac  # dead (not yet reaped), or a filter's head
    [ "$p" = "$$" ] || { kill -9 "$p" 2>/dev/null && left=1; }
  done
  [ -n "$left" ] || break
done
if [ -n "$left" ]; then  # writers outlived ten sweeps (a fork bomb): the filters would wait for them
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    case "$keep" in *" $p "*) continue ;; esac
    [ "$p" = "$$" ] || kill -9 "$p" 2>/dev/null
  done
fi
wait "$fo" "$fe"; rm -rf "$d"
exit "$rc"
"""

# $1: workdir, $2: path. Exit 3: refused (the reason on stderr).
_INSIDE = r"""inside() { case "$1/" in "$w"/*) return 0 ;; esac; echo "resolves outside the workspace $w (through a symlink); refused" >&2; exit 3; }
w=$1; p=$2
"""
_READ = (
    _INSIDE
    + r"""[ -L "$p" ] && { echo "is a symbolic link; refused" >&2; exit 3; }
r=$(realpath -e -- "$p" 2>/dev/null) || { echo "no such file in the sandbox workspace" >&2; exit 3; }
inside "$r"
[ -f "$r" ] || { echo "is not a regular file" >&2; exit 3; }
[ "$(stat -c %s -- "$r")" -le "$3" ] || { echo "is over the $3-byte read limit" >&2; exit 3; }
exec cat -- "$r"
"""
)
_WRITE = (
    _INSIDE
    + r"""d=$(realpath -m -- "$(dirname -- "$p")") && inside "$d"
mkdir -p -- "$d" || exit 3
f=$d/$(basename -- "$p")
if [ -L "$f" ] || { [ -e "$f" ] && [ ! -f "$f" ]; }; then
  echo "exists and is not a regular file; refusing to write through it" >&2; exit 3
fi
exec cat > "$f"
"""
)
_UNTAR = (
    _INSIDE
    + r"""d=$(realpath -m -- "$p") && inside "$d"
mkdir -p -- "$d" || exit 3
exec tar -x --no-same-owner -C "$d" -f -
"""
)
_TAR = (
    _INSIDE
    + r"""r=$(realpath -e -- "$p" 2>/dev/null) || { echo "no such file in the sandbox workspace" >&2; exit 3; }
inside "$r"
if [ -d "$r" ]; then exec tar -c -C "$r" .; fi
exec tar -c -C "$(dirname -- "$r")" -- "$(basename -- "$r")"
"""
)
_PIDS = r"""n=0
while :; do
  pids=; main=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; [ "$p" = "$$" ] && continue
    pids="$pids$p "
    [ "$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)" = "sleep infinity " ] && main=$p
  done
  if [ -n "$main" ] || [ "$n" -ge 200 ]; then break; fi
  n=$((n + 1)); sleep 0.05
done
printf '%s|%s' "$pids" "$main"
"""
"""The container's own processes (its init and the ``sleep infinity`` under it), which every exec's
clean-up spares, and the sleep's PID: listed once the init has started the sleep (``docker run -d``
can return before it has, and a clean-up that then killed the sleep ended the container; seen on a
loaded machine)."""


async def docker_available() -> str | None:
    """None when a daemon answers; otherwise the reason it cannot be used, and how to start one."""
    try:
        cli = docker_cli()
    except SandboxError as exc:
        return str(exc)
    r = await run_limited([cli, "info", "--format", "{{.ServerVersion}}"], timeout=10, max_output_bytes=4096)
    if r.exit_code != 0 or r.timed_out:
        return (
            f"no Docker daemon is reachable ({cli} info: {(r.stderr or r.stdout).strip()[:200]}); start one, "
            "e.g. as root: dockerd --bridge=none --iptables=false &"
        )
    return None


class DockerSandbox(Sandbox):
    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.id = uuid.uuid4().hex[:12]
        self.name = f"coderl-{self.id}"
        self._cli = ""
        self._workdir = spec.workdir.rstrip("/") or "/"
        self._keep = ""
        self._lock = asyncio.Lock()
        self._started = False
        self._launch: asyncio.Future[ExecResult] | None = None
        """The ``docker run`` (once issued): a close waits for it, so a container made while the start
        was being cancelled is removed too."""
        self.image = spec.image or image_tag()
        """The container image: ``sandbox.image``, else coderl's task image (``coderl sandbox image build``)."""

    async def start(self, warm: bool = False) -> None:
        s = self.spec
        if s.mounts:
            raise SandboxError(
                f"sandbox.mounts={s.mounts} is not supported by the docker backend (its root file system is "
                "read-only); use sandbox.backend=bwrap for tasks that need it (Harbor tasks)"
            )
        if s.workspace is not None and not Path(s.workspace).exists():
            raise SandboxError(f"sandbox workspace source {str(s.workspace)!r} does not exist")
        for path in s.host_paths:
            if not Path(path).exists():
                raise SandboxError(f"sandbox.host_paths: {path} does not exist on this host")
        self._cli = docker_cli()
        await sweep_stale_containers(self._cli)
        memory = s.memory_mb + s.disk_mb + TMP_MB  # the tmpfs mounts are charged to the container
        args = [
            "run", "-d", "--name", self.name, "--label", f"{LABEL}={owner_label()}", "--init", "--read-only",
            "--tmpfs", f"/tmp:rw,exec,size={TMP_MB}m", "--tmpfs", f"{self._workdir}:rw,exec,size={s.disk_mb}m",
            "--memory", f"{memory}m", "--memory-swap", f"{memory}m", "--pids-limit", str(s.max_processes),
            "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--workdir", self._workdir,
        ]  # fmt: skip
        if not s.network:
            args += ["--network", "none"]
        for path in s.host_paths:
            args += ["--volume", f"{path}:{path}:ro"]
        # not cut short by a cancel: the daemon would make the container after the CLI is gone
        self._launch = asyncio.ensure_future(self._run(*args, self.image, "sleep", "infinity", timeout=300))
        r = await asyncio.shield(self._launch)
        if r.exit_code != 0 or r.timed_out:
            await self._run("rm", "-f", self.name, timeout=60)
            raise SandboxError(await self._start_failure(r))
        self._started = True
        pids, _, main = (await self._check("exec", self.name, "sh", "-c", _PIDS, timeout=60)).stdout.partition("|")
        if not main.strip():
            await self._run("rm", "-f", self.name, timeout=60)
            raise SandboxError(
                f"docker sandbox {self.id}: its `sleep infinity` did not start within 10 s (processes: "
                f"{pids.strip() or 'none'}); is {self.image!r} an image with coreutils' sleep?"
            )
        self._keep = pids.strip()
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
        workdir = self._inside(cwd or self.spec.workdir)
        limit = timeout or self.spec.timeout_s
        s = self.spec
        env_args = [a for k, v in {**s.env, **(env or {})}.items() for a in ("-e", f"{k}={v}")]
        command = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        seconds = str(max(1, int(limit + 0.999)))
        rlimits = [
            str(s.cpu_seconds),
            str(s.memory_mb << 10),
            str(s.max_file_mb << 10),
            str(s.max_open_files),
        ]
        cap = str(s.max_output_bytes)
        wrapped = ["bash", "-c", _EXEC, "coderl-exec", self._keep, seconds, *rlimits, cap, *command]
        async with self._lock:
            self._require()
            r = await self._run("exec", "-w", workdir, *env_args, self.name, *wrapped, timeout=limit + 10)
        if r.exit_code == 137 and r.duration_s >= limit:
            r.timed_out = True
        elif (
            r.exit_code == 1
            and r.stderr.startswith("Error response from daemon")
            and not await self._running()
        ):
            raise SandboxError(f"docker sandbox {self.id} is gone: {r.stderr.strip()[:300]}")
        return r

    async def read_file(self, path: str) -> bytes:
        self._require()
        target = self._inside(path)
        code, out, err = await self._pipe(
            self.name, "sh", "-c", _READ, "read", self._workdir, target, str(READ_LIMIT)
        )
        if code != 0:
            raise SandboxError(f"read_file {path!r}: {err.strip()[:300] or f'exit {code}'}")
        return out

    async def write_file(self, path: str, data: bytes | str) -> None:
        self._require()
        if not relative_path(self.spec, path):
            raise SandboxError("write_file needs a file path, not the workspace root")
        raw = data.encode() if isinstance(data, str) else data
        code, _, err = await self._pipe(
            "-i", self.name, "sh", "-c", _WRITE, "write", self._workdir, self._inside(path), stdin=raw
        )
        if code != 0:
            raise SandboxError(f"write_file {path!r}: {err.strip()[:300] or f'exit {code}'}")

    async def upload(self, local_dir: str | Path, path: str = ".") -> None:
        self._require()
        source = Path(local_dir)
        target = self._inside(path)
        if not source.exists():
            raise SandboxError(f"upload source {str(source)!r} does not exist")
        data = await asyncio.get_running_loop().run_in_executor(EXEC_POOL, _tar_of, source)
        code, _, err = await self._pipe(
            "-i", self.name, "sh", "-c", _UNTAR, "upload", self._workdir, target, stdin=data, timeout=600
        )
        if code != 0:
            raise SandboxError(f"upload to {path!r}: {err.strip()[:300] or f'exit {code}'}")

    async def download(self, path: str, local_dir: str | Path) -> list[str]:
        self._require()
        rel = relative_path(self.spec, path)
        code, out, err = await self._pipe(
            self.name, "sh", "-c", _TAR, "download", self._workdir, self._inside(path), timeout=600
        )
        if code != 0:
            raise SandboxError(f"download {path!r}: {err.strip()[:300] or f'exit {code}'}")
        return await asyncio.get_running_loop().run_in_executor(
            EXEC_POOL, _untar_safely, out, Path(local_dir), rel
        )

    async def _close(self) -> None:
        if self._launch is not None:  # started, or its start cut short (then wait for the run to end)
            _, slow = await asyncio.wait([self._launch], timeout=LAUNCH_WAIT_S)
            for launch in slow:  # still pulling an image, say: stop it; a container made later is swept
                launch.cancel()
            await self._run("rm", "-f", self.name, timeout=60)

    # -- helpers -------------------------------------------------------------------------------

    async def _run(self, *args: str, timeout: float = 60) -> ExecResult:
        return await run_limited(
            [self._cli, *args], timeout=timeout, max_output_bytes=self.spec.max_output_bytes
        )

    async def _check(self, *args: str, timeout: float = 60) -> ExecResult:
        r = await self._run(*args, timeout=timeout)
        if r.exit_code != 0 or r.timed_out:
            raise SandboxError(f"{self._cli} {args[0]} failed: {(r.stderr or r.stdout).strip()[:500]}")
        return r

    async def _pipe(
        self, *args: str, stdin: bytes | None = None, timeout: float = 120
    ) -> tuple[int, bytes, str]:
        """``docker exec ARGS`` with bytes in and out (file moves), under the sandbox's lock."""
        argv = [self._cli, "exec", *args]
        async with self._lock:
            self._require()
            return await asyncio.get_running_loop().run_in_executor(
                EXEC_POOL, _pipe_sync, argv, stdin, timeout
            )

    async def _running(self) -> bool:
        r = await self._run("inspect", "--format", "{{.State.Running}}", self.name, timeout=30)
        return r.exit_code == 0 and r.stdout.strip() == "true"

    async def _start_failure(self, r: ExecResult) -> str:
        """Why ``docker run`` failed, with what to do about it."""
        from coderl.sandbox.image import BUILD_COMMAND, image_present

        reason = await docker_available()
        if reason:
            return reason
        said = (r.stderr or r.stdout).strip()[:400]
        image = self.image
        if not await asyncio.get_running_loop().run_in_executor(EXEC_POOL, image_present, image, self._cli):
            return (
                f"sandbox.image={image!r} is not on the Docker daemon and could not be pulled ({said}); "
                f"build coderl's task image with `{BUILD_COMMAND}` and use sandbox.image={image_tag()}"
            )
        return f"{self._cli} run {image} failed: {said}"

    def _inside(self, path: str) -> str:
        rel = relative_path(self.spec, path)
        return self._workdir.rstrip("/") + ("/" + rel if rel else "")

    def _require(self) -> None:
        if self._closed or not self._started:
            raise SandboxError(f"docker sandbox {self.id} is {'closed' if self._closed else 'not started'}")


def _pipe_sync(argv: list[str], stdin: bytes | None, timeout: float) -> tuple[int, bytes, str]:
    try:
        r = subprocess.run(
            argv, input=stdin if stdin is not None else b"", capture_output=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise SandboxError(f"{' '.join(argv[:3])} did not finish in {timeout:.0f} s") from None
    return r.returncode, r.stdout, r.stderr.decode("utf-8", "replace")


def _tar_of(source: Path) -> bytes:
    """A tar of a folder's contents, or of one file, or of an archive's contents; links stay links."""
    if source.is_file() and source.name.lower().endswith(ARCHIVES):
        with tempfile.TemporaryDirectory() as tmp:
            extract_archive(source, Path(tmp))
            return _tar_of(Path(tmp))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        if source.is_dir():
            for entry in sorted(source.iterdir()):
                tf.add(entry, arcname=entry.name)
        else:
            tf.add(source, arcname=source.name)
    return buf.getvalue()


def _untar_safely(data: bytes, dest: Path, rel: str) -> list[str]:
    """Extract a tar that came out of the container: members that would land outside ``dest``, links
    that point out of it and device files are skipped and returned (workspace-relative names)."""
    dest.mkdir(parents=True, exist_ok=True)
    skipped: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for member in tf:
            try:
                tf.extract(member, dest, filter="data")
            except OSError as exc:
                raise SandboxError(f"download: cannot write {member.name!r} into {dest}: {exc}") from exc
            except tarfile.FilterError:
                name = os.path.normpath(member.name)
                skipped.append(os.path.normpath(os.path.join(rel, name)) if rel else name)
    return skipped
