"""gather_all: no child is still running when it returns or raises (a cancelled asyncio.gather
raises as soon as its first child has finished cancelling)."""

from __future__ import annotations

import asyncio

import pytest

from coderl.gathering import gather_all, settle


async def _child(delay: float, unwind: float, log: list[str], name: str) -> str:
    try:
        await asyncio.sleep(delay)
        return name
    finally:
        if unwind:  # a clean-up that takes time (a sandbox's close)
            await asyncio.shield(asyncio.sleep(unwind))
        log.append(name)


@pytest.mark.parametrize("gather", ["asyncio", "gather_all"])
async def test_a_cancel_returns_only_once_every_child_has_unwound(gather: str) -> None:
    log: list[str] = []
    children = [_child(10, 0.0, log, "quick"), _child(10, 0.2, log, "slow")]
    if gather == "asyncio":
        outer = asyncio.ensure_future(asyncio.gather(*children))
    else:
        outer = asyncio.ensure_future(gather_all(children))
    await asyncio.sleep(0.05)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    if gather == "asyncio":  # the flaw gather_all exists for: "slow" is still unwinding
        assert log == ["quick"]
        await asyncio.sleep(0.3)
    else:
        assert sorted(log) == ["quick", "slow"]


async def test_results_in_order_and_a_failure_waits_for_the_others() -> None:
    log: list[str] = []
    assert await gather_all([_child(0.02, 0, log, "a"), _child(0.01, 0, log, "b")]) == ["a", "b"]

    async def boom() -> str:
        await asyncio.sleep(0.01)
        raise ValueError("boom")

    log.clear()
    with pytest.raises(ValueError, match="boom"):
        await gather_all([boom(), _child(10, 0.1, log, "slow")])
    assert log == ["slow"]  # cancelled and unwound before the error came out


async def test_settle_rides_out_a_second_cancel() -> None:
    log: list[str] = []
    child = asyncio.ensure_future(_child(10, 0.1, log, "c"))
    waiter = asyncio.ensure_future(settle([child]))
    await asyncio.sleep(0.01)
    waiter.cancel()  # the caller cancelled again while it waits
    await asyncio.sleep(0.01)
    assert not waiter.done()
    with pytest.raises(asyncio.CancelledError):  # not swallowed: raised once the wait is over
        await waiter
    assert child.done() and log == ["c"]


async def test_a_cancel_during_the_wait_after_a_childs_error_wins() -> None:
    """A Ctrl-C / SIGTERM that lands while gather_all waits for the others after one failed must stop
    the caller, not be dropped for the child's error."""
    log: list[str] = []

    async def boom() -> str:
        await asyncio.sleep(0.01)
        raise ValueError("boom")

    outer = asyncio.ensure_future(gather_all([boom(), _child(10, 0.2, log, "slow")]))
    await asyncio.sleep(0.05)  # boom has raised; gather_all waits for "slow" to unwind
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert log == ["slow"]
