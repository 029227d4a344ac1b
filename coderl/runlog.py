"""A run's own log: ``RUN_DIR/<command>.log``, what the command said, kept with what it made.

The console is for the person watching; the log is for later — a run started from a terminal that has
since closed, a run to compare with another, a bug report. :func:`run_log` appends to it, each line
timestamped and plain (no colour, no live bars):

- every line the command prints on its console (its own :class:`rich.console.Console`): the phases,
  validations and their side-by-side table, the signal warnings, the plain progress lines where no
  terminal is attached;
- coderl's log records from INFO up (which engine and actor started with what, each weight update and
  policy version) and every library's warnings, none of which the console shows below WARNING;
- how the command ended: done, or the error, interrupt or traceback that stopped it.

A resumed run appends to the same file under a line that says so. Lines are written as they come
(line-buffered), so a crash or SIGKILL loses none already said.
"""

from __future__ import annotations

import asyncio
import io
import logging
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from rich.console import Console, ConsoleRenderable, RenderHook
from rich.control import Control

from coderl.errors import CoderlError
from coderl.signals import terminated

WIDTH = 160
"""Columns of the log's plain rendering: wide enough that tables and long lines stay whole."""


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


class _Writer:
    """Timestamped lines into the open log file, one writer at a time (the console's prints come from
    several threads: the progress ticker's, the engine's log records)."""

    def __init__(self, file: IO[str]) -> None:
        self.file = file
        self.lock = threading.Lock()

    def lines(self, text: str, prefix: str = "") -> None:
        stamp = _stamp()
        with self.lock:
            for line in text.rstrip("\n").split("\n"):
                self.file.write(f"{stamp} {prefix}{line.rstrip()}\n")


class _Mirror(RenderHook):
    """Renders what the console prints, plainly, into the log; hands it on to the console unchanged."""

    def __init__(self, writer: _Writer) -> None:
        self.writer = writer
        self.plain = Console(
            file=io.StringIO(), width=WIDTH, color_system=None, force_terminal=False, highlight=False,
            emoji=False, soft_wrap=False,
        )  # fmt: skip

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        shown = [r for r in renderables if not isinstance(r, Control)]  # a live display's cursor moves
        if shown:
            try:
                with self.plain.capture() as captured:
                    self.plain.print(*shown, sep="", end="")
                text = captured.get()
                if text.strip():
                    self.writer.lines(text)
            except Exception:  # the log must never break what the console shows
                logging.getLogger(__name__).debug("a console line was not written to the run's log", exc_info=True)
        return renderables


class _Records(logging.Handler):
    """coderl's records from INFO, anyone's from WARNING, into the log."""

    def __init__(self, writer: _Writer) -> None:
        super().__init__(logging.INFO)
        self.writer = writer
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.split(".", 1)[0] == "coderl"

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.writer.lines(self.format(record))
        except Exception:
            self.handleError(record)


@contextmanager
def _coderl_info_kept_off_the_console() -> Iterator[None]:
    """Let coderl's INFO records reach the log's handler without the console's handlers (which show
    WARNING and up, DEBUG under ``-v``) printing them: each root handler with no level of its own gets
    the root's, for as long as the log is open."""
    root, ours = logging.getLogger(), logging.getLogger("coderl")
    raised = [h for h in root.handlers if h.level == logging.NOTSET]
    for h in raised:
        h.setLevel(root.level)
    before = ours.level
    if ours.getEffectiveLevel() > logging.INFO:
        ours.setLevel(logging.INFO)
    try:
        yield
    finally:
        ours.setLevel(before)
        for h in raised:
            h.setLevel(logging.NOTSET)


@contextmanager
def run_log(run_dir: Path, command: str, console: Console, resumed: bool = False) -> Iterator[Path]:
    """Write ``run_dir/<command>.log`` while the block runs (module doc); yields its path."""
    path = run_dir / f"{command}.log"
    with path.open("a", buffering=1, encoding="utf-8") as file:
        writer = _Writer(file)
        writer.lines(f"coderl {command} {'resumed' if resumed else 'started'} in {run_dir}", "== ")
        mirror, records = _Mirror(writer), _Records(writer)
        console.push_render_hook(mirror)
        logging.getLogger().addHandler(records)
        try:
            with _coderl_info_kept_off_the_console():
                yield path
        except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C or SIGTERM, outside or inside a command's loop
            writer.lines(f"coderl {command} stopped: {'terminated (SIGTERM)' if terminated() else 'interrupted'}", "== ")
            raise
        except CoderlError as exc:  # bad input or a failed part, said as the console will say it
            writer.lines(f"coderl {command} failed: {exc}", "== ")
            raise
        except BaseException as exc:
            writer.lines("".join(traceback.format_exception(exc)[-60:]), "   ")  # its last 60 lines
            writer.lines(f"coderl {command} failed: {type(exc).__name__}: {exc}", "== ")
            raise
        else:
            writer.lines(f"coderl {command} done", "== ")
        finally:
            logging.getLogger().removeHandler(records)
            _pop_hook(console, mirror)


def _pop_hook(console: Console, hook: RenderHook) -> None:
    """Remove ``hook`` from the console (rich pops only the last one pushed; a live display may have
    pushed its own after it, and popped it since or not)."""
    hooks = console._render_hooks
    with console._lock:
        if hook in hooks:
            hooks.remove(hook)
