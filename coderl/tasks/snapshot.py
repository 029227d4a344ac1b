"""Materialised repository snapshots, cached by content under the coderl cache folder."""

from __future__ import annotations

import functools
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from coderl.checkpoint import cache_root
from coderl.errors import TaskError


def tree_digest(folder: Path) -> str:
    """A content hash of a folder (paths and bytes, sorted)."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(folder)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def snapshot_dir(key: str) -> Path:
    return cache_root() / "snapshots" / key


def materialised(key: str, build: Callable[[Path], None]) -> Path:
    """The snapshot folder ``key`` names, made once (:func:`materialised_at`)."""
    return materialised_at(snapshot_dir(key), build)


def materialised_at(target: Path, build: Callable[[Path], None]) -> Path:
    """The folder ``target``, made once: ``build(folder)`` fills a fresh folder beside it, which is then
    renamed into place (a reader never sees half of one; when two processes build the same folder, the
    first rename wins and the other's copy goes)."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".snap-", dir=target.parent))
    try:
        build(tmp / "repo")
        try:
            os.rename(tmp / "repo", target)
        except OSError:  # another process made it first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


@functools.lru_cache(maxsize=64)
def _pristine_digest(folder: str) -> str:
    """tree_digest of a pristine repository, once per process (hundreds of tasks share one)."""
    return tree_digest(Path(folder))


def reverse_applied(pristine: Path, patch: str, task_id: str, remove: list[str] | None = None) -> Path:
    """The pristine repository with ``patch`` applied in reverse (the buggy starting point) and the
    files ``remove`` deleted (tests withheld from the agent), cached by content."""
    remove = remove or []
    key = hashlib.sha256(
        (_pristine_digest(str(pristine.resolve())) + patch + "\0".join(remove)).encode()
    ).hexdigest()[:20]

    def build(repo: Path) -> None:
        shutil.copytree(pristine, repo, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        r = subprocess.run(
            ["git", "apply", "-R", "--whitespace=nowarn", "-"], input=patch.encode(), cwd=repo, capture_output=True
        )
        if r.returncode != 0:
            raise TaskError(
                f"task {task_id}: its gold patch does not reverse-apply to the pristine repo: {r.stderr.decode()[-500:]}"
            )
        for rel in remove:
            (repo / rel).unlink(missing_ok=True)

    return materialised(f"{task_id}-{key}", build)


def pack_folder(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for entry in sorted(folder.iterdir()):
            tf.add(entry, arcname=entry.name, filter=lambda ti: None if "__pycache__" in ti.name else ti)
    return buf.getvalue()


def unpacked(archive: bytes, task_id: str) -> Path:
    """A folder holding an embedded tar.gz snapshot (from a converted dataset), cached by content."""
    key = hashlib.sha256(archive).hexdigest()[:20]

    def build(repo: Path) -> None:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tf:
            tf.extractall(repo, filter="data")

    return materialised(f"{task_id}-{key}", build)
