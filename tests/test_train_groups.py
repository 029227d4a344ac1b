"""Multi-sequence rollouts through the trainer's own path: draw -> run_rollouts (real grading in bwrap)
-> label -> sampled-token check -> build_batch. Every sequence of a rollout must get exactly the
advantage of its counted row, under every estimator (the bug: parts kept the loop's group id, alone
in a group where no row counts, and got reward / epsilon ~ 1e6)."""

from __future__ import annotations

import asyncio
import io
import itertools
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from rich.console import Console
from rich.progress import Progress

from coderl.agents import AgentContext, AgentLoop
from coderl.agents.trajectory import TrajectoryBuilder
from coderl.chat import ChatFormat
from coderl.config import Config, load_config
from coderl.engine.scripted import ScriptedEngine
from coderl.rollout.context import ContextFactory
from coderl.rollout.runner import RolloutResult
from coderl.rollout.store import TrajectoryStore
from coderl.tasks import load_tasks
from coderl.train.batch import build_batch, sequences_of
from coderl.train.credit import PatchCredit
from coderl.train.curriculum import Curriculum
from coderl.train.ledger import SampledLedger
from coderl.train.loop import Trainer
from coderl.train.rollouts import TrainingRollouts
from coderl.types import Task, Trajectory
from tests.test_tasks import make_native


class PartsLoop(AgentLoop):
    """Two sequences per rollout, as the remote loop brings a sub-agent's: a main one and a part whose
    prompt does not extend it. Both carry the group id the loop made up. Samples alternate between the
    gold patch (reward 1) and no patch (reward 0), in the order the runner starts them."""

    name = "parts"
    started: ClassVar[itertools.count[int]] = itertools.count()

    async def run(self, task: Task, ctx: AgentContext) -> Trajectory:
        sample = next(PartsLoop.started)
        main = TrajectoryBuilder(task.id, "made-up-by-the-loop", [1, 2, 3])
        await main.sample(ctx.engine, ctx.sampling, session_id=None)
        main.add_env([7, 7])
        await main.sample(ctx.engine, ctx.sampling, session_id=None)
        part = TrajectoryBuilder(task.id, "made-up-by-the-loop", [9, 9, 9, 9])
        await part.sample(ctx.engine, ctx.sampling, session_id=None)
        traj = main.finish("submitted", patch=(task.gold_patch or "") if sample % 2 == 0 else "")
        traj.parts = [part.finish("submitted")]
        return traj


async def served_trainer(cfg: Config, tmp_path: Path, tokenizer: object) -> tuple[Trainer, list[Task], TrainingRollouts]:
    """A trainer whose rollouts run ``cfg.rollout.agent`` on a native task in real sandboxes, every
    engine call answered by a scripted engine behind the sampled-token ledger: the trainer, the tasks
    and its :class:`TrainingRollouts` (also set as ``trainer.rollouts``)."""
    trainer = Trainer(cfg, tmp_path)
    tasks = load_tasks(f"native:{make_native(tmp_path)}")
    ledger = SampledLedger(ScriptedEngine())
    trainer.backend.contexts = ContextFactory(cfg.rollout, cfg.sandbox, ChatFormat(tokenizer))
    await trainer.backend.serve(ledger)
    trainer.rollouts = TrainingRollouts(cfg, trainer.backend, ledger, Curriculum(tasks, "none", {}, seed=0), None, lambda: 0)
    return trainer, tasks, trainer.rollouts


ESTIMATORS = ["grpo", "drgrpo", "rloo", "reinforce_pp_baseline", "gae"]


async def test_every_sequence_of_a_rollout_gets_its_counted_rows_advantage(
    tmp_path: Path, tokenizer: object
) -> None:
    overrides = [
        "rollout.agent=tests.test_train_groups:PartsLoop", "rollout.max_tokens=3", "train.group_size=4",
        "algo.gamma=1.0", "algo.lam=1.0",
    ]  # fmt: skip
    cfg = load_config(overrides=overrides)
    trainer, _, rollouts = await served_trainer(cfg, tmp_path, tokenizer)
    PartsLoop.started = itertools.count()
    with Progress(console=Console(file=io.StringIO())) as progress:
        results = await rollouts.rollout(rollouts.draw(1), progress, "rollout")
    trainable, mismatched = rollouts.check(results)
    assert mismatched == 0 and len(trainable) == 4
    assert [r.trajectory.reward for r in trainable] == [1.0, 0.0, 1.0, 0.0]  # graded by the hidden tests
    trajectories = [r.trajectory for r in trainable]
    for traj in trajectories:  # one group per draw, set on every sequence, and the rollout's reward
        assert {s.group_id for s in traj.sequences()} == {traj.group_id} and traj.group_id == "calc-001#1.0"
        assert {s.reward for s in traj.sequences()} == {traj.reward}
    rows = sequences_of(trajectories)
    for advantage in ESTIMATORS:
        algo = load_config(overrides=[*overrides, f"algo.advantage={advantage}"]).algo
        values = [torch.zeros(len(s.response_ids)) for s in rows] if advantage == "gae" else None
        batch = build_batch(trajectories, algo, trainer.max_response, values=values)
        adv, mask = batch.advantages, batch.mask
        assert torch.isfinite(adv).all() and adv.abs().max() < 10, advantage  # never reward / epsilon
        for i in range(batch.size):
            main = int(torch.nonzero(batch.rollout_index == batch.rollout_index[i])[0])  # its counted row
            expected = float(adv[main][mask[main] > 0][0])
            got = adv[i][mask[i] > 0].tolist()
            assert got == pytest.approx([expected] * len(got), abs=1e-6), advantage
        solved, failed = float(adv[0][mask[0] > 0][0]), float(adv[2][mask[2] > 0][0])
        assert solved > 0 > failed, advantage  # the rewarded rollout is pushed up, its part with it


class StepsCredit(PatchCredit):
    """The patch credit, recording the RL step each batch of results was credited at."""

    def __init__(self) -> None:
        super().__init__(0.3, 8, {})
        self.credited_at: list[int] = []

    def apply(self, results: list[RolloutResult], step: int) -> None:
        self.credited_at.append(step)
        super().apply(results, step)


async def test_async_groups_are_credited_at_the_step_that_trains_them_and_none_roll_after_the_last(
    tmp_path: Path, tokenizer: object
) -> None:
    """train.mode=async: a group that finished while step 1 updated is credited at step 2, which
    trains it (its coefficient is step 2's); once the last step has its groups the producer stops, so
    nothing rolls out beside the last validation."""
    overrides = [
        "rollout.agent=tests.test_train_groups:PartsLoop", "rollout.max_tokens=3", "train.group_size=2",
        "train.tasks_per_step=1", "train.mode=async", "algo.dynamic_sampling=false",
    ]  # fmt: skip
    cfg = load_config(overrides=overrides)
    trainer, _, rollouts = await served_trainer(cfg, tmp_path, tokenizer)
    rollouts.credit = credit = StepsCredit()
    rollouts.start_producer()
    producer = rollouts.producer
    assert producer is not None
    store = TrajectoryStore(tmp_path / "run")
    with Progress(console=Console(file=io.StringIO())) as progress:
        first, _, _, _ = await rollouts.for_step(1, 0, store, progress)
        while producer.in_flight:  # step 2's group rolls out and finishes "during step 1's update"
            await asyncio.sleep(0.05)
        assert credit.credited_at == [1]  # finished, not yet credited
        second, _, _, _ = await rollouts.for_step(2, 1, store, progress, last=True)
    assert credit.credited_at == [1, 2] and len(first) == len(second) == 2
    assert producer.in_flight == 0  # stopped: nothing rolls out after the last step's groups
    store.close()
    await trainer.close()
