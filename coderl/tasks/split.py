"""A fixed split of a task set into training and held-out tasks.

The held-out tasks are the ``size`` tasks whose ids hash lowest: the split does not depend on the run's
seed or on the order tasks were listed in, so every seed of an experiment, and its control, is
measured on the same held-out tasks, and adding tasks to a set moves few of them. Training tasks that
fix a function a held-out task fixes are removed from training too (:mod:`coderl.tasks.overlap`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from coderl.errors import TaskError
from coderl.tasks.loader import load_tasks
from coderl.tasks.overlap import without_overlap
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


def train_and_held_out(
    tasks: str, val_tasks: str, val_size: int, val_also: Sequence[str] = ()
) -> tuple[list[Task], list[Task], list[list[Task]], list[str]]:
    """The training tasks, the held-out tasks, the further held-out sets (one list per source of
    ``train.val_also``) and the ids removed from training because they are held out or fix a function
    a held-out task fixes (:mod:`coderl.tasks.overlap`), as a run's config names them (``train.tasks``,
    ``train.val_tasks``, ``train.val_size``, ``train.val_also``: see
    :class:`coderl.train.config.TrainConfig`)."""
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
    return train, held, also, removed
