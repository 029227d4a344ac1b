"""A fixed split of a task set into training and held-out tasks.

The held-out tasks are the ``size`` tasks whose ids hash lowest: the split does not depend on the run's
seed or on the order tasks were listed in, so every seed of an experiment, and its control, is
measured on the same held-out tasks, and adding tasks to a set moves few of them. Training tasks that
fix a function a held-out task fixes are removed from training too (:mod:`coderl.tasks.overlap`).

A dev split (``train.dev_size``) is for tuning: settings are compared on tasks drawn from the training
side, so the held-out tasks a result is reported on never steer the choice. The held-out sets are then
set aside (neither trained on nor validated), and the dev tasks are drawn by a hash of their own from
the training tasks the starting weights never imitated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from coderl.errors import TaskError
from coderl.tasks.loader import load_tasks
from coderl.tasks.overlap import without_overlap
from coderl.types import Task


def _rank(task_id: str, salt: str = "coderl-heldout") -> str:
    return hashlib.sha256(f"{salt}:{task_id}".encode()).hexdigest()


def split_tasks(tasks: list[Task], size: int, source: str = "train.tasks") -> tuple[list[Task], list[Task]]:
    """(training tasks, held-out tasks): ``size`` tasks held out, the rest (in their order) trained on."""
    if len(tasks) < 2:
        raise TaskError(
            f"{source} holds {len(tasks)} task(s); holding some out for validation needs at least 2 "
            "(give held-out tasks in train.val_tasks, or set train.val_tasks=none)"
        )
    size = min(size, len(tasks) - 1)
    held = {t.id for t in sorted(tasks, key=lambda t: _rank(t.id))[:size]}
    return [t for t in tasks if t.id not in held], [t for t in tasks if t.id in held]


@dataclass(frozen=True)
class TaskSplit:
    """A run's tasks, disjoint at the level of functions (module doc)."""

    train: list[Task]
    """What training draws from (and warm-start demonstrations may come from)."""
    val: list[Task]
    """What validation measures first: the held-out split (or ``train.val_tasks``), or the dev split."""
    also: list[list[Task]]
    """The further held-out sets, one list per source of ``train.val_also`` (none with a dev split)."""
    removed: list[str]
    """Ids removed from training: held out, dev, set aside, or fixing a function one of those fixes."""
    set_aside: list[Task] = field(default_factory=list)
    """With a dev split: every held-out task (the split's and ``train.val_also``'s), which the run
    neither trains on nor validates on."""

    def unseen(self) -> list[Task]:
        """Every task no training, demonstration, calibration or guidance may touch."""
        return [*self.val, *(t for one in self.also for t in one), *self.set_aside]


def train_and_held_out(
    tasks: str,
    val_tasks: str,
    val_size: int,
    val_also: Sequence[str] = (),
    dev_size: int = 0,
    demonstrated: Collection[str] = (),
) -> TaskSplit:
    """The split of a run's tasks as its config names them (``train.tasks``, ``train.val_tasks``,
    ``train.val_size``, ``train.val_also``, ``train.dev_size``: see
    :class:`coderl.train.config.TrainConfig`). Training tasks that fix a function a held-out task
    fixes are removed (:mod:`coderl.tasks.overlap`).

    ``dev_size > 0`` tunes on a dev split: the held-out sets are set aside, and validation measures
    ``dev_size`` of the remaining training tasks instead (those whose ids hash lowest under a salt of
    their own), never one in ``demonstrated`` (the tasks the starting weights' warm start imitated) or
    fixing a function one of those fixes; training tasks fixing a dev task's function are removed."""
    every = load_tasks(tasks)
    if not every:
        raise TaskError(f"train.tasks: got {tasks!r}, which holds no tasks")
    if val_tasks.strip().lower() == "none":
        held: list[Task] = []
    elif not val_tasks.strip():
        every, held = split_tasks(every, val_size)
    else:
        held = load_tasks(val_tasks)
    if isinstance(val_also, str):
        val_also = [val_also] if val_also.strip() else []
    also = [load_tasks(source) for source in val_also]
    train, removed = without_overlap(every, [*held, *(t for one in also for t in one)])
    if not train:
        raise TaskError(
            f"train.tasks: every task of {tasks!r} is held out (train.val_tasks / train.val_also) or fixes "
            "a function a held-out task fixes; nothing to train on"
        )
    if dev_size <= 0:
        return TaskSplit(train, held, also, removed)
    imitated = set(demonstrated)
    seen = [t for t in train if t.id in imitated]
    candidates, _ = without_overlap(train, seen)
    if len(candidates) < 2:
        raise TaskError(
            f"train.dev_size: got {dev_size}, but {len(candidates)} training task(s) of {tasks!r} are neither "
            f"demonstrated by the starting weights' warm start ({len(seen)} are) nor fix a function one of "
            "those fixes; a dev split needs at least 2 (set train.dev_size=0, or add training tasks)"
        )
    picked = {t.id for t in sorted(candidates, key=lambda t: _rank(t.id, "coderl-dev"))[: min(dev_size, len(candidates) - 1)]}
    dev = [t for t in candidates if t.id in picked]
    train, more = without_overlap(train, dev)
    set_aside = [*held, *(t for one in also for t in one)]
    return TaskSplit(train, dev, [], sorted({*removed, *more}), set_aside)
