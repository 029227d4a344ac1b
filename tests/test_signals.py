"""Ctrl-C and SIGTERM in :func:`coderl.signals.run` are one stop request: the first of either lets the
command's main task unwind, a second of either ends it at once; the exit code names the first."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

CHILD = r"""
import asyncio, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the test process passed down
from coderl.signals import run, stop_on_sigterm, terminated

async def main():
    try:
        print("ready", flush=True)
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        print("unwinding", flush=True)
        await asyncio.sleep(3)  # a clean-up that takes a while (sandboxes closing)
        print("unwound", flush=True)
        raise

with stop_on_sigterm():
    try:
        run(main())
    except KeyboardInterrupt:
        sys.exit(143 if terminated() else 130)
"""


def _stop(*sigs: int) -> tuple[int, str, float]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    sent = time.monotonic()
    for n, sig in enumerate(sigs):
        if n:
            assert proc.stdout.readline() == "unwinding\n"
        proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    return proc.returncode, out, time.monotonic() - sent


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_one_stop_signal_lets_the_main_task_unwind(sig: int, code: int) -> None:
    got, out, took = _stop(sig)
    assert got == code and "unwound" in out and took >= 3


@pytest.mark.parametrize(
    ("first", "second", "code"),
    [(signal.SIGINT, signal.SIGTERM, 130), (signal.SIGTERM, signal.SIGINT, 143), (signal.SIGTERM, signal.SIGTERM, 143)],
)
def test_a_second_stop_signal_of_either_kind_ends_it_at_once(first: int, second: int, code: int) -> None:
    got, out, took = _stop(first, second)
    assert got == code and "unwound" not in out and took < 3
