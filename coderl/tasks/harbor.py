"""Harbor task folders: ``task.toml``, ``instruction.md``, ``environment/``, ``tests/test.sh``,
``solution/solve.sh``.

Grading follows Harbor's verifier: the task's ``tests/`` are placed at ``/tests`` only at grading
time and ``bash /tests/test.sh`` writes ``/logs/verifier/reward.txt`` (a number) or ``reward.json``.
With the bwrap backend the workspace is ``environment/`` without its Dockerfile, at the Dockerfile's
last ``WORKDIR`` (default ``/app``); the Dockerfile's RUN steps are not executed, so tasks that need
system packages should use the docker backend.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

from coderl.errors import TaskError
from coderl.tasks.snapshot import materialised, tree_digest
from coderl.types import Task


def _workdir(environment: Path) -> str:
    dockerfile = environment / "Dockerfile"
    if dockerfile.is_file():
        found = re.findall(r"^\s*WORKDIR\s+(\S+)", dockerfile.read_text(), re.M | re.I)
        if found:
            return found[-1]
    return "/app"


def _workspace(folder: Path, task_id: str) -> Path:
    env = folder / "environment"

    def build(repo: Path) -> None:
        if env.is_dir():
            shutil.copytree(env, repo, ignore=shutil.ignore_patterns("Dockerfile", "docker-compose*.y*ml"))
        else:
            repo.mkdir()

    return materialised(f"harbor-{task_id}-{tree_digest(env)[:16] if env.is_dir() else 'empty'}", build)


def load_harbor_task(folder: Path) -> Task:
    for required in ("instruction.md", "tests/test.sh"):
        if not (folder / required).is_file():
            raise TaskError(f"{folder}: not a Harbor task (missing {required})")
    meta = {}
    if (folder / "task.toml").is_file():
        try:
            meta = tomllib.loads((folder / "task.toml").read_text())
        except tomllib.TOMLDecodeError as exc:
            raise TaskError(f"{folder / 'task.toml'}: {exc}") from None
    task_id = folder.name
    hidden = {
        str(p.relative_to(folder)): p.read_text(errors="replace")
        for p in sorted((folder / "tests").rglob("*"))
        if p.is_file()
    }
    solve = folder / "solution" / "solve.sh"
    metadata = dict(meta.get("metadata", {}))
    if solve.is_file():
        metadata["solution_script"] = solve.read_text()
    return Task(
        id=task_id,
        instruction=(folder / "instruction.md").read_text().strip(),
        repo=_workspace(folder, task_id),
        fail_to_pass=[],
        pass_to_pass=[],
        hidden_tests=hidden,
        tier=str(metadata.get("difficulty", "")),
        source="harbor",
        workdir=_workdir(folder / "environment"),
        verifier="harbor",
        timeout_s=float(meta.get("verifier", {}).get("timeout_sec", 120.0)),
        metadata=metadata,
    )


def load_harbor(folder: Path) -> list[Task]:
    """One Harbor task folder, or a folder of them."""
    if (folder / "instruction.md").is_file():
        return [load_harbor_task(folder)]
    dirs = sorted(p for p in folder.iterdir() if (p / "instruction.md").is_file())
    if not dirs:
        raise TaskError(f"{folder}: no Harbor task folders (each needs instruction.md and tests/test.sh)")
    return [load_harbor_task(d) for d in dirs]
