"""Which training samples are guided, and by how much: prefix guidance annealed to nothing.

With ``train.guide_share > 0``, every group of a task the policy is not known to solve (no success in
the curriculum's counts: calibration and earlier training rollouts) gets ``round(guide_share x
group_size)`` guided samples, its last ones: the environment writes the first ``guide_fraction`` of
the task's gold demonstration — the model-side turns a demonstration of the warm start would hold
(:func:`coderl.train.demos.gold_plan`) — and the model samples the rest (:mod:`coderl.agents.guide`).
The fraction falls linearly from ``guide_fraction`` at the first RL step to 0 after
``guide_steps`` steps (``train.steps`` when unset), so the last steps are plain on-policy RL. Rewards
stay the hidden tests' verdict; the written tokens are mask 0 and never trained.

Owns: the schedule and the choice of guided samples. Must not: guide a held-out task (the trainer
draws only training tasks, and :meth:`Guidance.attach` refuses any id it was told is held out).
"""

from __future__ import annotations

from dataclasses import replace

from coderl.agents.guide import Guide, guide_tokens
from coderl.chat import ChatFormat
from coderl.errors import ConfigError
from coderl.rollout.config import RolloutConfig
from coderl.rollout.runner import RolloutGroup
from coderl.train.config import TrainConfig
from coderl.train.curriculum import Curriculum
from coderl.train.demos import gold_plan
from coderl.types import Task


class Guidance:
    def __init__(
        self, train: TrainConfig, rollout: RolloutConfig, chat: ChatFormat, held_out: set[str]
    ) -> None:
        self.share = train.guide_share
        self.start = train.guide_fraction
        self.steps = train.guide_steps or train.steps
        self.group_size = train.group_size
        self.rollout = rollout
        self.chat = chat
        self.held_out = held_out
        self._turns: dict[str, tuple[tuple[int, ...], ...] | None] = {}

    @property
    def on(self) -> bool:
        return self.share > 0 and self.start > 0

    def fraction(self, step: int) -> float:
        """Share of a demonstration written at RL step ``step`` (1-based): linear from the start value
        to 0 after ``guide_steps`` steps."""
        return self.start * max(0.0, 1.0 - (step - 1) / self.steps)

    def guided_per_group(self) -> int:
        return min(self.group_size - 1, round(self.share * self.group_size))  # one sample always unguided

    def attach(self, groups: list[RolloutGroup], curriculum: Curriculum, step: int) -> list[RolloutGroup]:
        """``groups`` with guides on the last samples of each group whose task has no recorded success
        and a gold demonstration (the others unchanged)."""
        if not self.on:
            return groups
        fraction, guided = self.fraction(step), self.guided_per_group()
        if fraction <= 0 or guided <= 0:
            return groups
        out = []
        for group in groups:
            if group.task.id in self.held_out:  # cannot happen by construction; the guard keeps it so
                raise ConfigError(f"guidance: {group.task.id} is held out and must never be guided")
            known = curriculum.counts.get(group.task.id)
            turns = self._demonstration(group.task)
            if turns is None or (known is not None and known.passed > 0):
                out.append(group)
                continue
            total = sum(len(t) for t in turns)
            guide = Guide(turns, guide_tokens(total, fraction))
            out.append(replace(group, guide=guide, guided=min(guided, group.size - 1)))
        return out

    def _demonstration(self, task: Task) -> tuple[tuple[int, ...], ...] | None:
        """The task's gold turns as token ids, each closed by the end-of-turn token (None: no gold plan)."""
        if task.id not in self._turns:
            plan = gold_plan(task, self.rollout, self.chat.tool_format)
            end = self.chat.end_of_turn
            self._turns[task.id] = (
                None
                if isinstance(plan, str)
                else tuple(tuple(self.chat.encode(text) + ([end] if end is not None else [])) for text in plan)
            )
        return self._turns[task.id]
