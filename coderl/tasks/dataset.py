"""Tasks as a Parquet dataset: one row per task, the snapshot embedded as tar.gz bytes, so a
converted dataset is self-contained and portable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coderl.errors import TaskError
from coderl.tasks.snapshot import pack_folder, unpacked
from coderl.types import Task

COLUMNS = (
    "id", "tier", "source", "instruction", "fail_to_pass", "pass_to_pass", "hidden_tests", "test_patch",
    "gold_patch", "workdir", "test_command", "verifier", "timeout_s", "metadata", "repo_archive",
)  # fmt: skip
OPTIONAL = ("env",)
"""Columns added later: a dataset written before them still reads (with their defaults)."""


def task_row(t: Task) -> dict[str, Any]:
    """One task as a dataset row (the :data:`COLUMNS`, the snapshot as tar.gz bytes)."""
    return {
        "id": t.id,
        "tier": t.tier,
        "source": t.source,
        "instruction": t.instruction,
        "fail_to_pass": t.fail_to_pass,
        "pass_to_pass": t.pass_to_pass,
        "hidden_tests": json.dumps(t.hidden_tests),
        "test_patch": t.test_patch,
        "gold_patch": t.gold_patch,
        "workdir": t.workdir,
        "test_command": t.test_command,
        "verifier": t.verifier,
        "timeout_s": t.timeout_s,
        "metadata": json.dumps(t.metadata, default=str),
        "env": json.dumps(t.env),
        "repo_archive": pack_folder(t.repo) if t.repo.is_dir() else t.repo.read_bytes(),
    }


def _strings(value: Any) -> list[str]:
    """A list column as read: a list (pyarrow), a numpy array (pandas: ``or []`` would be ambiguous for
    two or more items) or None."""
    return [] if value is None else [str(x) for x in value]


def row_task(row: dict[str, Any]) -> Task:
    """The task of a :func:`task_row` row (its snapshot unpacked once into a cache folder)."""
    return Task(
        id=row["id"],
        instruction=row["instruction"],
        repo=unpacked(row["repo_archive"], row["id"]),
        fail_to_pass=_strings(row["fail_to_pass"]),
        pass_to_pass=_strings(row["pass_to_pass"]),
        hidden_tests=json.loads(row["hidden_tests"] or "{}"),
        test_patch=row["test_patch"],
        gold_patch=row["gold_patch"],
        tier=row["tier"] or "",
        source=row["source"] or "",
        workdir=row["workdir"],
        test_command=row["test_command"],
        verifier=row["verifier"],
        timeout_s=float(row["timeout_s"]),
        metadata=json.loads(row["metadata"] or "{}"),
        env=json.loads(row.get("env") or "{}"),
    )


def write_parquet(tasks: list[Task], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [task_row(t) for t in tasks]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def read_parquet(path: Path) -> list[Task]:
    import pyarrow.parquet as pq

    if not path.is_file():
        raise TaskError(f"task dataset {str(path)!r} does not exist")
    # no Arrow reader pool left winding down at exit (see coderl.rollout.store.read_trajectories)
    try:
        table = pq.read_table(path, use_threads=False)
    except Exception as exc:  # pyarrow's ArrowInvalid and friends: not a Parquet file
        raise TaskError(f"task dataset {str(path)!r} is not a Parquet file ({str(exc).splitlines()[0]}); "
                        "write one with 'coderl tasks convert'") from None
    missing = set(COLUMNS) - set(table.column_names)
    if missing:
        raise TaskError(
            f"{path}: not a coderl task dataset (missing columns {sorted(missing)}); convert with 'coderl tasks convert'"
        )
    return [row_task(row) for row in table.to_pylist()]
