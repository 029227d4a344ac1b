"""File operations on a sandbox workspace from the host side, safe against hostile contents.

The workspace may hold anything the untrusted code left there: symlinks to host files, odd modes,
huge files. Every path is resolved with symlinks followed and must stay inside the workspace; links
are never followed out of it. Callers hold the sandbox's lock, so no sandboxed process runs (and can
swap a path) while these run.
"""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

from coderl.errors import SandboxError


class HostWorkspace:
    """A workspace folder on the host whose files belong to ``uid``/``gid`` (None = leave owner)."""

    def __init__(self, root: Path, uid: int | None = None, gid: int | None = None) -> None:
        self.root = root
        self.uid = uid
        self.gid = gid

    def resolve(self, rel: str, must_exist: bool = True) -> Path:
        """Host path of workspace-relative ``rel``, symlinks resolved; refuses anything outside."""
        root = self.root.resolve()
        target = (root / rel).resolve(strict=False)
        if target != root and root not in target.parents:
            raise SandboxError(
                f"path {rel!r} resolves outside the workspace (through a symlink or '..'); refused"
            )
        if must_exist and not target.exists():
            raise SandboxError(f"no such file in the sandbox workspace: {rel!r}")
        return target

    def read(self, rel: str, limit: int) -> bytes:
        path = self.resolve(rel)
        if not path.is_file():
            raise SandboxError(f"{rel!r} is not a regular file in the workspace")
        size = path.stat().st_size
        if size > limit:
            raise SandboxError(f"{rel!r} is {size} bytes, over the {limit}-byte read limit")
        return path.read_bytes()

    def write(self, rel: str, data: bytes) -> None:
        if not rel:
            raise SandboxError("write_file needs a file path, not the workspace root")
        parent = self.resolve(os.path.dirname(rel), must_exist=False)
        self._makedirs(parent)
        path = parent / os.path.basename(rel)
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise SandboxError(f"{rel!r} exists and is not a regular file; refusing to write through it")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        self._own(path)

    def upload(self, source: Path, rel: str) -> None:
        """Copy a folder's contents (or one archive / file) into the workspace at ``rel``."""
        dest = self.resolve(rel, must_exist=False)
        self._makedirs(dest)
        if source.is_dir():
            if _is_empty(dest):  # a sandbox's first fill: nothing to replace, owned as it is copied
                self._copy_fresh(str(source), str(dest))
                self._own(dest)
                return
            self._copy_into(source, dest)
        elif source.is_file() and _is_archive(source):
            extract_archive(source, dest)
        elif source.is_file():
            shutil.copy2(source, dest / source.name)
        else:
            raise SandboxError(f"upload source {str(source)!r} does not exist")
        self.own_tree(dest)

    def download(self, rel: str, local: Path) -> list[str]:
        """Copy out ``rel``; links that resolve outside the workspace are skipped and reported."""
        src = self.resolve(rel)
        local.mkdir(parents=True, exist_ok=True)
        skipped: list[str] = []
        if src.is_file():
            shutil.copy2(src, local / src.name)
            return skipped
        root = self.root.resolve()
        for dirpath, dirnames, filenames in os.walk(src):
            here = Path(dirpath)
            out_dir = local / here.relative_to(src)
            out_dir.mkdir(parents=True, exist_ok=True)
            for name in [*dirnames, *filenames]:
                entry = here / name
                if entry.is_symlink():
                    target = entry.resolve()
                    if target != root and root not in target.parents:
                        skipped.append(str(entry.relative_to(root)))
                    else:
                        os.symlink(os.path.relpath(target, entry.parent), out_dir / name)
                    if name in dirnames:
                        dirnames.remove(name)  # os.walk does not follow links; be explicit
                elif name in filenames and entry.is_file():
                    shutil.copy2(entry, out_dir / name)
                elif name in filenames:
                    skipped.append(str(entry.relative_to(root)))  # fifo, socket, device: not copied
        return skipped

    def _copy_into(self, source: Path, dest: Path) -> None:
        """Copy a local folder into ``dest``; links already in the workspace are replaced, never
        written through, and local links are copied as links (never followed on the host)."""
        for entry in source.iterdir():
            target = dest / entry.name
            if target.is_symlink() or (target.exists() and not target.is_dir() and entry.is_dir()):
                target.unlink()
            if entry.is_symlink():
                if target.is_dir():
                    shutil.rmtree(target)
                os.symlink(os.readlink(entry), target)
            elif entry.is_dir():
                target.mkdir(exist_ok=True)
                self._copy_into(entry, target)
            elif entry.is_file():
                if target.is_dir():
                    shutil.rmtree(target)
                shutil.copy2(entry, target)

    def _copy_fresh(self, source: str, dest: str) -> None:
        """:meth:`_copy_into` for an empty ``dest``, in one pass over ``os.scandir`` (hundreds of
        sandboxes fill at once, and this runs under the GIL): links copied as links, folders and
        regular files copied, anything else skipped, each entry owned as it is made."""
        with os.scandir(source) as entries:
            for entry in entries:
                target = os.path.join(dest, entry.name)
                if entry.is_symlink():
                    os.symlink(os.readlink(entry.path), target)
                elif entry.is_dir(follow_symlinks=False):
                    os.mkdir(target)
                    self._copy_fresh(entry.path, target)
                elif entry.is_file(follow_symlinks=False):
                    shutil.copy2(entry.path, target, follow_symlinks=False)
                else:
                    continue
                self._own(target)

    def own_tree(self, top: Path) -> None:
        if self.uid is None:
            return
        self._own(top)
        for dirpath, dirnames, filenames in os.walk(top):
            for name in [*dirnames, *filenames]:
                self._own(Path(dirpath) / name)

    def _makedirs(self, path: Path) -> None:
        missing = []
        p = path
        while not p.exists():
            missing.append(p)
            p = p.parent
        path.mkdir(parents=True, exist_ok=True)
        for d in missing:
            self._own(d)

    def _own(self, path: str | Path) -> None:
        if self.uid is not None:
            os.lchown(path, self.uid, self.gid if self.gid is not None else self.uid)


def _is_archive(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip"))


def extract_archive(archive: Path, dest: Path) -> None:
    """Extract a tar or zip archive into ``dest``, refusing members that would land outside it."""
    dest_resolved = dest.resolve()
    if archive.name.lower().endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                _check_member(info.filename, dest_resolved, archive)
            zf.extractall(dest)
        return
    with tarfile.open(archive) as tf:
        for member in tf.getmembers():
            _check_member(member.name, dest_resolved, archive)
            if member.isdev() or (member.mode & (stat.S_ISUID | stat.S_ISGID)):
                raise SandboxError(
                    f"archive {archive.name} has a device or setuid member {member.name!r}; refused"
                )
        tf.extractall(dest, filter="data")


def _check_member(name: str, dest: Path, archive: Path) -> None:
    target = (dest / name).resolve()
    if target != dest and dest not in target.parents:
        raise SandboxError(
            f"archive {archive.name} member {name!r} would be written outside the workspace; refused"
        )


def _is_empty(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return next(entries, None) is None
