"""Host-side set-up for bwrap sandboxes: state folders, per-sandbox uids, tmpfs workspaces, and
read-only views of the host's Python.

Run as root, each sandbox gets its own unprivileged uid (from a range, leased with a file lock so
several coderl processes never share one): bwrap is started *as that uid*, so RLIMIT_NPROC applies
(the kernel exempts root) and nothing inside is root on the host. Its workspace is a tmpfs of
``disk_mb`` owned by that uid. Run as an ordinary user, bwrap runs as that user and the workspace
is a plain folder.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import functools
import os
import re
import secrets
import shutil
import sys
from pathlib import Path

from coderl.errors import SandboxError

UID_BASE = 200_000
UID_COUNT = 4096
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
MNT_DETACH = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def is_root() -> bool:
    return os.geteuid() == 0


def state_dir() -> Path:
    """Where workspaces, uid leases and host views live (``$CODERL_SANDBOX_DIR`` or /tmp/coderl-sandbox)."""
    path = Path(os.environ.get("CODERL_SANDBOX_DIR", "/tmp/coderl-sandbox"))
    for sub in ("", "ws", "uids", "host"):
        (path / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(path / sub, 0o711 if sub in ("", "ws", "host") else 0o700)
    return path


class UidLease:
    """An exclusive uid from the sandbox range, held by an flock until ``release()``."""

    def __init__(self) -> None:
        self.uid = -1
        self._fd = -1
        locks = state_dir() / "uids"
        # A random start: a uid just released may still own exiting processes of its last sandbox,
        # which would count against the next owner's process limit.
        start = secrets.randbelow(UID_COUNT)
        for i in range(UID_COUNT):
            uid = UID_BASE + (start + i) % UID_COUNT
            fd = os.open(locks / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            return
        raise SandboxError(f"all {UID_COUNT} sandbox uids are in use; close some sandboxes")

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


_swept = False


def sweep_stale_workspaces() -> int:
    """Remove the workspaces of sandboxes whose process died without cleaning up (once per process).

    A workspace owned by a sandbox uid whose lease nobody holds is stale: its owner was killed
    (a tmpfs stays mounted, and keeps its memory, until someone unmounts it). The uid's lock is
    held while removing, so no new sandbox can take that uid meanwhile. Returns how many went.
    """
    global _swept
    if _swept or not is_root():
        return 0
    _swept = True
    root = state_dir()
    sweep_stale_host_views(root / "host")
    removed = 0
    for ws in (root / "ws").iterdir():
        try:
            uid = ws.stat().st_uid
        except OSError:
            continue
        if not UID_BASE <= uid < UID_BASE + UID_COUNT:
            continue  # being made right now (still root's), or not ours
        fd = os.open(root / "uids" / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            remove_tree(ws)
            removed += 1
        except BlockingIOError:
            pass  # a live sandbox holds this uid
        finally:
            os.close(fd)
    return removed


def mount_tmpfs(path: Path, size_mb: int, uid: int) -> bool:
    """Mount a tmpfs of ``size_mb`` at ``path`` owned by ``uid``; False where mounting is not allowed."""
    opts = f"size={size_mb}m,mode=0700,uid={uid},gid={uid}".encode()
    rc = _libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts)
    return bool(rc == 0)


def unmount(path: Path) -> None:
    _libc.umount2(str(path).encode(), MNT_DETACH)


def is_mount_point(path: Path) -> bool:
    """From /proc/self/mountinfo (os.path.ismount misses bind mounts within one filesystem)."""
    target = str(path.resolve())
    mounts = _mounts()
    if not mounts:  # no /proc here
        return os.path.ismount(path)
    return any(point == target for _, point in mounts)


def remove_tree(path: Path) -> None:
    if is_mount_point(path):
        unmount(path)
    shutil.rmtree(path, ignore_errors=True)


def _traversable_by_others(path: Path) -> bool:
    """Whether an unprivileged uid can reach ``path`` (every parent has the 'x' bit for others)."""
    for p in [path, *path.parents]:
        try:
            if not os.stat(p).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


_BINDS: list[tuple[Path, Path]] | None = None


def python_binds() -> list[tuple[Path, Path]]:
    """(host source, path inside the sandbox) pairs that make this Python usable in the sandbox.

    The prefixes (interpreter and active environment) are bound at their own paths so scripts and
    ``sys.prefix`` work. A prefix that an unprivileged uid cannot reach (pyenv under /root, mode
    700) is first bind-mounted read-only by root under the state folder, and bound from there.
    """
    global _BINDS
    if _BINDS is not None:
        return _BINDS
    prefixes: list[Path] = []
    for name in dict.fromkeys([sys.base_prefix, sys.prefix]):
        p = Path(name).resolve()
        if p == Path("/usr") or Path("/usr") in p.parents:
            continue  # covered by the /usr bind
        prefixes.append(p)
    prefixes += site_dirs_outside(sys.path, prefixes)
    binds: list[tuple[Path, Path]] = []
    for prefix in prefixes:
        binds.append((reachable_source(prefix), prefix))
    _BINDS = binds
    return binds


def reachable_source(path: Path) -> Path:
    """``path``, or a read-only view of it an unprivileged uid can reach (see :func:`host_view`)."""
    return host_view(path) if is_root() and not _traversable_by_others(path) else path


def host_view(prefix: Path) -> Path:
    """A read-only view of ``prefix`` under the state folder that an unprivileged uid can reach (root
    bind-mounts it there once; later processes reuse it). A view left from an earlier folder at the
    same path — deleted and made again since, as a test's virtualenv in a reused pytest folder is —
    shows the old folder's files, or none, so it is taken down and made again."""
    source = state_dir() / "host" / str(prefix).strip("/").replace("/", "_")
    for _ in range(16):  # views may be stacked, one per earlier folder
        if not is_mount_point(source) or _same_folder(source, prefix):
            break
        unmount(source)
    if not is_mount_point(source):
        source.mkdir(exist_ok=True)
        os.chmod(source, 0o755)
        if _libc.mount(str(prefix).encode(), str(source).encode(), None, MS_BIND | MS_REC, None) != 0:
            raise SandboxError(f"could not make {prefix} visible to sandboxes (bind mount failed)")
        _libc.mount(None, str(source).encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC, None)
    return source


def sweep_stale_host_views(folder: Path) -> int:
    """Take down the host views under ``folder`` whose folder has been deleted (a virtualenv made and
    removed since): otherwise they stay mounted until a reboot, and every bwrap start reads every
    mount the host has, once per bind it makes. A sandbox already bound to one keeps its own copy.
    Returns how many went."""
    removed = 0
    for _ in range(16):  # views may be stacked, one per earlier folder at the same path
        stale = [point for root, point in _mounts() if root.endswith("//deleted") and Path(point).parent == folder]
        if not stale:
            break
        for point in stale:
            unmount(Path(point))
            removed += 1
            with contextlib.suppress(OSError):  # busy while an older view is still stacked under it
                os.rmdir(point)
    return removed


def _mounts() -> list[tuple[str, str]]:
    """(root within its file system, mount point) of each mount, from /proc/self/mountinfo (octal
    escapes such as ``\\040`` for a space undone)."""
    try:
        with open("/proc/self/mountinfo") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    unescape = functools.partial(re.sub, r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)))
    return [(unescape(f[3]), unescape(f[4])) for f in (line.split() for line in lines) if len(f) > 4]


def _same_folder(a: Path, b: Path) -> bool:
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def site_dirs_outside(path: list[str], prefixes: list[Path]) -> list[Path]:
    """The site-packages folders on ``path`` outside ``prefixes`` and /usr: those a ``.pth`` file added
    (e.g. an environment layered on another one's packages), which the sandboxed Python needs too."""
    found: list[Path] = []
    for entry in path:
        if (
            not entry
            or Path(entry).name not in ("site-packages", "dist-packages")
            or not Path(entry).is_dir()
        ):
            continue
        p = Path(entry).resolve()
        inside = [Path("/usr"), *prefixes, *found]
        if not any(p == q or q in p.parents for q in inside):
            found.append(p)
    return found


def python_path_dirs() -> list[str]:
    return [str(Path(p) / "bin") for p in dict.fromkeys([sys.prefix, sys.base_prefix])]
