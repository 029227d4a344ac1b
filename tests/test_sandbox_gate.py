"""BurstGate: turns for commands, first come first served, each held until the command ends or its
hold passes."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import time
import warnings

import pytest

from coderl.sandbox import SandboxSpec, create_sandbox
from coderl.sandbox import bwrap as bwrap_module
from coderl.sandbox.gate import BurstGate, host_gate, host_slots


async def _job(log: list[tuple[str, float, float]], name: str, seconds: float) -> str:
    start = time.monotonic()
    await asyncio.sleep(seconds)
    log.append((name, start, time.monotonic()))
    return name


async def test_short_work_takes_turns_in_arrival_order() -> None:
    gate, log = BurstGate(1), []
    names = await asyncio.gather(*(gate.run(_job(log, n, 0.05), hold_s=5) for n in "abc"))
    assert names == ["a", "b", "c"] and [n for n, _, _ in log] == ["a", "b", "c"]
    for (_, _, end), (_, start, _) in itertools.pairwise(log):
        assert start >= end - 0.005  # each began once the one before had ended


async def test_long_work_gives_its_turn_up_after_the_hold() -> None:
    gate, log = BurstGate(1), []
    t0 = time.monotonic()
    await asyncio.gather(
        gate.run(_job(log, "long", 0.6), hold_s=0.05), gate.run(_job(log, "short", 0.01), hold_s=0.05)
    )
    (short,) = [start for name, start, _ in log if name == "short"]
    assert 0.04 <= short - t0 < 0.3  # waited for the hold, not for the long one's end
    assert [n for n, _, _ in log] == ["short", "long"]


async def test_no_hold_means_no_turns() -> None:
    gate, log = BurstGate(1), []
    await asyncio.gather(*(gate.run(_job(log, n, 0.2), hold_s=0) for n in "ab"))
    starts = sorted(start for _, start, _ in log)
    assert starts[1] - starts[0] < 0.1


async def test_cancelled_callers_give_their_turn_back_and_leave_no_unawaited_work() -> None:
    gate, log = BurstGate(1), []
    first = asyncio.ensure_future(gate.run(_job(log, "first", 5), hold_s=5))
    await asyncio.sleep(0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine never awaited would warn when collected
        queued = asyncio.ensure_future(gate.run(_job(log, "queued", 0), hold_s=5))
        await asyncio.sleep(0.01)
        queued.cancel()  # while waiting for a turn
        first.cancel()  # while holding one: its work is cancelled too
        for fut in (queued, first):
            with pytest.raises(asyncio.CancelledError):
                await fut
    t0 = time.monotonic()
    assert await asyncio.wait_for(gate.run(_job(log, "next", 0), hold_s=5), 1) == "next"
    assert time.monotonic() - t0 < 0.5 and [n for n, _, _ in log] == ["next"]


def test_bad_slots_and_host_slots() -> None:
    with pytest.raises(ValueError, match="at least 1 slot, got 0"):
        BurstGate(0)
    assert host_slots() >= 3


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
async def test_bwrap_commands_go_through_the_host_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one turn and a long hold, two sandboxes' commands run one after the other; with
    ``burst_gate_ms=0`` at once."""
    gate = BurstGate(1)
    monkeypatch.setattr(bwrap_module, "host_gate", lambda: gate)
    assert host_gate() is host_gate()  # one per loop

    async def starts(hold_ms: float) -> list[float]:
        spec = SandboxSpec(burst_gate_ms=hold_ms)
        boxes = [await create_sandbox(spec) for _ in range(2)]
        try:
            for sb in boxes:
                await sb.exec("true")  # the first command is a one-shot; later ones go to the agent
            out = await asyncio.gather(*(sb.exec("date +%s.%N; sleep 0.4") for sb in boxes))
            return sorted(float(r.stdout.split()[0]) for r in out)
        finally:
            for sb in boxes:
                await sb.close()

    one_after_other = await starts(5000)
    assert one_after_other[1] - one_after_other[0] >= 0.35
    together = await starts(0)
    assert together[1] - together[0] < 0.3
