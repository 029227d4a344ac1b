"""A folder as bytes and back: how checkpoints and adapters cross a Ray cluster without a shared disk
(put once into the object store, written on each node that needs them)."""

from __future__ import annotations

from pathlib import Path


def read_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``: relative path -> bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def write_files(folder: Path, files: dict[str, bytes]) -> None:
    """``files`` (relative path -> bytes) written under ``folder``."""
    for rel, data in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
