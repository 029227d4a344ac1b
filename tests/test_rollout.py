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


async def test_sandboxes_go_down_after_the_results_are_back_and_the_next_call_waits_for_them(
    tmp_path: Path, tokenizer: Any
) -> None:
    import asyncio

    from coderl.rollout.teardown import Teardowns
    from coderl.sandbox import Sandbox
    from coderl.types import Task

    task = load_tasks(f"native:{make_native(tmp_path / 'tasks')}")[0]
    cfg = load_config(overrides=["rollout.agent=swe", "rollout.max_turns=4"])
    release = asyncio.Event()
    closed: list[Sandbox] = []

    class HeldClose(ContextFactory):
        """The agents' sandboxes close only once the test says so (not the one that records the
        snapshot's git baseline: the agents' wait for it)."""

        async def make_sandbox(self, t: Task, *, warm: bool = False) -> Sandbox:
            sb = await super().make_sandbox(t, warm=warm)
            if t.repo == task.repo:
                return sb
            real_close = sb.close

            async def held() -> None:
                await release.wait()
                await real_close()
                closed.append(sb)

            sb.close = held  # type: ignore[method-assign]
            return sb

    contexts = HeldClose(cfg.rollout, cfg.sandbox, ChatFormat(tokenizer))
    settings = RolloutSettings(agent="swe", max_sandboxes=2, grade=True)
    teardowns = Teardowns()
    engine = ScriptedEngine(FIX, tokenizer, per_session=True)
    results = await asyncio.wait_for(
        run_rollouts(task_groups([task], 2), engine, contexts, settings, teardowns=teardowns), 120
    )
    assert [r.resolved for r in results] == [True, True]  # graded, patches in, while their sandboxes stay up
    assert teardowns.pending == 2 and not closed

    # the next call (bounds of its own) first waits for those tear-downs: nothing of it starts meanwhile
    again = asyncio.ensure_future(
        run_rollouts(task_groups([task], 1), engine, contexts, settings, teardowns=teardowns)
    )
    await asyncio.sleep(0.5)
    assert not again.done() and len(engine.calls) == 2 * len(FIX)
    release.set()
    (r,) = await asyncio.wait_for(again, 120)
    assert r.resolved and len(closed) >= 2
    await teardowns.drain()
    assert teardowns.pending == 0 and len(closed) == 3  # every sandbox went down, none left behind


async def test_a_failing_tear_down_is_logged_and_frees_the_slot(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from coderl.rollout.teardown import Teardowns

    freed: list[int] = []

    async def broken() -> None:
        raise OSError("umount failed")

    async def fine() -> None:
        await asyncio.sleep(0)

    teardowns = Teardowns()
    teardowns.defer([broken(), fine()], then=lambda: freed.append(1))
    await teardowns.drain()
    assert freed == [1] and teardowns.pending == 0 and "umount failed" in caplog.text
