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


class _Staggered(ScriptedEngine):
    """Each new session answers ``step_s`` later than the one before, so rollouts end one by one."""

    def __init__(self, *args: Any, step_s: float = 0.3, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._delay: dict[str | None, float] = {}
        self._step_s = step_s

    async def generate(self, prompt_ids: list[int], params: Any, session_id: str | None = None) -> Any:
        import asyncio

        delay = self._delay.setdefault(session_id, self._step_s * len(self._delay))
        await asyncio.sleep(delay)
        return await super().generate(prompt_ids, params, session_id=session_id)


class _Watched(ContextFactory):
    """Records when each agent sandbox's close starts and how many are up at once."""

    def __init__(self, *args: Any, repo: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.repo, self.up, self.most = repo, 0, 0
        self.close_starts: list[float] = []

    async def make_sandbox(self, t: Any, *, warm: bool = False) -> Any:
        import time

        sb = await super().make_sandbox(t, warm=warm)
        if t.repo == self.repo:  # the snapshot's git baseline, not an agent's
            return sb
        self.up += 1
        self.most = max(self.most, self.up)
        real_close = sb.close

        async def close() -> None:
            self.close_starts.append(time.monotonic())
            await real_close()
            self.up -= 1

        sb.close = close  # type: ignore[method-assign]
        return sb


async def test_tear_downs_wait_for_the_last_rollout_unless_a_rollout_waits_for_a_slot(
    tmp_path: Path, tokenizer: Any
) -> None:
    """A finished rollout's sandbox goes down once the call's last rollout is done (its tear-down's
    CPU would slow the rollouts still running), but at once where another rollout needs its slot."""
    import asyncio
    import time

    from coderl.rollout.teardown import Teardowns

    task = load_tasks(f"native:{make_native(tmp_path / 'tasks')}")[0]
    cfg = load_config(overrides=["rollout.agent=swe", "rollout.max_turns=4"])
    done: list[float] = []
    for slots, n in ((3, 3), (1, 3)):
        contexts = _Watched(cfg.rollout, cfg.sandbox, ChatFormat(tokenizer), repo=task.repo)
        teardowns = Teardowns()
        engine = _Staggered(FIX, tokenizer, per_session=True)
        settings = RolloutSettings(agent="swe", max_sandboxes=slots, grade=False)
        done.clear()
        results = await asyncio.wait_for(
            run_rollouts(task_groups([task], n), engine, contexts, settings,
                         on_done=lambda _: done.append(time.monotonic()), teardowns=teardowns),
            120,
        )  # fmt: skip
        assert teardowns.held == 0  # released when the call returned: they overlap the caller's work
        await teardowns.drain()
        assert all("a + b" in r.trajectory.patch for r in results) and contexts.up == 0
        assert contexts.most <= slots and len(contexts.close_starts) == n
        if slots == n:  # nobody waited: every close started after the last result
            assert min(contexts.close_starts) >= max(done)
        else:  # each waiting rollout had the previous one's sandbox taken down at once
            assert sorted(contexts.close_starts)[0] < max(done)


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


def test_a_resume_marks_the_lost_steps_rows_and_keeps_them(tmp_path: Path) -> None:
    """Rows the stopped process rolled out for steps after its checkpoint stay on disk, marked lost;
    the resumed run's rows of those steps are the trained ones. Shards and the log tail alike, a line
    cut by the kill dropped, and a second resume marked on its own."""
    from coderl.rollout.store import RESUMES, mark_lost_steps
    from coderl.train.export import trained_tasks
    from coderl.types import Trajectory

    run = tmp_path / "run"

    def add(store: TrajectoryStore, task: str, step: int) -> None:
        store.add(Trajectory(task, "g", [1, 2], [3, 4], [1, 1], [-0.1, -0.2], 0.0, 1, "submitted", ""), {"step": step})

    store = TrajectoryStore(run, shard_size=3)  # some rows in parquet shards, the rest in the log's tail
    for task, step in [("a", 1), ("a", 1), ("b", 2), ("b", 2)]:
        add(store, task, step)
    store._log.write('{"task_id": "cut')  # the kill came mid-line (no close: the process died)
    store._log.flush()
    store = TrajectoryStore(run, shard_size=3)  # the resumed run's store, then the resume from step 1
    assert mark_lost_steps(run, 1) == 2
    for task, step in [("c", 2), ("c", 2), ("d", 3)]:
        add(store, task, step)
    with (run / RESUMES).open("a") as fh:
        fh.write('{"from_step": 9, "ro')  # a mark a kill cut: ignored, and the next one is not glued to it
    assert mark_lost_steps(run, 2) == 1  # stopped again after step 2's checkpoint: step 3's row is lost
    add(store, "e", 3)
    store.close()
    assert mark_lost_steps(run, 3) == 0 and len((run / RESUMES).read_text().splitlines()) == 3

    rows = read_trajectories(run)
    assert [(r["task_id"], r["step"], bool(r.get("lost"))) for r in rows] == [
        ("a", 1, False), ("a", 1, False), ("b", 2, True), ("b", 2, True),
        ("c", 2, False), ("c", 2, False), ("d", 3, True), ("e", 3, False),
    ]  # fmt: skip
    assert trained_tasks(run, 3) == {"a", "c", "e"}  # what the steps trained on, not what they lost
