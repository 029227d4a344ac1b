"""A fixed split of a task set into training and held-out tasks.

The held-out tasks are the ``size`` tasks whose ids hash lowest: the split does not depend on the run's
seed or on the order tasks were listed in, so every seed of an experiment, and its control, is
measured on the same held-out tasks, and adding tasks to a set moves few of them.
"""

from __future__ import annotations

import hashlib

from coderl.errors import TaskError
from coderl.tasks.loader import load_tasks
from coderl.types import Task


def _rank(task_id: str) -> str:
    return hashlib.sha256(f"coderl-heldout:{task_id}".encode()).hexdigest()


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


def without(tasks: list[Task], held_out: list[Task]) -> tuple[list[Task], list[str]]:
    """``tasks`` minus any task whose id is held out, and the ids removed."""
    ids = {t.id for t in held_out}
    return [t for t in tasks if t.id not in ids], sorted(t.id for t in tasks if t.id in ids)


def train_and_held_out(tasks: str, val_tasks: str, val_size: int) -> tuple[list[Task], list[Task], list[str]]:
    """The training and held-out tasks a run's config names (``train.tasks``, ``train.val_tasks``,
    ``train.val_size``: see :class:`coderl.train.config.TrainConfig`), and the ids of tasks removed from
    training because they are held out."""
    every = load_tasks(tasks)
    if not every:
        raise TaskError(f"train.tasks: got {tasks!r}, which holds no tasks")
    if val_tasks.strip().lower() == "none":
        return every, [], []
    if not val_tasks.strip():
        train, held = split_tasks(every, val_size)
        return train, held, []
    held = load_tasks(val_tasks)
    train, removed = without(every, held)
    if not train:
        raise TaskError(
            f"train.tasks: every task of {tasks!r} is also in train.val_tasks; nothing to train on"
        )
    return train, held, removed
