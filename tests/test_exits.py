"""Runs side by side exit cleanly: two ``coderl train`` processes at once, round after round, each
exits 0 with its report written, never SIGABRT from a native thread left running at interpreter exit
("terminate called without an active exception", seen under two concurrent runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coderl.threads import share_of_cores
from tests.test_interrupt import RUN, _mounts, boxes  # noqa: F401  (boxes is a fixture)

pytestmark = pytest.mark.slow

ROUNDS = 2
"""Rounds of two concurrent runs. The abort was a race at exit; each round is a fresh chance."""


def test_concurrent_runs_exit_0_round_after_round(tmp_path: Path, boxes: Path, tiny_model: Path) -> None:  # noqa: F811
    """On the tiny model (tests/tiny.py): the race is in the threads every run starts, whatever the model."""
    env = {**share_of_cores(2), "CODERL_SANDBOX_DIR": str(boxes), "PYTHONUNBUFFERED": "1"}
    for n in range(ROUNDS):
        procs = []
        for job in range(2):
            run = tmp_path / f"r{n}-{job}"
            log = (tmp_path / f"r{n}-{job}.log").open("w")
            args = [  # the smallest run that still starts, rolls out, updates, syncs, saves and reports
                *RUN, "train.steps=1", "train.tasks_per_step=1", "train.group_size=2", "rollout.max_tokens=16",
                f"run.seed={job}", f"run.dir={run}", f"model.path={tiny_model}",
            ]  # fmt: skip
            procs.append((run, log, subprocess.Popen(
                [sys.executable, "-m", "coderl", "train", *args], stdout=log, stderr=subprocess.STDOUT, env=env
            )))  # fmt: skip
        for run, log, proc in procs:
            code = proc.wait(timeout=600)
            log.close()
            text = Path(log.name).read_text()
            assert code == 0, f"round {n}: exit {code}\n{text[-3000:]}"
            assert "terminate called" not in text and "never retrieved" not in text, text[-3000:]
            assert (run / "report.html").exists()
    assert not [m for m in _mounts(boxes) if "/ws/" in m], _mounts(boxes)  # no workspace left mounted
