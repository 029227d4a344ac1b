"""Containers left behind by a process that died without closing them.

Each docker sandbox's container carries the label ``coderl.owner=<host>/<pid>/<start>``: the host, the
process that made it and that process's start time (``/proc/<pid>/stat``, so a pid reused by another
process does not pass for the owner). A run killed with SIGKILL (the OOM killer, ``kill -9``) cannot
remove its containers, and each keeps running ``sleep infinity`` with its memory limit reserved. The
first docker sandbox a process starts removes every container of this host whose owner is gone; those
of live processes, of other hosts sharing the daemon, and containers without the label are left alone.
"""

from __future__ import annotations

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
    """``<host>/<pid>/<start time>`` of ``pid`` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}/{pid}/{_start_time(pid)}"


def owner_alive(label: str) -> bool:
    """Whether the process ``label`` names still runs (True for another host's: not ours to judge)."""
    host, _, rest = label.partition("/")
    pid, _, start = rest.partition("/")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    return _start_time(int(pid)) == start


async def sweep_stale_containers(cli: str) -> int:
    """Remove this host's labelled containers whose owner process is gone (once per process and CLI).
    Returns how many went; a daemon that does not answer sweeps nothing."""
    if cli in _swept:
        return 0
    _swept.add(cli)
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
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); '' when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]  # fields after the command's closing parenthesis start at 3
