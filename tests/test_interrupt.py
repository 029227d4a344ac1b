"""Ctrl-C (SIGINT) stops ``coderl train`` within seconds at any stage, exits 130 (never an abort from a
thread still computing), leaves no sandbox mounted, and ``--resume`` continues the run. SIGTERM (what
``timeout``, Slurm and Kubernetes send) does the same and exits 143."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coderl.sandbox.hostsetup import unmount
from coderl.train import checkpoints
from tests.tiny import tiny_flag

pytestmark = pytest.mark.slow

# On the tiny model (tests/tiny.py): what is checked is how a run stops, in whatever it is doing. Its
# samples are long (400 random tokens) so that the update lasts seconds (3.6 s alone, 2026-11-30), long
# enough to be interrupted inside: the signal goes a few tenths of a second into it.
RUN = [
    "train.tasks=bundled:warmup", "train.val_tasks=none", "sft.before_rl=false", "train.steps=1",
    "train.tasks_per_step=2", "train.group_size=4", "rollout.agent=single_turn", "rollout.tools=null",
    "rollout.max_tokens=400", "rollout.temperature=1.0", "actor.micro_batch_tokens=128", "actor.lr=1e-5",
    "train.calibrate_tasks=0", "train.curriculum=none", "algo.dynamic_sampling=false", "actor.lora_rank=0",
    "actor.dtype=float32", "model.dtype=float32", "train.val_sampled=0", "train.mode=sync",
]  # fmt: skip


def _mounts(under: Path) -> list[str]:
    return [line for line in Path("/proc/mounts").read_text().splitlines() if str(under) in line]


@pytest.fixture
def boxes(tmp_path: Path) -> Iterator[Path]:
    """A sandbox state folder of the test's own; its host view (a bind mount kept for later runs by
    design) is unmounted afterwards, so the folder can be removed."""
    folder = tmp_path / "sandboxes"
    yield folder
    for line in _mounts(folder):
        unmount(Path(line.split()[1]))


def _hear_ctrl_c() -> None:
    """In the child: SIGINT's default disposition, whatever this test process inherited. A suite started
    in the background by a non-interactive shell (``pytest ... &``) ignores SIGINT, its children inherit
    that, and Python then installs no KeyboardInterrupt handler: the run would never hear the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _deaf_to_ctrl_c() -> None:
    """In the child: SIGINT ignored, as in a job started with ``nohup ... &``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _interrupt(
    args: list[str], env: dict[str, str], log: Path, stage: str, sig: int, ready: Callable[[], bool]
) -> tuple[int, float]:
    """Start ``coderl train``, send ``sig`` (SIGINT: Ctrl-C; SIGTERM with SIGINT ignored in the child)
    once a progress line of ``stage`` has appeared and ``ready()``; (exit code, seconds from the signal
    to the exit)."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "coderl", "train", *args], stdout=out, stderr=subprocess.STDOUT, env=env,
            preexec_fn=_hear_ctrl_c if sig == signal.SIGINT else _deaf_to_ctrl_c,
        )  # fmt: skip
    deadline = time.monotonic() + 600
    while not (re.search(stage, log.read_text()) and ready()):
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {stage!r} in 10 minutes: {log.read_text()[-3000:]}"
        time.sleep(0.1)
    sent = time.monotonic()
    proc.send_signal(sig)
    code = proc.wait(timeout=120)
    return code, time.monotonic() - sent


def _run(run: Path) -> list[str]:
    return [*RUN, f"run.dir={run}", tiny_flag()]


def _env(boxes: Path) -> dict[str, str]:
    return {**os.environ, "CODERL_PROGRESS_EVERY": "0.2", "CODERL_SANDBOX_DIR": str(boxes), "PYTHONUNBUFFERED": "1"}


def _stopped_cleanly(
    args: list[str], env: dict[str, str], log: Path, stage: str, boxes: Path, sig: int = signal.SIGINT,
    ready: Callable[[], bool] = lambda: True,
) -> None:
    """Ctrl-C (or SIGTERM) at ``stage`` (:func:`_interrupt`) ends the run in seconds, with exit code 130
    (143) and nothing left."""
    code, took = _interrupt(args, env, log, stage, sig, ready)
    text = log.read_text()
    said = "coderl: interrupted" if sig == signal.SIGINT else "coderl: terminated (SIGTERM)"
    assert code == 128 + sig, text[-3000:]  # not -6: no thread was left computing under the interpreter's exit
    assert said in text and "terminate called" not in text and "never retrieved" not in text
    # every rollout unwound before the run's own clean-up (not the at-exit fallback, not cut off)
    assert "never closed" not in text and "never awaited" not in text and "destroyed but it is pending" not in text
    assert took < 20, f"{took:.1f} s from Ctrl-C to exit ({stage})"
    assert not re.search(stage + r"\d+/\d+ \(100%\)", text), text[-3000:]  # it landed inside the stage
    assert not [m for m in _mounts(boxes) if "/ws/" in m], _mounts(boxes)  # no workspace left mounted


def _resumed_steps(run: Path, env: dict[str, str]) -> list[int]:
    """``coderl train --resume`` to the end; the steps ``metrics.jsonl`` then holds."""
    done = subprocess.run(
        [sys.executable, "-m", "coderl", "train", "--resume", str(run)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [r["step"] for r in checkpoints.read_metrics(run / "metrics.jsonl")]


def test_ctrl_c_stops_the_run_in_seconds_and_resume_goes_on(tmp_path: Path, boxes: Path) -> None:
    """Ctrl-C in a rollout, then (after --resume) in an update; the second --resume finishes the run."""
    run, env = tmp_path / "run", _env(boxes)
    firsts = [_run(run), ["--resume", str(run)]]
    for n, (args, stage) in enumerate(zip(firsts, [r"step 1 rollout: ", r"step 1 update: "], strict=True)):
        _stopped_cleanly(args, env, tmp_path / f"run{n}.log", stage, boxes)
    assert _resumed_steps(run, env) == [1]  # the step once: not lost to an interrupt, not twice


def test_ctrl_c_in_an_async_run_with_rollouts_under_way_stops_it_and_resume_goes_on(
    tmp_path: Path, boxes: Path
) -> None:
    """train.mode=async (the main job's): Ctrl-C while the actor updates step 1 and the producer rolls
    out step 2's groups; --resume then finishes both steps, each once."""
    run, env = tmp_path / "run", _env(boxes)
    args = [*_run(run), "train.mode=async", "train.steps=2"]
    _stopped_cleanly(args, env, tmp_path / "run.log", r"step 1 update: ", boxes)
    assert _resumed_steps(run, env) == [1, 2]


def test_sigterm_stops_the_run_as_ctrl_c_does_and_resume_goes_on(tmp_path: Path, boxes: Path) -> None:
    """SIGTERM in the rollouts (the agent's sandboxes open) of a run that ignores SIGINT (a ``nohup``
    job): every sandbox is closed, exit 143. Before, the process died on the spot and left a tmpfs
    workspace mounted per open sandbox. --resume then finishes the run."""
    run, env = tmp_path / "run", _env(boxes)
    swe = [
        "rollout.agent=swe", "rollout.tools=[show_function,replace_function,submit]", "rollout.max_turns=3",
        "train.tasks_per_step=6", "train.group_size=8",
    ]  # fmt: skip

    def open_workspaces() -> bool:
        return any("/ws/" in m for m in _mounts(boxes))

    log = tmp_path / "run.log"
    _stopped_cleanly([*_run(run), *swe], env, log, r"step 1 rollout: ", boxes, signal.SIGTERM, open_workspaces)
    assert _resumed_steps(run, env) == [1]


def test_a_stop_during_the_last_validation_is_made_good_by_resume(tmp_path: Path, boxes: Path) -> None:
    """The checkpoint is saved before the step validates; Ctrl-C during that validation used to lose
    it for good (--resume went on after the checkpoint's step, and the run ended with no final
    held-out figure). Now --resume validates that step first and records it whole."""
    run, env = tmp_path / "run", _env(boxes)
    held = "train.val_tasks=bundled:strkit-001,strkit-002,strkit-003,numkit-001"
    args = [*_run(run), held, "train.val_samples=8", "train.val_temperature=1.0", "train.val_sampled=2"]
    _stopped_cleanly(args, env, tmp_path / "run.log", r"step 1: val: ", boxes)
    assert (run / "checkpoints" / "step-000001").is_dir()  # the step itself was saved
    assert _resumed_steps(run, env) == [0, 1]
    last = checkpoints.read_metrics(run / "metrics.jsonl")[-1]
    assert last["step"] == 1 and last["val_tasks"] == 4 and "val_pass_at_1" in last
    folder = run / "validation" / "step-000001"  # each sample once, whichever set finished before the stop
    for log, want in ((folder / "trajectories.jsonl", 4 * 8), (folder / "val_sampled" / "trajectories.jsonl", 4 * 2)):
        assert sum(json.loads(line)["part"] == 0 for line in log.read_text().splitlines()) == want, log
