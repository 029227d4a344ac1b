"""Which training samples are guided, and by how much: prefix guidance annealed to nothing.

With ``train.guide_share > 0``, every group of a task the policy is not known to solve (no success in
the curriculum's counts: calibration and earlier training rollouts) gets ``round(guide_share x
group_size)`` guided samples, its last ones: the environment writes the first ``guide_fraction`` of
the tokens of the task's gold demonstration — the model-side turns a demonstration of the warm start
would hold (:func:`coderl.train.demos.gold_plan`) — that come *before its fix* (:func:`fix_point`), and
the model samples the rest (:mod:`coderl.agents.guide`). At 1.0 a guided sample is brought to the very
token where the bug must be changed, and the decision that fails the unguided samples is the model's:
the group's rewards then differ by what the policy does there.
The fraction falls linearly from ``guide_fraction`` at the first RL step to 0 after
``guide_steps`` steps (``train.steps`` when unset), so the last steps are plain on-policy RL. Rewards
stay the hidden tests' verdict; the written tokens are mask 0 and never trained.

Owns: the schedule and the choice of guided samples. Must not: guide a held-out task (the trainer
draws only training tasks, and :meth:`Guidance.attach` refuses any id it was told is held out).
"""

from __future__ import annotations

import json
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
        self._turns: dict[str, tuple[tuple[tuple[int, ...], ...], int] | None] = {}

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
            demo = self._demonstration(group.task)
            if demo is None or (known is not None and known.passed > 0):
                out.append(group)
                continue
            turns, before_fix = demo
            guide = Guide(turns, guide_tokens(before_fix, fraction))
            out.append(replace(group, guide=guide, guided=min(guided, group.size - 1)))
        return out

    def _demonstration(self, task: Task) -> tuple[tuple[tuple[int, ...], ...], int] | None:
        """The task's gold turns as token ids, each closed by the end-of-turn token, and how many of
        their tokens come before the fix (None: no gold plan, or its fix cannot be found in it)."""
        if task.id not in self._turns:
            self._turns[task.id] = self._plan(task)
        return self._turns[task.id]

    def _plan(self, task: Task) -> tuple[tuple[tuple[int, ...], ...], int] | None:
        plan = gold_plan(task, self.rollout, self.chat.tool_format)
        if isinstance(plan, str) or task.gold_patch is None:
            return None
        end = self.chat.end_of_turn
        turns = tuple(tuple(self.chat.encode(text) + ([end] if end is not None else [])) for text in plan)
        where = fix_point(plan, task.gold_patch)
        if where is None:
            return None
        turn, offset = where
        before = sum(len(t) for t in turns[:turn])
        return turns, before + self._tokens_before(turns[turn], plan[turn][:offset])

    def _tokens_before(self, ids: tuple[int, ...], text: str) -> int:
        """How many leading ``ids`` decode to a prefix of ``text`` (the tokens before a character offset,
        never one that reaches past it)."""
        k = min(len(self.chat.encode(text)), len(ids))
        while k > 0 and not text.startswith(self.chat.decode(list(ids[:k]))):
            k -= 1
        return k


def _json_escaped(text: str) -> str:
    return json.dumps(text)[1:-1]


def fix_point(turns: list[str], gold_patch: str) -> tuple[int, int] | None:
    """Where a demonstration's turns make the gold patch's first change: (turn, character offset) of the
    first character in which the new line differs from the line it replaces (the start of an added
    line when nothing is removed). The added line is found after the hunk's last two context lines (or
    one, or alone when it occurs once), so an identical line elsewhere in the function is not taken for
    it. None when it cannot be found."""
    lines = gold_patch.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("@@")), None)
    if start is None:
        return None
    context: list[str] = []
    removed: str | None = None
    for line in lines[start + 1 :]:
        if line.startswith("-") and removed is None:
            removed = line[1:]
        elif line.startswith("+"):
            added = line[1:]
            shared = 0
            while removed is not None and shared < min(len(removed), len(added)) and removed[shared] == added[shared]:
                shared += 1
            for n in (2, 1, 0):  # the most context that is there (a demonstration starts at the def line)
                for written in (str, _json_escaped):  # XML calls carry code raw, JSON calls escaped
                    anchor = written("\n".join([*context[len(context) - n :], added]) if n else added)
                    line = written(added)
                    for i, text in enumerate(turns):
                        at = text.find(anchor)
                        if at >= 0 and (n or text.count(line) == 1):  # alone, the line must be unique
                            return i, at + len(anchor) - len(line) + len(written(added[:shared]))
            bare = added.lstrip()  # a str_replace call leaves the first line's indentation off
            indent = len(added) - len(bare)
            for written in (str, _json_escaped):
                for i, text in enumerate(turns):
                    if bare and shared >= indent and text.count(written(bare)) == 1:
                        return i, text.find(written(bare)) + len(written(bare[: shared - indent]))
            return None
        elif line.startswith(" ") and removed is None:
            context.append(line[1:])
        elif line.startswith("@@"):
            return None
    return None
