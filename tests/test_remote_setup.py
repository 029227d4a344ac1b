"""rollout.remote_setup: a host command run once per process, however many rollouts start at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coderl.agents.remote_setup import ensure_setup
from coderl.errors import AgentError


async def test_the_setup_runs_once_for_rollouts_that_start_together(tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    command = f"sleep 0.2; echo ran >> {log}"
    await asyncio.gather(*(ensure_setup(command) for _ in range(4)))
    await ensure_setup(command)
    assert log.read_text() == "ran\n"
    await ensure_setup("")  # no set-up: nothing to do


async def test_a_failed_setup_fails_every_rollout_with_its_output_without_running_again(tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    command = f"echo tried >> {log}; echo 'npm ERR! 404 @openai/codex@9.9.9' >&2; exit 3"
    for _ in range(2):
        with pytest.raises(AgentError, match=r"remote_setup exited 3: .*\n.*npm ERR! 404"):
            await ensure_setup(command)
    assert log.read_text() == "tried\n"


async def test_a_setup_past_its_time_is_killed_with_its_children_and_tried_again(tmp_path: Path) -> None:
    log, child = tmp_path / "runs.log", tmp_path / "child.pid"
    command = f"echo ran >> {log}; sleep 60 & echo $! > {child}; wait"
    for _ in range(2):
        with pytest.raises(AgentError, match=r"ran past 0\.5 s"):
            await ensure_setup(command, timeout_s=0.5)
    assert log.read_text() == "ran\nran\n"  # a timeout is not kept: the next rollout ran it again
    pid = int(child.read_text())
    await asyncio.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
