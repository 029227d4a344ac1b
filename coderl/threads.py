"""Torch work off the event loop, in a thread of its own that ends with it.

``asyncio.to_thread`` runs a call on the loop's pool, whose threads live on. A thread that runs a
parallel torch operation gets an OpenMP team of its own (libgomp keeps one per calling thread, until
that thread exits), and once the process holds more OpenMP threads than it has CPUs, libgomp stops
spinning between parallel regions and sleeps instead (its "throttled" spin count). The embedded
engine's decoding is thousands of tiny parallel regions, so one training step in a pool thread made
every later generation of the run about 1.6x slower on a 2-core machine (18 s -> 28-33 s for the same
batch, measured 2026-11-24); the same step in a thread that ends leaves it as fast as before. So the
trainer's heavy calls (set-up, updates, the warm start, weight export,
checkpoints) go through :func:`in_own_thread`.

Each such call also starts and ends by handing the C heap's free pages back to the system (glibc's
``malloc_trim``): glibc gives each thread an arena of its own, and what the engine's thread freed
(finished sequences' KV) stays resident in the engine's arena, where a training step in another
thread cannot reuse it. A training step allocates and frees gigabytes of activations and weight copies, and
glibc keeps freed pages mapped in the arena that freed them: a train step and a weight export, eight
times over, left a 135M-parameter actor's process at 12 GB resident, and the main job (with a second
held-out set) was killed for memory at 24 GB; trimmed after each call it stays at 1.9 GB.

libgomp's throttling sees only its own process. Torch processes started side by side (``coderl bench
learn --jobs 2``) each spin their full team between parallel regions while the other computes: two
one-step runs on 2 cores took 83 s each at once against 16 s alone (measured 2026-11-25).
:func:`share_of_cores` gives each such process its share of the cores instead (16 s each at once).
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import ctypes.util
import functools
import os
import threading
from collections.abc import Callable, Mapping, MutableMapping
from typing import ParamSpec, TypeVar

from coderl import allocator

P = ParamSpec("P")
T = TypeVar("T")


@functools.cache
def glibc() -> ctypes.CDLL | None:
    """The process's C library where it is glibc (it has ``malloc_trim``), else None; looked up once."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_free_memory() -> None:
    """Return the C heap's free pages to the system: glibc's ``malloc_trim``, and jemalloc's purge where
    it serves the process (:mod:`coderl.allocator`)."""
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)
    allocator.purge()


SPIN_COUNT = "1000"
"""``GOMP_SPINCOUNT`` of every coderl process (:func:`spin_briefly`)."""


def spin_briefly(env: MutableMapping[str, str] | None = None) -> None:
    """Set ``GOMP_SPINCOUNT`` to :data:`SPIN_COUNT` in ``env`` (default: this process's environment, so
    its children inherit it) unless the user chose an OpenMP wait behaviour (``GOMP_SPINCOUNT`` or
    ``OMP_WAIT_POLICY`` set). libgomp reads it once, when torch loads it, so ``import coderl`` does this
    before torch is imported; where torch was imported first, this process keeps libgomp's default.

    Why: between parallel regions libgomp's threads spin for up to 300,000 iterations before they
    sleep. The engine's decoding is thousands of tiny parallel regions, so on a machine whose cores
    other processes also use, its spinning threads take the cores from the threads that have work.
    ``coderl bench load`` (BENCHMARKS.md, 2-core machine, 2026-11-27), the engine beside two torch
    processes: 0.09x its unloaded decode rate with libgomp's default, 0.36x with 1,000 spins, 0.36x
    with none (``OMP_WAIT_POLICY=PASSIVE``; a fair share of the cores is 1/3); unloaded, both cost
    7-14% against the default on that noisy machine (in a second comparison 1,000 spins cost ~6% and
    passive ~19%). A user's validation had fallen from 15 to 2 tok/s beside two other model servers."""
    out = os.environ if env is None else env
    if not out.get("GOMP_SPINCOUNT") and not out.get("OMP_WAIT_POLICY"):
        out["GOMP_SPINCOUNT"] = SPIN_COUNT


PRIMITIVE_CACHE = "128"
"""``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` of every coderl process (:func:`bound_primitive_cache`)."""


def bound_primitive_cache(env: MutableMapping[str, str] | None = None) -> None:
    """Set ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` to :data:`PRIMITIVE_CACHE` in ``env`` (default: this
    process's environment, so its children inherit it) unless the user set it (or its older name
    ``DNNL_PRIMITIVE_CACHE_CAPACITY``). oneDNN reads it when it first builds a primitive.

    Why: on a CPU, torch's matrix products go through oneDNN, which keeps up to 1,024 compiled
    primitives, one per shape, each with its buffers. A training step's packed micro-batches have new
    lengths every time, so the cache fills with shapes that never come back. Measured 2026-11-27 on 2
    idle cores, the warm start's actor alone: the resident set grew 45 MB a step with 128 entries
    against 68 MB with the default, peaks 0.2-0.3 GB lower, step times the same; the engine's decode
    rate alone was the same within noise."""
    out = os.environ if env is None else env
    if not out.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY") and not out.get("DNNL_PRIMITIVE_CACHE_CAPACITY"):
        out["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = PRIMITIVE_CACHE


def share_of_cores(processes: int, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment (``env``, default this process's) for one of ``processes`` torch processes that
    run at once on this machine: ``OMP_NUM_THREADS`` set to its share of the cores (at least 1), unless
    ``env`` already sets it (the user's choice stands)."""
    out = dict(os.environ if env is None else env)
    if processes > 1 and not out.get("OMP_NUM_THREADS"):
        out["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // processes))
    return out


class WorkCancelled(Exception):
    """Raised at a :func:`cancel_point` inside an :func:`in_own_thread` call whose caller was cancelled
    (Ctrl-C cancels the run's task): the work stops there, and the caller waits for that."""


_cancel: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("coderl_cancel", default=None)


def cancel_point() -> None:
    """In work that :func:`in_own_thread` runs, between two steps of it (micro-batches of an update):
    raise :class:`WorkCancelled` when the caller was cancelled. Elsewhere nothing."""
    event = _cancel.get()
    if event is not None and event.is_set():
        raise WorkCancelled("the awaiting task was cancelled")


async def in_own_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``await fn(*args, **kwargs)`` run in a new thread (with this task's context variables) that
    exits when it returns, the heap's free pages released; its result, or the exception it raised.

    The thread lets go of everything it was given and everything it made before the caller can go on:
    a daemon thread still holding the last reference to a tensor when the interpreter shuts down frees
    it while finalising, torch's destructor waits for the GIL, the thread is ended under it, and the
    process aborts ("terminate called without an active exception") after a run that went well.

    When the caller is cancelled (Ctrl-C cancels the run's main task), the work is asked to stop at its
    next :func:`cancel_point` and the caller waits until the thread has let go of everything, then
    re-raises the cancellation: a process interrupted in the middle of an update exits cleanly (130),
    not from under a thread still computing (the same abort)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    ended: asyncio.Future[None] = loop.create_future()
    stop = threading.Event()
    context = contextvars.copy_context()
    context.run(_cancel.set, stop)
    job: list[tuple[Callable[..., T], tuple[object, ...], dict[str, object]]] = [(fn, args, kwargs)]
    del fn, args, kwargs

    waiting = [future]  # settle lets go of the future once set: the thread holds settle until it ends

    def settle(box: list[tuple[T | None, BaseException | None]]) -> None:
        result, error = box.pop()  # the thread's last hold on them, now the loop's
        future = waiting.pop()
        if future.cancelled():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        call, given, named = job.pop()
        box: list[tuple[T | None, BaseException | None]] = []
        try:
            release_free_memory()  # what other threads freed (the engine's KV) is returned before this allocates
            box.append((context.run(call, *given, **named), None))
        except BaseException as raised:  # handed to the awaiting task, as asyncio.to_thread does
            box.append((None, raised))
        del call, given, named  # freed here, while the caller still waits, if the call held the last ones
        release_free_memory()
        try:
            loop.call_soon_threadsafe(settle, box)
            loop.call_soon_threadsafe(_set_done, ended)
        except RuntimeError:  # the loop closed while this ran: nobody is waiting
            box.clear()

    worker = threading.Thread(target=run, name=f"coderl-{getattr(job[0][0], '__name__', 'work')}", daemon=True)
    worker.start()
    try:
        return await future
    except asyncio.CancelledError:
        stop.set()
        await ended  # a second cancellation (Ctrl-C again) stops waiting
        worker.join()  # only its last lines are left to run
        raise


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
