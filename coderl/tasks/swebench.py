"""SWE-bench instances (JSON list, JSONL or Parquet) with repository snapshots from local disk.

Fields used: ``instance_id``, ``problem_statement``, ``patch`` (gold), ``test_patch`` (hidden tests),
``FAIL_TO_PASS`` / ``PASS_TO_PASS`` (JSON strings or lists), ``repo``, ``base_commit``, ``version``.
Nothing is fetched: the snapshot of each instance is ``<repos>/<instance_id>`` or
``<repos>/<owner>__<name>`` (a folder at ``base_commit``, or a .tar/.tar.gz/.zip of one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coderl.errors import TaskError
from coderl.types import Task

_ARCHIVES = ("", ".tar.gz", ".tgz", ".tar", ".zip")


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise TaskError(f"SWE-bench file {str(path)!r} does not exist")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.read_table(path, use_threads=False).to_pylist())  # see rollout.store's read
    text = path.read_text()
    if path.suffix == ".jsonl":
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise TaskError(f"{path}: line {exc.lineno} is not JSON: {exc.msg}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return data if isinstance(data, list) else [data]


def _test_ids(value: Any, field: str, instance: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise TaskError(
                f"instance {instance}: {field} is neither a list nor a JSON list: {value[:100]!r}"
            ) from None
    if not isinstance(value, list):
        raise TaskError(
            f"instance {instance}: {field} must be a list of test ids, got {type(value).__name__}"
        )
    return [str(v) for v in value]


def find_snapshot(repos: Path, record: dict[str, Any]) -> Path:
    names = [str(record["instance_id"])]
    if record.get("repo"):
        names.append(str(record["repo"]).replace("/", "__"))
    for name in names:
        for ext in _ARCHIVES:
            candidate = repos / f"{name}{ext}"
            if candidate.exists():
                return candidate
    raise TaskError(
        f"instance {record['instance_id']}: no repository snapshot in {repos} (looked for "
        f"{names[0]}/, {names[0]}.tar.gz, ...); check out {record.get('repo', '?')} at "
        f"{record.get('base_commit', '?')} there — nothing is fetched at run time"
    )


def load_swebench(path: Path, repos: Path | None, test_command: str | None = None) -> list[Task]:
    tasks = []
    for record in read_records(path):
        if "instance_id" not in record or "problem_statement" not in record:
            raise TaskError(
                f"{path}: a record lacks instance_id / problem_statement (is this SWE-bench data?)"
            )
        iid = str(record["instance_id"])
        if repos is None:
            raise TaskError(
                f"{path}: SWE-bench tasks need a folder of repository snapshots: swebench:{path}?repos=DIR"
            )
        tasks.append(
            Task(
                id=iid,
                instruction=str(record["problem_statement"]).strip(),
                repo=find_snapshot(repos, record),
                fail_to_pass=_test_ids(record.get("FAIL_TO_PASS", []), "FAIL_TO_PASS", iid),
                pass_to_pass=_test_ids(record.get("PASS_TO_PASS", []), "PASS_TO_PASS", iid),
                test_patch=record.get("test_patch") or None,
                gold_patch=record.get("patch") or None,
                tier=str(record.get("difficulty", "")),
                source="swebench",
                workdir="/testbed",
                test_command=test_command,
                metadata={
                    k: record.get(k) for k in ("repo", "base_commit", "version", "created_at") if k in record
                },
            )
        )
    return tasks
