"""Training checkpoints: ``<run>/checkpoints/step-NNNNNN/`` = the actor's state + ``trainer.json``.

A checkpoint is written into a hidden temporary folder and renamed into place only when complete,
so a kill -9 at any moment leaves either the previous checkpoints or the new one, never half of one.
``--resume`` continues from the newest complete checkpoint; metric rows of steps after it (work that
was lost with the process) are dropped from ``metrics.jsonl`` so every step appears once.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

_PREFIX = "step-"


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"{_PREFIX}{step:06d}"


def begin(run_dir: Path, step: int) -> Path:
    """A fresh temporary folder to write the checkpoint of ``step`` into."""
    tmp = run_dir / "checkpoints" / f".{_PREFIX}{step:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def commit(run_dir: Path, tmp: Path, step: int, state: dict[str, Any], keep: int) -> Path:
    """Write ``trainer.json`` last, rename the folder into place, and prune old checkpoints."""
    with (tmp / "trainer.json").open("w") as fh:
        json.dump(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    final = checkpoint_dir(run_dir, step)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in complete(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def complete(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.startswith(_PREFIX) and (p / "trainer.json").is_file()]
    return sorted(found, key=lambda p: p.name)


def latest(run_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest complete checkpoint and its trainer state, or None."""
    done = complete(run_dir)
    if not done:
        return None
    return done[-1], json.loads((done[-1] / "trainer.json").read_text())


def truncate_metrics(path: Path, last_step: int) -> int:
    """Keep only rows with ``step <= last_step`` (and whole lines); returns how many were dropped."""
    if not path.is_file():
        return 0
    kept: list[str] = []
    dropped = 0
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line cut by the kill
            dropped += 1
            continue
        if int(row.get("step", 0)) <= last_step:
            kept.append(line)
        else:
            dropped += 1
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    tmp.replace(path)
    return dropped


def restore_row(path: Path, row: dict[str, Any] | None) -> bool:
    """Append a checkpoint's own metrics row when the kill came before it reached ``metrics.jsonl``."""
    if row is None or any(r.get("step") == row.get("step") for r in read_metrics(path)):
        return False
    with path.open("a") as fh:
        fh.write(json.dumps(row) + "\n")
    return True


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every complete row of a metrics.jsonl file."""
    rows: list[dict[str, Any]] = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows
