"""Progress that a person can follow with or without a terminal.

On a terminal: rich's live bars. Anywhere else (a log file, ``nohup``, CI, a cluster job's output),
rich draws nothing until the end, so :func:`progress_bars` gives a :class:`PlainProgress` instead: the
same :class:`rich.progress.Progress` interface (``add_task`` / ``advance`` / ``update`` /
``remove_task``), no live display, and one plain line per running stage at a steady pace — ``stage:
done/total (share), elapsed, rate, ETA`` and the task's ``info`` — plus one when a stage finishes. The
pace is :data:`EVERY_S` seconds (the environment variable ``CODERL_PROGRESS_EVERY`` overrides it); a
stage whose count has not moved speaks at a quarter of that pace.

This module owns when and how progress is shown; it must not decide what a stage is or count items.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

EVERY_S = 30.0
"""Seconds between two plain lines of a running stage when no terminal is attached."""


HEARTBEATS = 4
"""A stage whose count has not moved since its last line gets its next one after this many paces."""


def every_s() -> float:
    """The plain lines' pace: ``CODERL_PROGRESS_EVERY`` seconds when set (a positive number), else
    :data:`EVERY_S`."""
    raw = os.environ.get("CODERL_PROGRESS_EVERY")
    if raw is None:
        return EVERY_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ValueError(f"CODERL_PROGRESS_EVERY: got {raw!r}; give a positive number of seconds, e.g. 30")
    return value


def progress_bars(
    console: Console, *columns: ProgressColumn, name: str | None = None, **kwargs: Any
) -> Progress:
    """Progress bars on ``console``: rich's live ones with ``columns`` on a terminal (none given: ``name``
    or the task's description, a bar, done/total, the task's ``info`` field and the elapsed time), and
    :class:`PlainProgress` lines elsewhere, headed by ``name`` and the task's description. ``kwargs`` go to
    :class:`rich.progress.Progress` (``transient``, ...)."""
    if console.is_terminal:
        if not columns:
            label = f"[bold]{name}[/]" if name else "{task.description}"
            columns = (
                TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
            )  # fmt: skip
        return Progress(*columns, console=console, **kwargs)
    return PlainProgress(console=console, every=every_s(), name=name)


def plain_line(task: Task, now: float, name: str | None = None) -> str:
    """``[name] stage: done/total (share), elapsed, rate, ETA, fields`` for one task at ``now``
    (``time.monotonic``-based, as rich's tasks are)."""
    elapsed = (task.stop_time or now) - (task.start_time or now)
    done = task.completed
    parts = [f"{done:g}/{task.total:g} ({done / task.total:.0%})" if task.total else f"{done:g}"]
    parts.append(f"{_clock(elapsed)} elapsed")
    if done and elapsed > 0:
        rate = done / elapsed
        parts.append(f"{rate * 60:.1f}/min" if rate < 1 else f"{rate:.1f}/s")
        if task.total and not task.finished:
            parts.append(f"ETA {_clock((task.total - done) / rate)}")
    for key, value in task.fields.items():  # info as it is, the others (a failing count, a pass rate) named
        text = str(value).strip()
        if text:
            parts.append(text if key == "info" else f"{key.replace('_', ' ')} {text}")
    head = f"{name} {task.description}" if name and name != task.description else task.description
    return f"{head}: " + ", ".join(parts)


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class PlainProgress(Progress):
    """A :class:`rich.progress.Progress` with no live display that prints :func:`plain_line` for each
    running task every ``every`` seconds while its count moves (every :data:`HEARTBEATS` x ``every`` while
    it does not, so a long silence still says the stage is alive), from a ticker thread while started,
    and once when a task finishes."""

    def __init__(self, console: Console, every: float = EVERY_S, name: str | None = None) -> None:
        super().__init__(console=console, disable=True)
        self.every = every
        self.name = name
        self._said: dict[TaskID, tuple[float, float]] = {}  # each task's last line: when, at what count
        self._done: set[TaskID] = set()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def start(self) -> None:
        super().start()
        if self._ticker is None:
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, name="coderl-progress", daemon=True)
            self._ticker.start()

    def stop(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        super().stop()

    def add_task(self, *args: Any, **kwargs: Any) -> TaskID:
        task_id = super().add_task(*args, **kwargs)
        self._said[task_id] = (time.monotonic(), -1.0)  # the first line comes a pace later (or when it ends)
        return task_id

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._say_if_finished(task_id)

    def update(self, task_id: TaskID, *args: Any, **kwargs: Any) -> None:
        super().update(task_id, *args, **kwargs)
        self._say_if_finished(task_id)

    def remove_task(self, task_id: TaskID) -> None:
        self._said.pop(task_id, None)
        self._done.discard(task_id)
        super().remove_task(task_id)

    def _say_if_finished(self, task_id: TaskID) -> None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or not task.finished or task_id in self._done or not task.visible:
                return
            self._done.add(task_id)
            line = plain_line(task, time.monotonic(), self.name)
        self.console.print(line, highlight=False, markup=False, soft_wrap=True)

    def _tick(self) -> None:
        while not self._stop.wait(min(self.every, 1.0)):
            now = time.monotonic()
            lines = []
            with self._lock:
                for task_id, task in self._tasks.items():
                    when, count = self._said.get(task_id, (now, -1.0))
                    quiet = now - when < (self.every if task.completed != count else HEARTBEATS * self.every)
                    if task_id in self._done or quiet or not task.visible:  # hidden as a live bar would be
                        continue
                    self._said[task_id] = (now, task.completed)
                    lines.append(plain_line(task, now, self.name))
            for line in lines:
                self.console.print(line, highlight=False, markup=False, soft_wrap=True)
