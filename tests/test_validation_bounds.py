"""A validation point's sets run at once through one set of rollout bounds: together they keep to
``rollout.max_sandboxes`` (each set with bounds of its own once had four times the sandboxes alive,
and their sessions' KV, in the main job's validations)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import ClassVar

from rich.console import Console
from rich.progress import Progress

from coderl.agents import AgentContext, AgentLoop
from coderl.agents.trajectory import TrajectoryBuilder
from coderl.config import load_config
from coderl.types import Task, Trajectory
from tests.test_train_groups import served_trainer


class CountingLoop(AgentLoop):
    """Holds its slot a moment and counts how many rollouts are alive at once; hands the repository back."""

    name = "counting"
    alive: ClassVar[int] = 0
    most: ClassVar[int] = 0
    runs: ClassVar[int] = 0

    async def run(self, task: Task, ctx: AgentContext) -> Trajectory:
        CountingLoop.alive += 1
        CountingLoop.runs += 1
        CountingLoop.most = max(CountingLoop.most, CountingLoop.alive)
        try:
            await asyncio.sleep(0.1)
            return TrajectoryBuilder(task.id, ctx.group_id, [1, 2, 3]).finish("submitted")
        finally:
            CountingLoop.alive -= 1


async def test_a_validation_points_sets_share_max_sandboxes(tmp_path: Path, tokenizer: object) -> None:
    overrides = [
        "rollout.agent=tests.test_validation_bounds:CountingLoop", "rollout.max_sandboxes=2",
        "train.val_samples=3", "train.val_sampled=3", "train.val_also=[bundled:strkit-001]",
    ]  # fmt: skip
    trainer, tasks, _ = await served_trainer(load_config(overrides=overrides), tmp_path, tokenizer)
    trainer.val_tasks, trainer.val_also_tasks = tasks, [tasks]  # three sets: val, val_sampled, val_also
    CountingLoop.most = CountingLoop.runs = 0
    with Progress(console=Console(file=io.StringIO())) as progress:
        row = await (await trainer._validation(progress)).run(0)
    await trainer.backend.stop_workers()
    assert CountingLoop.runs == 3 * 3 * len(tasks)  # every sample of every set ran
    assert CountingLoop.most == 2, CountingLoop.most  # never more than rollout.max_sandboxes at once
    assert {"val_pass_at_1", "val_sampled_pass_at_1", "val_also_pass_at_1"} <= set(row)
