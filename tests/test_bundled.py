"""The bundled task suite: enough tasks in every tier, each proven by validation (gold resolves;
empty and tests-only patches do not), each grading in under 5 s."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from coderl.cli.main import main
from coderl.tasks import load_tasks
from coderl.tasks.native import HAND_WRITTEN
from coderl.tasks.validate import validate_tasks

pytestmark = pytest.mark.slow


def test_suite_shape() -> None:
    tasks = load_tasks("bundled")
    assert len(tasks) >= 30
    tiers = Counter(t.tier for t in tasks)
    assert set(tiers) == set(HAND_WRITTEN), tiers
    assert len({t.metadata["repo_name"] for t in tasks}) >= 3
    for t in tasks:
        assert t.fail_to_pass and t.pass_to_pass and t.gold_patch
        assert t.instruction and "gold.patch" not in t.instruction
        assert not any(
            path in t.gold_patch for path in t.hidden_tests
        )  # the fix never touches the hidden tests
    assert {t.id for t in load_tasks("bundled:warmup")} == {t.id for t in tasks if t.tier == "warmup"}


async def test_every_bundled_task_validates_and_grades_fast() -> None:
    report = await validate_tasks(load_tasks("bundled"), concurrency=2)
    assert report["failures"] == [] and report["ok"] == report["total"] >= 30
    slow = {tid: s for tid, s in report["seconds"].items() if max(s.values()) >= 5.0}
    assert not slow, slow


def test_tasks_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) >= 30 and {"id", "tier", "source"} <= set(rows[0])
    assert all(r["source"] == "bundled" for r in rows)
