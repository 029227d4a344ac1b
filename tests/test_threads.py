"""``in_own_thread``: the call runs in a new thread that has ended once it returns (so no OpenMP team
outlives a training step), with its result, its exception and the caller's context variables; the
native libraries' settings ``import coderl`` makes."""

from __future__ import annotations

import asyncio
import contextvars
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from coderl.threads import cancel_point, in_own_thread

WHO = contextvars.ContextVar("who", default="nobody")


def test_the_call_runs_in_a_thread_that_ends_with_it() -> None:
    ran_in: list[threading.Thread] = []

    def work(x: int, *, y: int) -> tuple[int, str]:
        ran_in.append(threading.current_thread())
        return x + y, WHO.get()

    async def main() -> tuple[int, str]:
        WHO.set("caller")
        return await in_own_thread(work, 1, y=2)

    assert asyncio.run(main()) == (3, "caller")
    (thread,) = ran_in
    assert thread is not threading.main_thread()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_the_exception_reaches_the_caller_and_a_second_call_gets_a_new_thread() -> None:
    idents: list[int] = []

    def fail() -> None:
        idents.append(threading.get_ident())
        raise ValueError("bad value 7")

    async def main() -> None:
        for _ in range(2):
            with pytest.raises(ValueError, match="bad value 7"):
                await in_own_thread(fail)

    asyncio.run(main())
    assert len(idents) == 2 and threading.main_thread().ident not in idents


def test_freed_heap_pages_go_back_to_the_system() -> None:
    """Mid-sized blocks (under glibc's mmap threshold: they come from the heap), each followed by a
    small one that stays alive: freeing the big ones leaves holes glibc keeps mapped, unless trimmed."""
    if not Path("/proc/self/statm").is_file():
        pytest.skip("needs /proc (Linux)")

    def resident_mb() -> float:
        return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20

    def churn() -> tuple[float, list[bytearray]]:
        pairs = [(bytearray(64 * 1024), bytearray(64)) for _ in range(6000)]  # ~375 MB of heap chunks
        peak = resident_mb()
        return peak, [small for _, small in pairs]  # the big blocks are freed; the small ones pin the heap

    async def main() -> tuple[float, float]:
        before = resident_mb()
        peak, pins = await in_own_thread(churn)
        kept = resident_mb() - before
        del pins
        return peak - before, kept

    grown, kept = asyncio.run(main())
    assert grown > 300 and kept < 100, (grown, kept)


def test_processes_side_by_side_each_get_their_share_of_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import subprocess
    import sys

    from coderl.threads import share_of_cores

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert share_of_cores(1, {"A": "1"}) == {"A": "1"}  # alone: torch's own choice
    assert share_of_cores(2, {})["OMP_NUM_THREADS"] == "4"
    assert share_of_cores(3, {})["OMP_NUM_THREADS"] == "2"
    assert share_of_cores(16, {})["OMP_NUM_THREADS"] == "1"
    assert share_of_cores(2, {"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "3"  # the user's stands
    monkeypatch.undo()

    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    want = max(1, (os.cpu_count() or 1) // 2)
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        env=share_of_cores(2, env), capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert int(out.stdout) == want  # torch in the child takes it


def test_the_thread_lets_go_of_what_it_was_given_and_made_before_the_caller_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A daemon thread left holding the last reference to a tensor at interpreter shutdown aborts the
    process (torch frees it waiting for the GIL while the thread is being ended): the argument that
    only the call held is gone before the thread signals, and the result lives only with the caller."""
    import weakref

    import coderl.threads

    class Thing:
        pass

    seen: list[bool] = []
    argument: list[weakref.ref[Thing]] = []
    def trimmed() -> None:  # called before the work (nothing to see yet) and after it
        if argument:
            seen.append(argument[0]() is None)

    monkeypatch.setattr(coderl.threads, "release_free_memory", trimmed)

    def work(thing: Thing) -> Thing:
        argument.append(weakref.ref(thing))
        return Thing()

    async def main() -> weakref.ref[Thing]:
        return weakref.ref(await in_own_thread(work, Thing()))  # the result dropped at once

    made = asyncio.run(main())  # the loop's own hold on the result ends with it; the thread has none
    assert made() is None and seen == [True]


def test_a_cancelled_caller_stops_the_work_at_its_next_cancel_point_and_waits_for_the_thread() -> None:
    """Ctrl-C in the middle of an update cancels the run's task: the update stops between two
    micro-batches and the thread has ended before the cancellation goes on (no thread left computing
    while the interpreter shuts down)."""
    steps: list[int] = []
    threads: list[threading.Thread] = []

    def update() -> None:
        threads.append(threading.current_thread())
        for i in range(200):
            cancel_point()
            steps.append(i)
            time.sleep(0.01)

    async def main() -> float:
        task = asyncio.create_task(in_own_thread(update))
        await asyncio.sleep(0.2)
        task.cancel()
        began = time.perf_counter()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not threads[0].is_alive()  # waited for
        return time.perf_counter() - began

    waited = asyncio.run(main())
    assert 5 <= len(steps) < 100 and waited < 1.0  # stopped at a cancel point, long before the end
    cancel_point()  # outside such work: nothing to stop


@pytest.mark.parametrize(
    ("given", "expected"),
    [({}, "128"), ({"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "512"}, "512"), ({"DNNL_PRIMITIVE_CACHE_CAPACITY": "8"}, None)],
)
def test_import_coderl_bounds_onednns_primitive_cache_unless_the_user_chose(
    given: dict[str, str], expected: str | None
) -> None:
    env = {k: v for k, v in os.environ.items() if "PRIMITIVE_CACHE_CAPACITY" not in k}
    code = "import os, coderl; print(os.environ.get('ONEDNN_PRIMITIVE_CACHE_CAPACITY'))"
    out = subprocess.run([sys.executable, "-c", code], env={**env, **given}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(expected)
