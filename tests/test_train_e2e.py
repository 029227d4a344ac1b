"""`coderl train` end to end as a real process: real model, real sandboxes, real updates; kill -9 + --resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coderl.rollout.store import read_trajectories
from coderl.train import checkpoints

pytestmark = pytest.mark.slow

# A small run: one warm-up task per step, two samples each, one turn of at most 24 tokens.
SMALL = [
    "train.tasks=bundled:warmup",
    "train.steps=3",
    "train.tasks_per_step=1",
    "train.group_size=2",
    "train.save_every=1",
    "rollout.agent=single_turn",
    "rollout.max_tokens=24",
    "actor.lr=1e-5",
]
REQUIRED = ("step", "reward_mean", "pass_rate", "logprob_mismatch", "kl", "entropy", "grad_norm", "stage_s")


def _train(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "coderl.cli.main", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 600) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return out


def test_train_killed_and_resumed_loses_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _train(*SMALL, f"run.dir={run}")
    deadline = time.monotonic() + 600
    while not (run / "checkpoints" / "step-000001" / "trainer.json").is_file():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "no checkpoint of step 1 in 10 minutes"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = len(read_trajectories(run))
    assert before >= 2  # step 1's samples are on disk

    out = _finish(_train("--resume", str(run)))
    assert "resumed from" in out and "report:" in out
    rows = checkpoints.read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]  # every step once, none lost, none twice
    for row in rows:
        assert all(k in row for k in REQUIRED), sorted(row)
        assert row["token_mismatch"] == 0
        if row["trained_samples"]:
            assert row["logprob_mismatch"] < 1e-3  # rollout vs trainer, fp32 on CPU
    assert {"rollout", "grade", "update", "sync", "save"} <= set(rows[-1]["stage_s"])
    assert (run / "report.html").is_file() and "<svg" in (run / "report.html").read_text()
    found = checkpoints.latest(run)
    assert found is not None and found[1]["step"] == 3
    assert (found[0] / "actor" / "optimizer.pt").is_file()
    trajs = read_trajectories(run)
    assert len(trajs) >= before + 4  # nothing recorded before the kill is gone
    # each step's samples carry the policy version that produced them: updates so far, up to 2
    assert max(t["policy_version"] for t in trajs) >= 1 and all(t["policy_version"] <= 2 for t in trajs)
    saved = json.loads(json.dumps(rows[-1]))
    assert saved["policy_version"] == found[1]["policy_version"]
