"""The RL phase's wall-clock budget (``train.rl_minutes``): which step is the last.

Owns: timing the RL steps of one run and deciding, before each, whether it is the last one (so that
step saves a checkpoint and validates, exactly as step ``train.steps`` would). The judgement uses the
mean length of the steps so far: a step whose expected end lies past the budget is still taken, as
the last, so a run never ends without its final checkpoint and validation.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class RLBudget:
    def __init__(self, minutes: float | None, steps: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self.minutes = minutes
        self.steps = steps
        self._clock = clock
        self._began: float | None = None
        self._taken = 0

    def last(self, step: int) -> bool:
        """Whether ``step`` (about to start) is the run's last RL step."""
        if self._began is None:
            self._began = self._clock()
        if step >= self.steps:
            return True
        if self.minutes is None or self._taken == 0:
            return False
        spent = self._clock() - self._began
        return spent + spent / self._taken >= self.minutes * 60

    def done(self) -> None:
        """A step ended."""
        self._taken += 1

    def stopped_line(self, step: int) -> str:
        spent = (self._clock() - (self._began or self._clock())) / 60
        return (
            f"train.rl_minutes={self.minutes:g}: RL stopped after step {step} of {self.steps} "
            f"({spent:.1f} min of RL steps)"
        )
