"""Waiting for many coroutines at once without leaving any of them running behind the caller.

``asyncio.gather`` returns as soon as one child fails, or as soon as the *first* child has finished
cancelling when the caller is cancelled (Ctrl-C, SIGTERM), while the other children are still
unwinding. A caller that then tears down what they share (the sandboxes' tear-downs, the engine, the
trajectory store) races them, and ``asyncio.run`` later cancels them mid-close: sandboxes were left
unclosed after a Ctrl-C. :func:`gather_all` returns or raises only once every child has finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


async def gather_all(aws: Iterable[Awaitable[T]]) -> list[T]:
    """The children's results in order, as ``asyncio.gather``; when one raises or the caller is
    cancelled, every other child is cancelled and awaited (:func:`settle`) before the first error is
    raised (a cancel that came while waiting wins over a child's error)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        await settle(tasks)
        raise


async def settle(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel the unfinished ``tasks`` not cancelled yet and wait until every one has finished. Once
    is enough: a second cancel would cut short the clean-up the first one started. A cancel of the
    caller while it waits does not cut the wait short; it is raised (CancelledError) once the wait is
    over. The tasks' own errors are retrieved, not raised (they follow from whatever stopped them)."""
    tasks = list(tasks)
    pending = {t for t in tasks if not t.done()}
    for t in pending:
        if not (isinstance(t, asyncio.Task) and t.cancelling()):
            t.cancel()
    cancelled = False
    while pending:
        try:
            _, pending = await asyncio.wait(pending)
        except asyncio.CancelledError:
            cancelled = True
    for t in tasks:
        if not t.cancelled():
            t.exception()
    if cancelled:
        raise asyncio.CancelledError
