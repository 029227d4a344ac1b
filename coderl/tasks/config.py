"""The ``tasks`` config section: where tasks come from and how a graded patch becomes a reward."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coderl.section import Section


class TasksConfig(Section):
    source: str = "bundled"
    """Where tasks come from: bundled[:tiers], swebench:FILE?repos=DIR, harbor:DIR, native:DIR, dataset:FILE,
    pypi:NAME==VERSION?n=N (synthesised at run time from the project's sdist, cached)."""
    reward: Literal["resolved", "fraction"] = "resolved"
    """Reward of a graded patch: 1/0 when every FAIL_TO_PASS and PASS_TO_PASS test passes, or the share passing."""
    concurrency: int = Field(2, ge=1)
    """Tasks graded or validated at once."""
