"""Asynchronous training's parts: the producer that keeps groups rolling out ahead of the update, the
staleness rule, per-token policy versions, the engine idle clock and the ledger's per-trajectory
forgetting. (`coderl train train.mode=async` end to end is in test_train_e2e.py.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from coderl.agents.trajectory import TrajectoryBuilder
from coderl.config import load_config
from coderl.engine.params import SamplingParams
from coderl.engine.scripted import ScriptedEngine
from coderl.errors import ConfigError
from coderl.proxy.merge import CallTokens, merge_calls
from coderl.rollout.runner import RolloutGroup, RolloutResult
from coderl.train.idle import IdleClock
from coderl.train.ledger import SampledLedger
from coderl.train.producer import RolloutProducer, lag, lag_counts, stale_groups
from coderl.types import Completion, Task, Trajectory

TASK = Task(id="t", instruction="", repo=Path("."), fail_to_pass=[], pass_to_pass=[])


def _result(group: str, versions: list[int], parts: list[list[int]] = ()) -> RolloutResult:  # type: ignore[assignment]
    traj = Trajectory(task_id="t", group_id=group, prompt_ids=[1], policy_version=min(versions))
    traj.parts = [Trajectory(task_id="t", group_id=group, prompt_ids=[2], policy_version=min(p)) for p in parts]
    return RolloutResult(traj, False, None)


class Rolls:
    """A roll function whose groups finish when the test says so."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.drawn = 0
        self.at_once = False  # every group finishes as soon as it starts

    def draw(self, n: int) -> list[RolloutGroup]:
        groups = [RolloutGroup(TASK, f"g{self.drawn + i}", 2) for i in range(n)]
        self.drawn += n
        return groups

    async def roll(self, group: RolloutGroup) -> list[RolloutResult]:
        gate = self.gates.setdefault(group.group_id, asyncio.Event())
        if not self.at_once:
            await gate.wait()
        if group.group_id == "boom":
            raise RuntimeError("a bug in the roll function")
        return [_result(group.group_id, [0]) for _ in range(group.size)]

    def finish(self, *names: str) -> None:
        for name in names:
            self.gates.setdefault(name, asyncio.Event()).set()


async def test_the_producer_keeps_ahead_groups_in_flight_and_hands_them_out_as_they_finish() -> None:
    rolls = Rolls()
    producer = RolloutProducer(rolls.draw, rolls.roll, ahead=3)
    producer.start()
    await asyncio.sleep(0)
    assert producer.in_flight == 3 and rolls.drawn == 3
    rolls.finish("g2", "g0")  # out of order: handed out in the order they finish
    taken = await producer.take(2)
    assert [g[0].trajectory.group_id for g in taken] == ["g2", "g0"]
    await asyncio.sleep(0)
    assert producer.in_flight == 3 and rolls.drawn == 5  # two fresh groups took their place at once
    waiting = asyncio.create_task(producer.take(1))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # the trainer waits (and the wait is clocked) until one finishes
    rolls.finish("g1")
    assert [g[0].trajectory.group_id for g in await waiting] == ["g1"]
    assert producer.waited_s >= 0.04
    rolls.finish("g3", "g4", "g5")
    rolls.at_once = True
    assert len(await producer.take(5)) == 5  # more than are ahead: more are started as needed
    await producer.stop()
    assert producer.in_flight == 0


async def test_pending_names_the_tasks_drawn_and_not_taken_for_a_checkpoint() -> None:
    rolls = Rolls()

    def draw(n: int) -> list[RolloutGroup]:  # group gK of task tK
        groups = [
            RolloutGroup(Task(id=f"t{k}", instruction="", repo=Path("."), fail_to_pass=[], pass_to_pass=[]), f"g{k}", 1)
            for k in range(rolls.drawn, rolls.drawn + n)
        ]
        rolls.drawn += n
        return groups

    producer = RolloutProducer(draw, rolls.roll, ahead=3)
    producer.start()
    assert producer.pending() == ["t0", "t1", "t2"]
    rolls.finish("g1")
    await producer.take(1)  # g1 is trained on; g0 and g2 still roll out, g3 took g1's place
    rolls.finish("g2")
    await asyncio.sleep(0)  # g2 finished and waits to be taken: still pending
    assert producer.pending() == ["t0", "t2", "t3"]
    await producer.stop()


async def test_an_exception_out_of_a_roll_reaches_the_trainer() -> None:
    rolls = Rolls()
    names = iter(["boom"])
    producer = RolloutProducer(lambda n: [RolloutGroup(TASK, next(names), 1) for _ in range(n)], rolls.roll, ahead=1)
    producer.start()
    rolls.finish("boom")
    with pytest.raises(RuntimeError, match="a bug in the roll function"):
        await producer.take(1)
    with pytest.raises(ValueError, match="ahead: got 0"):
        RolloutProducer(rolls.draw, rolls.roll, ahead=0)


def test_a_group_is_stale_when_any_sequence_of_any_sample_is_too_old() -> None:
    fresh = [_result("a", [3]), _result("a", [2])]
    old_part = [_result("b", [3]), _result("b", [3], parts=[[1]])]  # a part sampled by version 1
    old = [_result("c", [1]), _result("c", [3])]
    kept, dropped = stale_groups([fresh, old_part, old], version=3, max_staleness=1)
    assert kept == [fresh] and dropped == [old_part, old]
    assert lag(old_part[1], 3) == 2 and lag(fresh[1], 3) == 1
    assert lag_counts([*fresh, *old], 3) == {"0": 2, "1": 1, "2": 1}
    kept, dropped = stale_groups([fresh, old_part, old], version=3, max_staleness=2)
    assert len(kept) == 3 and not dropped


def test_the_async_settings_are_checked() -> None:
    cfg = load_config(overrides=["train.mode=async", "train.max_staleness=2"])
    assert cfg.train.mode == "async" and cfg.train.max_staleness == 2
    with pytest.raises(ConfigError, match="max_staleness"):
        load_config(overrides=["train.mode=async", "train.max_staleness=0"])
    with pytest.raises(ConfigError, match=r"train\.mode"):
        load_config(overrides=["train.mode=later"])


async def test_every_token_keeps_the_version_that_sampled_it() -> None:
    engine = ScriptedEngine(version=4)
    b = TrajectoryBuilder("t", "g", [5, 6])
    params = SamplingParams(max_tokens=3)
    await b.sample(engine, params, session_id=None)
    b.add_env([7, 7])
    engine.version = 5  # a weight update between two turns of one rollout
    await b.sample(engine, params, session_id=None)
    traj = b.finish("submitted")
    assert traj.token_versions == [4, 4, 4, -1, -1, 5, 5, 5] and traj.policy_version == 4
    assert len(traj.token_versions) == len(traj.response_ids)
    traj.label(version_offset=10)  # the engine's counter -> the run's: environment tokens stay -1
    assert traj.token_versions == [14, 14, 14, -1, -1, 15, 15, 15] and traj.policy_version == 14

    interrupted = Completion([1, 2, 3], [-0.1, -0.2, -0.3], "stop", policy_version=6, token_versions=[6, 7, 7])
    b.add_model(interrupted)  # an update interrupted this call (engine.update_mode=interrupt)
    assert traj.token_versions[-3:] == [6, 7, 7]

    merged = merge_calls(
        [CallTokens(1, [1, 2], [3, 4], [-0.1, -0.2], 2), CallTokens(2, [1, 2, 3, 4, 9], [8], [-0.3], 3)],
        session_id="s",
    ).trajectories
    assert merged[0].token_versions == [2, 2, -1, 3] and merged[0].policy_version == 2


async def test_the_idle_clock_counts_only_time_with_no_request_out() -> None:
    clock = IdleClock(ScriptedEngine(latency_s=0.2))
    await asyncio.sleep(0.1)
    assert clock.idle_s() >= 0.09  # nothing asked yet
    before = clock.idle_s()
    await asyncio.gather(*(clock.generate([1, 2], SamplingParams(max_tokens=2)) for _ in range(3)))
    assert clock.idle_s() - before < 0.05  # three overlapping requests: busy the whole 0.2 s
    await asyncio.sleep(0.1)
    assert clock.idle_s() - before >= 0.09


async def test_idle_seconds_read_at_a_windows_own_ends_never_exceed_the_window() -> None:
    """An idle engine over a window: read at the window's own two readings, the idle seconds equal the
    window up to float rounding (the training loop's idle fraction was once 1.0002, read a moment late)."""
    clock = IdleClock(ScriptedEngine())
    for _ in range(50):
        began = time.perf_counter()
        idle = clock.idle_s(began)
        await asyncio.sleep(0)
        ended = time.perf_counter()
        assert clock.idle_s(ended) - idle <= ended - began + 1e-9


async def test_the_ledger_forgets_one_trajectory_and_still_checks_its_siblings() -> None:
    ledger = SampledLedger(ScriptedEngine())
    params = SamplingParams(max_tokens=3)
    trajs = []
    for _ in range(2):  # two samples of one prompt: the scripted engine samples the same tokens
        b = TrajectoryBuilder("t", "g", [5, 6])
        await b.sample(ledger, params, session_id=None)
        b.add_env([7])
        await b.sample(ledger, params, session_id=None)
        trajs.append(b.finish("submitted"))
    assert ledger.verify(trajs[0]) is None and ledger.verify(trajs[1]) is None
    ledger.forget(trajs[0])
    assert ledger.verify(trajs[1]) is None  # its own completions are still there
    ledger.forget(trajs[1])
    assert ledger.sampled == {}
    assert ledger.verify(trajs[0]) is not None  # forgotten: never checked against again
