"""Writing a kept mutant out as a native task folder (``task.yaml`` and ``gold.patch``), and the
suite's pristine copy of the repository the tasks point at."""

from __future__ import annotations

import difflib
import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from coderl.errors import TaskError
from coderl.tasks.junit import JUnitCase
from coderl.tasks.synth.issue import bug_in
from coderl.tasks.synth.mutate import Mutation
from coderl.tasks.synth.suite import LENIENT
from coderl.yamlio import load_yaml

_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".pytest_cache", ".coderl-*", ".mypy_cache")


LENIENT_COMMAND = (
    "python -m pytest -p no:cacheprovider -q -o junit_family=xunit1 --continue-on-collection-errors "
    f"{LENIENT} --junitxml={{{{junit}}}} {{files}}"
)
"""A task's grading command when its project's pytest settings had to be emptied (``SuiteRunner.lenient``)."""


@dataclass
class Kept:
    mutation: Mutation
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    withheld: list[str]
    failures: list[JUnitCase]
    order: int
    """The mutant's place in the seeded order: the kept tasks are the first ``n`` caught in it."""
    instruction: str
    """Its issue text (:func:`coderl.tasks.synth.issue.issue_text`), written once when it is caught."""


def protected_lines(tasks_dir: Path, repo_name: str, tier: str) -> dict[str, set[int]]:
    """Lines of the pristine repository that other tasks of the suite (not of ``tier``) fix: path ->
    the line numbers their gold patches change, with one line of margin on each side."""
    lines: dict[str, set[int]] = {}
    for meta_path in sorted(tasks_dir.glob("*/task.yaml")) if tasks_dir.is_dir() else []:
        meta = load_yaml(meta_path.read_text()) or {}
        gold = meta_path.parent / "gold.patch"
        if meta.get("repo") != repo_name or meta.get("tier") == tier or not gold.is_file():
            continue
        path, new_line = "", 0
        for row in gold.read_text().splitlines():
            if row.startswith("+++ "):
                path = row[4:].removeprefix("b/").strip()
            elif m := re.match(r"@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@", row):
                new_line = int(m.group(1))
            elif row.startswith("+") and path:
                lines.setdefault(path, set()).update((new_line - 1, new_line, new_line + 1))
                new_line += 1
            elif row.startswith("-") and path and not row.startswith("--- "):
                lines.setdefault(path, set()).update((new_line - 1, new_line))  # removed before new_line
            elif row.startswith(" "):
                new_line += 1
    return lines


def gold_patch(path: str, mutant: str, pristine: str) -> str:
    """The fix in git's diff format: the mutated file back to the pristine one."""
    body = difflib.unified_diff(
        mutant.splitlines(keepends=True), pristine.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=3
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def pristine_copy(repo: Path, dest: Path) -> Path:
    """``repo`` copied to the suite's ``repos/<name>`` (reused when already there with the same files)."""
    if dest.exists():
        if dest.resolve() == repo or _digest(dest) == _digest(repo):
            return dest
        raise TaskError(f"{dest} already holds a different repository; pick another OUT_DIR or remove it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(repo, dest, ignore=_IGNORE)
    return dest


def _digest(folder: Path) -> str:
    """A content hash of the files a pristine copy keeps (no VCS data or caches)."""
    h = hashlib.sha256()
    skip = {".git", "__pycache__", ".pytest_cache", ".mypy_cache"}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder)
        if skip & set(rel.parts) or path.suffix == ".pyc" or any(x.startswith(".coderl-") for x in rel.parts):
            continue
        h.update(str(rel).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def remove_tasks(tasks_dir: Path, repo_name: str, tier: str) -> None:
    """Earlier synthesised tasks of this repository and tier (a new run replaces them)."""
    for meta_path in sorted(tasks_dir.glob(f"{repo_name}-s*/task.yaml")) if tasks_dir.is_dir() else []:
        meta = load_yaml(meta_path.read_text()) or {}
        if meta.get("repo") == repo_name and meta.get("tier") == tier:
            shutil.rmtree(meta_path.parent)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the issue text) as YAML literal blocks, readable in the task folder."""


_BlockDumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    ),
)


def write_task(
    tasks_dir: Path,
    name: str,
    number: int,
    kept: Kept,
    pristine: Path,
    env: dict[str, str],
    *,
    tier: str,
    seed: int,
    timeout_s: float,
    lenient: bool = False,
) -> str:
    """Write ``kept`` as the task ``<name>-sNNN`` under ``tasks_dir``; its id. ``timeout_s`` is the
    suite's limit (a task gets it at grading when above the 120 s default); ``lenient``: the project's
    pytest settings had to be emptied, so the task's test command empties them too."""
    m = kept.mutation
    task_id = f"{name}-s{number:03d}"
    folder = tasks_dir / task_id
    folder.mkdir(parents=True, exist_ok=True)
    source = (pristine / m.path).read_text()
    (folder / "gold.patch").write_text(gold_patch(m.path, m.apply(source), source))
    instruction = kept.instruction
    meta = {
        "id": task_id,
        "tier": tier,
        "repo": name,
        "instruction": instruction,
        "fail_to_pass": kept.fail_to_pass,
        "pass_to_pass": kept.pass_to_pass,
        "withheld": kept.withheld,
        "env": env,
        **({"test_command": LENIENT_COMMAND.format(files=" ".join(kept.withheld))} if lenient else {}),
        # a suite that needed a longer --timeout gets it at grading too (tasks default to 120 s)
        **({"timeout_s": timeout_s} if timeout_s > 120 else {}),
        "metadata": {
            "synth": {
                "kind": m.kind,
                "path": m.path,
                "line": m.line,
                "function": m.function,
                "bug_in": bug_in(instruction, m.function),
                "seed": seed,
            }
        },
    }
    (folder / "task.yaml").write_text(yaml.dump(meta, Dumper=_BlockDumper, sort_keys=False, width=110))
    return task_id
