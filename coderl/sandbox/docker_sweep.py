"""Containers left behind by a process that died without closing them.

Each docker sandbox's container carries the label ``coderl.owner=<host>/<boot>/<pid ns>/<pid>/<start>``:
the host name, the kernel's boot id, the process's pid namespace, the process that made it and that
process's start time (so a pid reused by another process does not pass for the owner). A run killed
with SIGKILL (the OOM killer, ``kill -9``) cannot remove its containers, and each kept running
``sleep infinity`` with its memory limit reserved. On Linux, the first docker sandbox a process starts
removes the containers whose owner is provably gone: made on this host and boot, in this pid
namespace, by a pid that no longer exists or now belongs to a process started at another time; or
made on this host before its last boot. Anything it cannot judge is left alone: containers of other
hosts or of other pid namespaces sharing the daemon (pods sharing a host name), owners whose
``/proc`` entry is hidden from us (``hidepid``), unlabelled containers, and every container where
there is no ``/proc``.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from pathlib import Path

from coderl.sandbox.runner import run_limited

LABEL = "coderl.owner"
log = logging.getLogger(__name__)
_swept: set[str] = set()
"""The docker CLIs this process has swept with (once each)."""


def owner_label(pid: int | None = None) -> str:
    """``<host>/<boot id>/<pid namespace>/<pid>/<start time>`` of ``pid`` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}/{_boot_id()}/{_pid_namespace()}/{pid}/{_start_time(pid)}"


def owner_alive(label: str) -> bool:
    """False only when the process ``label`` names is provably gone (module doc)."""
    parts = label.split("/")
    if len(parts) != 5 or not parts[3].isdigit():
        return True  # not a label of this form: not ours to judge
    host, boot, namespace, pid, start = parts
    if host != socket.gethostname() or not boot or not namespace:
        return True
    if boot != _boot_id():
        return not _boot_id()  # made before this host's last boot: its process is gone
    if namespace != _pid_namespace() or not start:
        return True  # another pid namespace's pids mean nothing here
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    except OSError as exc:
        return exc.errno != errno.ESRCH
    now = _start_time(int(pid))
    return not now or now == start  # hidden from us (hidepid): alive as far as we can tell


async def sweep_stale_containers(cli: str) -> int:
    """Remove the labelled containers whose owner process is provably gone (once per process and CLI).
    Returns how many went; a daemon that does not answer sweeps nothing."""
    if cli in _swept:
        return 0
    _swept.add(cli)
    if not _pid_namespace():  # no /proc: nothing can be judged
        return 0
    listed = await run_limited(
        [cli, "ps", "-a", "--filter", f"label={LABEL}", "--format", f'{{{{.Names}}}}\t{{{{.Label "{LABEL}"}}}}'],
        timeout=30, max_output_bytes=1 << 20,
    )  # fmt: skip
    if listed.exit_code != 0 or listed.timed_out:
        return 0
    stale = [
        name for name, _, label in (row.partition("\t") for row in listed.stdout.splitlines())
        if name and not owner_alive(label)
    ]  # fmt: skip
    removed = 0
    for name in stale:
        r = await run_limited([cli, "rm", "-f", name], timeout=60, max_output_bytes=4096)
        removed += r.exit_code == 0
    if removed:
        log.warning("removed %d docker sandbox container(s) left by processes that died without closing them", removed)
    return removed


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); '' when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]  # fields after the command's closing parenthesis start at 3


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    """This process's pid namespace (``pid:[4026531836]``); '' without /proc."""
    try:
        return os.readlink("/proc/self/ns/pid").replace("/", "_")
    except OSError:
        return ""
