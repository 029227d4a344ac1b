"""A run's own log (coderl/runlog.py): what the console said, plain and timestamped, with coderl's INFO
records the console does not show, and how the command ended."""

from __future__ import annotations

import asyncio
import io
import logging
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from coderl.errors import ConfigError
from coderl.runlog import run_log

STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")


def _console(terminal: bool = False) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=100, color_system="truecolor" if terminal else None), out


def test_the_log_holds_the_consoles_lines_and_coderls_info_records_plainly(tmp_path: Path) -> None:
    console, shown = _console()
    table = Table("point", "pass@1")
    table.add_row("start", "0.000")
    with run_log(tmp_path, "train", console) as path:
        console.print("[bold]step 1:[/] reward 0.5")
        console.print(table)
        logging.getLogger("coderl.engine.scheduler").info("weights updated, policy v%d", 1)
        logging.getLogger("somelib").info("chatter nobody asked for")
        logging.getLogger("somelib").warning("a library's warning")
    assert path == tmp_path / "train.log"
    lines = path.read_text().splitlines()
    assert all(STAMP.match(line) for line in lines)  # every line timestamped
    text = "\n".join(STAMP.sub("", line) for line in lines)
    assert text.startswith(f"== coderl train started in {tmp_path}") and text.endswith("== coderl train done")
    assert "step 1: reward 0.5" in text and "[bold]" not in text and "\x1b" not in text  # markup rendered, no colour
    assert re.search(r"start\s+│\s+0\.000", text)  # the table, whole
    assert "INFO coderl.engine.scheduler: weights updated, policy v1" in text
    assert "WARNING somelib: a library's warning" in text and "chatter" not in text
    assert "step 1: reward 0.5" in shown.getvalue() and "policy v1" not in shown.getvalue()  # the console as before


def test_a_resumed_run_appends_and_an_error_ends_the_log_with_its_cause(tmp_path: Path) -> None:
    console, _ = _console()
    with run_log(tmp_path, "train", console):
        console.print("first attempt")
    with pytest.raises(ConfigError), run_log(tmp_path, "train", console, resumed=True):
        raise ConfigError("train.steps: got -1; give a positive number")
    with pytest.raises(RuntimeError), run_log(tmp_path, "eval", console):
        raise RuntimeError("a bug")
    train = (tmp_path / "train.log").read_text()
    assert "first attempt" in train and "== coderl train resumed" in train
    assert train.rstrip().endswith("== coderl train failed: train.steps: got -1; give a positive number")
    failed = (tmp_path / "eval.log").read_text()
    assert "Traceback (most recent call last)" in failed and 'raise RuntimeError("a bug")' in failed
    assert failed.rstrip().endswith("== coderl eval failed: RuntimeError: a bug")


def test_a_stop_is_said_and_nothing_said_before_it_is_lost(tmp_path: Path) -> None:
    console, _ = _console()

    async def command() -> None:
        console.print("rolling out")
        await asyncio.sleep(10)

    async def stop_it() -> None:
        with run_log(tmp_path, "eval", console):
            task = asyncio.ensure_future(command())
            asyncio.get_running_loop().call_later(0.05, task.cancel)  # what Ctrl-C and SIGTERM do to a command's task
            await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(stop_it())
    text = (tmp_path / "eval.log").read_text()
    assert "rolling out" in text and text.rstrip().endswith("== coderl eval stopped: interrupted")


def test_live_bars_stay_on_the_terminal_and_the_hook_goes_when_the_log_closes(tmp_path: Path) -> None:
    console, shown = _console(terminal=True)
    with run_log(tmp_path, "sft", console), Progress(console=console) as progress:
        bar = progress.add_task("steps", total=2)
        console.print("a line beside the bar")
        progress.advance(bar, 2)
    assert not console._render_hooks  # both popped, whichever order
    text = (tmp_path / "sft.log").read_text()
    assert "a line beside the bar" in text and "\x1b" not in text and "steps" not in text
    assert "a line beside the bar" in shown.getvalue()
    console.print("after")  # no longer mirrored
    assert "after" not in (tmp_path / "sft.log").read_text()
