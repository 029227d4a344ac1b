"""run_rollouts: groups as the caller names them, graded and labelled in one place, stored as they
finish, and nothing left behind on disk."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from coderl.chat import ChatFormat
from coderl.config import load_config
from coderl.engine.scripted import ScriptedEngine
from coderl.rollout.context import ContextFactory
from coderl.rollout.runner import RolloutResult, RolloutSettings, run_rollouts, task_groups
from coderl.rollout.store import TrajectoryStore, read_trajectories
from coderl.tasks import load_tasks
from tests.test_agent_contract import call
from tests.test_tasks import make_native

FIX = [
    call("str_replace", path="calc.py", old="return a - b", new="return a + b"),
    call("submit"),
]


async def test_groups_graded_labelled_stored_and_baselines_removed(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the baselines go
    task = load_tasks(f"native:{make_native(tmp_path / 'tasks')}")[0]
    cfg = load_config(overrides=["rollout.agent=swe", "rollout.max_turns=4"])
    engine = ScriptedEngine(FIX, tokenizer, per_session=True)  # every rollout fixes the bug, then submits
    contexts = ContextFactory(cfg.rollout, cfg.sandbox, ChatFormat(tokenizer))
    seen_baselines: list[int] = []

    def on_done(r: RolloutResult) -> None:
        seen_baselines.append(len(list(tmp_path.glob("coderl-baselines-*"))))

    store = TrajectoryStore(tmp_path / "run")
    groups = task_groups([task, task], 2, tag="s1.")  # one task drawn twice: two groups
    results = await run_rollouts(groups, engine, contexts, RolloutSettings.from_config(cfg.rollout, cfg.tasks), store, on_done)
    store.close()
    assert [r.trajectory.group_id for r in results] == ["calc-001#s1.0"] * 2 + ["calc-001#s1.1"] * 2
    assert all(r.resolved and r.trajectory.reward == 1.0 for r in results)  # graded by the hidden tests
    assert all(r.trajectory.metrics["grade_s"] > 0 for r in results)
    assert seen_baselines == [1, 1, 1, 1]  # the snapshot's git baseline existed while rollouts ran...
    assert not list(tmp_path.glob("coderl-baselines-*"))  # ...and is gone when run_rollouts returns
    rows = read_trajectories(tmp_path / "run")
    assert len(rows) == 4 and {r["tier"] for r in rows} == {"warmup"} and all(r["resolved"] for r in rows)
    assert [r.report_row()["resolved"] for r in results] == [True] * 4


async def test_an_unknown_agent_loop_fails_once_before_any_rollout(tmp_path: Path, tokenizer: Any) -> None:
    from coderl.errors import AgentError

    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    cfg = load_config()
    contexts = ContextFactory(cfg.rollout, cfg.sandbox, ChatFormat(tokenizer))
    settings = RolloutSettings(agent="no_such_loop")
    with pytest.raises(AgentError, match="no_such_loop"):
        await run_rollouts(task_groups([task], 2), ScriptedEngine(), contexts, settings)
