"""Native task folders (and the bundled suite, which uses the same layout; see bundled/FORMAT.md).

A task folder holds ``task.yaml``, hidden tests under ``tests/``, an optional ``gold.patch`` and
either its own ``repo/`` (the starting snapshot as-is) or, as in the bundled suite, the name of a
pristine repository under ``<suite>/repos/`` from which the snapshot is made by reversing the gold
patch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from coderl.errors import TaskError
from coderl.tasks.snapshot import reverse_applied
from coderl.types import Task
from coderl.yamlio import load_yaml

TIERS = ("warmup", "easy", "medium", "hard", "synth")
HAND_WRITTEN = ("warmup", "easy", "medium", "hard")
"""The tiers ``bundled`` (with no selector) means: the hand-written suite, the held-out evaluation."""
BUNDLED_ROOT = Path(__file__).parent / "bundled"
BUNDLED_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
"""The bundled libraries' tests need no third-party pytest plugins; loading the ones installed beside
the host Python (hypothesis, asyncio, ...) took most of each test run's 1.7 s (0.3 s without)."""


def _env(value: Any, where: Path) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TaskError(f"{where}: env must map variable names to values, got {value!r}")
    return {str(k): str(v) for k, v in value.items()}


def load_native_task(folder: Path, source: str = "native", suite_env: dict[str, str] | None = None) -> Task:
    """One task folder; ``suite_env`` holds environment variables its suite sets for every task."""
    suite_env = suite_env or {}
    meta_path = folder / "task.yaml"
    try:
        meta: dict[str, Any] = load_yaml(meta_path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise TaskError(f"{meta_path}: cannot read task.yaml: {exc}") from None
    for key in ("id", "instruction", "fail_to_pass", "pass_to_pass"):
        if key not in meta:
            raise TaskError(f"{meta_path}: missing required key {key!r} (see coderl/tasks/bundled/FORMAT.md)")
    tier = str(meta.get("tier", ""))
    if tier and tier not in TIERS:
        raise TaskError(f"{meta_path}: tier {tier!r} is not one of {', '.join(TIERS)}")
    gold = (folder / "gold.patch").read_text() if (folder / "gold.patch").is_file() else None
    hidden = {
        str(p.relative_to(folder)): p.read_text()
        for p in sorted((folder / "tests").rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
    withheld = [str(w) for w in meta.get("withheld") or []]
    if (folder / "repo").is_dir():
        if withheld:
            raise TaskError(
                f"{meta_path}: withheld names files of a shared pristine repo; this task has its own repo/"
            )
        repo = folder / "repo"
        if not hidden:
            raise TaskError(f"{folder}: no hidden tests under tests/")
        leaked = sorted(path for path in hidden if (repo / path).exists())
        if leaked:
            raise TaskError(
                f"{folder}: the snapshot repo/ holds hidden tests {leaked}; remove them from repo/"
            )
    else:
        name = str(meta.get("repo", ""))
        pristine = folder.parent.parent / "repos" / name
        if not name or not pristine.is_dir():
            raise TaskError(
                f"{meta_path}: repo {name!r} is neither ./repo nor a folder under {pristine.parent}"
            )
        if gold is None:
            raise TaskError(
                f"{folder}: a task on a shared pristine repo needs gold.patch to make its snapshot"
            )
        for path in withheld:  # the pristine repo's own tests that catch this bug: hidden from the agent
            if not (pristine / path).is_file():
                raise TaskError(f"{meta_path}: withheld file {path!r} is not in {pristine}")
            hidden[path] = (pristine / path).read_text()
        if not hidden:
            raise TaskError(f"{folder}: no hidden tests (tests/ or withheld)")
        # the snapshot never holds a hidden test: withheld files are removed from it
        repo = reverse_applied(pristine, gold, str(meta["id"]), remove=sorted(hidden))
    return Task(
        id=str(meta["id"]),
        instruction=str(meta["instruction"]).strip(),
        repo=repo,
        fail_to_pass=[str(t) for t in meta["fail_to_pass"]],
        pass_to_pass=[str(t) for t in meta["pass_to_pass"]],
        hidden_tests=hidden,
        gold_patch=gold,
        tier=tier,
        source=source,
        workdir=str(meta.get("workdir", "/workspace")),
        test_command=meta.get("test_command"),
        timeout_s=float(meta.get("timeout_s", 120.0)),
        env={**suite_env, **_env(meta.get("env"), meta_path)},
        metadata={**(meta.get("metadata") or {}), "repo_name": meta.get("repo", "")},
    )


def load_native_folder(
    folder: Path, source: str = "native", suite_env: dict[str, str] | None = None
) -> list[Task]:
    """One task folder, or a suite folder holding task folders (directly or under tasks/)."""
    if (folder / "task.yaml").is_file():
        return [load_native_task(folder, source, suite_env)]
    root = folder / "tasks" if (folder / "tasks").is_dir() else folder
    dirs = sorted(p for p in root.iterdir() if (p / "task.yaml").is_file())
    if not dirs:
        raise TaskError(f"{folder}: no task folders (each needs a task.yaml)")
    return [load_native_task(d, source, suite_env) for d in dirs]


def load_bundled(selector: str = "") -> list[Task]:
    """The bundled suite; ``selector`` is empty (the hand-written tiers), tiers (``warmup,easy``,
    ``synth``) or task ids."""
    tasks = (
        load_native_folder(BUNDLED_ROOT, source="bundled", suite_env=BUNDLED_ENV)
        if (BUNDLED_ROOT / "tasks").is_dir()
        else []
    )
    if not selector:
        return [t for t in tasks if t.tier in HAND_WRITTEN]
    wanted = {s.strip() for s in selector.split(",") if s.strip()}
    unknown = wanted - set(TIERS) - {t.id for t in tasks}
    if unknown:
        raise TaskError(f"bundled: unknown tier or task id {sorted(unknown)}; tiers are {', '.join(TIERS)}")
    return [t for t in tasks if t.tier in wanted or t.id in wanted]
