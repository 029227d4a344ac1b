"""One CPU-weight group that every bwrap sandbox on the host runs in, so that sandboxed commands,
however many, cannot starve the coderl process that serves them.

Linux schedules each session as a group of its own (autogroup), and every sandbox starts new
sessions: with 256 sandboxes busy, coderl's event loop would get 1/257 of the CPU and answer the
engine's replies late (measured: 0.2-0.4 s late in the bursts of ``coderl bench rollout``). Where
coderl runs as root and a ``cpu`` cgroup controller is writable, it makes the group
``coderl-sandboxes`` with the default weight, one process's share: when coderl and the sandboxes
both want the CPU, coderl gets at least half; when coderl is idle, the sandboxes get all of it. Every
coderl process on the host shares the group, which is kept (an empty cgroup costs nothing).

Where the group cannot be made (not root, a read-only or absent cgroup file system, cgroup v2
without the ``cpu`` controller at its root) sandboxes are scheduled as before, and nothing fails.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

from coderl.sandbox.hostsetup import is_root

GROUP = "coderl-sandboxes"

# A process launched with this prefix writes its pid into the group, then becomes the real command:
# the sandbox's processes are all born inside it. A failed write leaves the process where it was.
_ENTER = '{ echo $$ > "$0"; } 2>/dev/null; exec "$@"'


def enter_prefix() -> list[str]:
    """argv to put in front of a sandbox's launch command so that it runs in the group; [] without one."""
    procs = sandbox_group()
    return ["/bin/sh", "-c", _ENTER, str(procs)] if procs is not None else []


@functools.cache
def sandbox_group() -> Path | None:
    """The group's ``cgroup.procs`` file, the group made on first use; None where it cannot be made."""
    if not is_root():
        return None
    mounts = _read("/proc/self/mounts")
    own = _read("/proc/self/cgroup")
    for parent in (_v1_parent(mounts, own), _v2_parent(mounts)):
        if parent is None:
            continue
        group = parent / GROUP
        with contextlib.suppress(OSError):
            group.mkdir(exist_ok=True)
            procs = group / "cgroup.procs"
            if procs.is_file():
                return procs
    return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _v1_parent(mounts: str, own: str) -> Path | None:
    """cgroup v1: beside this process, in its own ``cpu`` cgroup."""
    mount = next(
        (f[1] for f in (line.split() for line in mounts.splitlines())
         if len(f) > 3 and f[2] == "cgroup" and "cpu" in f[3].split(",")),
        None,
    )  # fmt: skip
    path = next(
        (f[2] for f in (line.split(":", 2) for line in own.splitlines())
         if len(f) == 3 and "cpu" in f[1].split(",")),
        None,
    )  # fmt: skip
    if mount is None or path is None:
        return None
    parent = Path(mount) / path.lstrip("/")
    return parent if parent.is_dir() else None


def _v2_parent(mounts: str) -> Path | None:
    """cgroup v2: at the hierarchy's root (a cgroup holding processes may not have child groups with
    controllers), with ``cpu`` turned on for the root's children."""
    mount = next(
        (f[1] for f in (line.split() for line in mounts.splitlines()) if len(f) > 2 and f[2] == "cgroup2"),
        None,
    )
    if mount is None:
        return None
    root = Path(mount)
    if "cpu" not in _read(str(root / "cgroup.controllers")).split():
        return None
    if "cpu" not in _read(str(root / "cgroup.subtree_control")).split():
        try:
            (root / "cgroup.subtree_control").write_text("+cpu")
        except OSError:
            return None
    return root
