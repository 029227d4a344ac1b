"""The RL phase's wall-clock budget (``train.rl_minutes``): which step is the last.

Owns timing the RL steps of one run, across resumes (the steps a resumed run had taken count, from
their metrics rows), and deciding, before each step, whether it is the last one (so that step saves a
checkpoint and validates, exactly as step ``train.steps`` would). The judgement uses the mean length
of the steps so far, validation excluded: a step whose expected end lies past the budget is still
taken, as the last, so a run never ends without its final checkpoint and validation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any


def _length(row: dict[str, Any]) -> float:
    """A step's seconds without its validation (periodic ones would inflate the mean)."""
    return float(row.get("step_s", 0.0)) - float(row.get("stage_s", {}).get("validate", 0.0))


class RLBudget:
    def __init__(
        self,
        minutes: float | None,
        steps: int,
        done_rows: Sequence[dict[str, Any]] = (),
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``done_rows``: the metrics rows of the RL steps taken before a resume."""
        self.minutes = minutes
        self.steps = steps
        self._clock = clock
        self._began: float | None = None
        self._before = sum(float(r.get("step_s", 0.0)) for r in done_rows)
        self._taken = len(done_rows)
        self._step_s = sum(_length(r) for r in done_rows)
        self._ended_before = bool(done_rows) and bool(done_rows[-1].get("last_step"))

    def _spent(self) -> float:
        return self._before + (self._clock() - self._began if self._began is not None else 0.0)

    def _passes(self) -> bool:
        if self.minutes is None or self._taken == 0:
            return False
        return self._spent() + self._step_s / self._taken >= self.minutes * 60

    def spent_before_resume(self) -> bool:
        """A resumed run whose last step was the budget's last, and whose budget (perhaps raised since)
        still has no room for another step: nothing is left to train."""
        return self._ended_before and self._passes()

    def last(self, step: int) -> bool:
        """Whether ``step`` (about to start) is the run's last RL step."""
        if self._began is None:
            self._began = self._clock()
        return step >= self.steps or self._passes()

    def done(self, row: dict[str, Any]) -> None:
        """A step ended; ``row`` is its metrics row (``step_s``, ``stage_s``)."""
        self._taken += 1
        self._step_s += _length(row)

    def stopped_line(self, step: int) -> str:
        return (
            f"train.rl_minutes={self.minutes:g}: RL stopped after step {step} of {self.steps} "
            f"({self._spent() / 60:.1f} min of RL steps)"
        )
