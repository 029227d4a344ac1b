"""The RL phase's wall-clock bounds: which step is the last.

Two bounds, either or both:

- ``train.rl_minutes`` bounds the RL steps alone. Once the steps so far plus one more of their mean
  length would pass it, that next step is still taken, as the last.
- ``train.run_minutes`` bounds the whole run, from the process's start. When the RL phase begins, its
  steps get what is left of it after the final validation, whose length is taken to be that of the
  run's latest validation (it runs the same sets). The last step is then the last one expected to end
  inside that room: a step is the last when the one after it would not fit.

``train.min_steps`` steps are taken whatever either clock says, and ``train.steps`` is the most.

Owns timing the RL steps of one run, across resumes (the steps a resumed run had taken count, from
their metrics rows), and deciding, before each step, whether it is the last one (so that step saves a
checkpoint and validates, exactly as step ``train.steps`` would). The judgement uses the mean length
of the steps so far, validation excluded.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_IMPORTED = time.monotonic()


def process_seconds() -> float:
    """Seconds since this process started (the kernel's start time in ``/proc/self/stat``); where that
    cannot be read, since this module was imported."""
    try:
        # the command name (field 2) may hold spaces: the fields after its closing parenthesis
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time in ticks since boot
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - started)
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED


def _length(row: dict[str, Any]) -> float:
    """A step's seconds without its validation (periodic ones would inflate the mean)."""
    return float(row.get("step_s", 0.0)) - float(row.get("stage_s", {}).get("validate", 0.0))


PHASE_SECONDS = {"start": "validation_s", "sft": "sft_s", "calibrate": "calibrate_s"}
"""The key of each phase row that holds the phase's seconds (the warm start's includes its validation)."""


def phase_seconds(rows: Sequence[dict[str, Any]]) -> float:
    """Seconds the phases before the RL steps took, its set-up included, from their metrics rows (a
    resumed run's earlier process ran them)."""
    return sum(
        float(r.get(PHASE_SECONDS[r["phase"]], 0.0)) + float(r.get("setup_s", 0.0))
        for r in rows
        if r.get("phase") in PHASE_SECONDS
    )


def last_validation_seconds(rows: Sequence[dict[str, Any]]) -> float:
    """The latest validation's seconds (0 when the run has validated nothing yet)."""
    for row in reversed(rows):
        if "validation_s" in row:
            return float(row["validation_s"])
    return 0.0


class RLBudget:
    def __init__(
        self,
        minutes: float | None,
        steps: int,
        done_rows: Sequence[dict[str, Any]] = (),
        clock: Callable[[], float] = time.perf_counter,
        *,
        room_s: float | None = None,
        run_minutes: float | None = None,
        min_steps: int = 1,
    ) -> None:
        """``minutes``: train.rl_minutes. ``room_s``: the seconds train.run_minutes (given for the
        messages) leaves all the RL steps, those taken before a resume included (may be 0 or less: then
        only ``min_steps`` run). ``done_rows``: the metrics rows of the RL steps taken before a resume;
        they count against both bounds."""
        self.minutes = minutes
        self.steps = steps
        self.room_s = room_s
        self.run_minutes = run_minutes
        self.min_steps = min_steps
        self._clock = clock
        self._began: float | None = None
        self._before = sum(float(r.get("step_s", 0.0)) for r in done_rows)
        self._taken = len(done_rows)
        self._step_s = sum(_length(r) for r in done_rows)
        self._ended_before = bool(done_rows) and bool(done_rows[-1].get("last_step"))
        self._by: str | None = None  # the bound that made a step the last

    def _spent(self) -> float:
        return self._before + (self._clock() - self._began if self._began is not None else 0.0)

    def _passes(self) -> bool:
        spent = self._spent()
        mean = self._step_s / self._taken if self._taken else None
        if self.minutes is not None and mean is not None and spent + mean >= self.minutes * 60:
            self._by = "rl"
            return True
        if self.room_s is not None:
            # the step about to start is the last when the one after it would not fit (before any step,
            # with no mean to judge by: when there is no room at all)
            ends = spent + 2 * mean if mean is not None else spent
            if ends > self.room_s or (mean is None and self.room_s <= 0):
                self._by = "run"
                return True
        return False

    def spent_before_resume(self) -> bool:
        """A resumed run whose last step was the budget's last, and whose budget (perhaps raised since)
        still has no room for another step: nothing is left to train."""
        return self._ended_before and self._taken >= self.min_steps and self._passes()

    def last(self, step: int) -> bool:
        """Whether ``step`` (about to start) is the run's last RL step."""
        if self._began is None:
            self._began = self._clock()
        if step >= self.steps:
            return True
        return step >= self.min_steps and self._passes()

    def done(self, row: dict[str, Any]) -> None:
        """A step ended; ``row`` is its metrics row (``step_s``, ``stage_s``)."""
        self._taken += 1
        self._step_s += _length(row)

    def bound_name(self) -> str:
        """The setting that ended (or would end) the RL phase early, as ``key=value``."""
        if self._by == "run" and self.run_minutes is not None:
            return f"train.run_minutes={self.run_minutes:g}"
        return f"train.rl_minutes={self.minutes:g}" if self.minutes is not None else "train.steps"

    def stopped_line(self, step: int) -> str:
        line = (
            f"{self.bound_name()}: RL stopped after step {step} of {self.steps} "
            f"({self._step_s / 60:.1f} min of RL steps, their validation apart"
        )
        if self._by == "run" and self._taken:
            return f"{line}; another would not have ended inside the run's budget)"
        return line + ")"
