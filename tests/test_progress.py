"""Progress without a terminal: plain lines at a steady pace (issue: a redirected run printed nothing
for its whole first validation)."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console
from rich.progress import Progress

from coderl.progress import PlainProgress, every_s, progress_bars


def test_a_terminal_gets_rich_bars_and_a_file_gets_plain_lines() -> None:
    assert not isinstance(progress_bars(Console(file=io.StringIO(), force_terminal=True)), PlainProgress)
    assert isinstance(progress_bars(Console(file=io.StringIO())), PlainProgress)
    assert isinstance(progress_bars(Console(file=io.StringIO())), Progress)  # the same interface


def test_plain_lines_come_at_a_pace_and_when_a_stage_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODERL_PROGRESS_EVERY", "0.2")
    out = io.StringIO()
    with progress_bars(Console(file=out, width=300), name="train") as progress:
        stage = progress.add_task("validation", total=4, info="")
        for _ in range(3):
            time.sleep(0.35)
            progress.advance(stage)
        assert out.getvalue().count("train validation: ") >= 2  # lines while it runs, none waiting for the end
        progress.update(stage, advance=1, info="pass@1 0.250")
        progress.remove_task(stage)
    lines = out.getvalue().splitlines()
    last = lines[-1]
    assert last.startswith("train validation: 4/4 (100%), 0:01 elapsed, ") and last.endswith("pass@1 0.250")
    assert "/s" in last and "ETA" not in last  # a rate; no ETA once done
    running = next(x for x in lines if "(25%)" in x or "(50%)" in x or "(75%)" in x)
    assert "ETA 0:0" in running


def test_a_stage_that_does_not_move_speaks_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    with PlainProgress(Console(file=out, width=300), every=0.1) as progress:
        progress.add_task("rollout", total=8, info="", failing=2)
        time.sleep(1.05)  # 10 paces: a first line after one, then one per 4 (HEARTBEATS)
    lines = out.getvalue().splitlines()
    assert 2 <= len(lines) <= 4, lines
    assert lines[0] == "rollout: 0/8 (0%), 0:00 elapsed, failing 2"


def test_a_bad_pace_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODERL_PROGRESS_EVERY", "soon")
    with pytest.raises(ValueError, match="CODERL_PROGRESS_EVERY: got 'soon'; give a positive number"):
        every_s()
    monkeypatch.delenv("CODERL_PROGRESS_EVERY")
    assert every_s() == 30.0


def test_a_stage_started_later_counts_its_rate_from_its_start() -> None:
    """The run's RL-steps bar is added at the start and started when the RL steps begin: the
    validations and the warm start before them must not count in its rate and ETA."""
    from coderl.progress import plain_line

    with PlainProgress(Console(file=io.StringIO(), width=300), every=60) as progress:
        bar = progress.add_task("steps", total=4, info="", start=False)
        time.sleep(1.2)  # the phases before the steps
        task = progress.tasks[0]
        assert plain_line(task, time.monotonic()) == "steps: 0/4 (0%), 0:00 elapsed"
        progress.start_task(bar)
        progress.advance(bar)
        line = plain_line(progress.tasks[0], time.monotonic())
    assert line.startswith("steps: 1/4 (25%), 0:00 elapsed, ") and "ETA 0:00" in line, line
