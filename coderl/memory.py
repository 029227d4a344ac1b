"""This process's resident memory: now, its peak, and the peak of one phase of a run.

Owns reading the kernel's figures (``/proc/self/status``: ``VmRSS`` and the high-water mark
``VmHWM``), the peak of each phase of a run (:class:`PhasePeaks`, a thread that samples the resident
set: resetting the kernel's own high-water mark would make ``/usr/bin/time`` and ``ru_maxrss``
report only the last phase's peak), and how the C heap hands out big blocks (:func:`bound_heap`). It does not free anything: returning the C heap's free pages is
:func:`coderl.threads.release_free_memory`'s job.

Why :func:`bound_heap`: glibc serves a block of at least its mmap threshold with a mapping of its own,
returned to the system when freed, and smaller ones from its heaps, which keep what they free. The
threshold starts at 128 KiB but rises to the size of any mapped block freed (up to 32 MiB), so after
the first training step a step's activations (blocks of 1-30 MB) come from the heaps, and their
holes stay resident. Pinned, every big block is a fresh mapping, and its pages fault in again on
each use. Measured 2026-11-26 on 2 idle cores, the warm start's full-weight actor with gradient
checkpointing (two steps of 8 sequences, 4.6k tokens, one process each): glibc's own threshold
4.1 GB peak, 25.3 s a step; pinned at 1 MB 3.3 GB, 34.6 s; at 4 MB 3.6 GB, 32.6 s. So time comes
first by default (no pin), and ``CODERL_MMAP_THRESHOLD_MB=1`` trades a third more step time for a
fifth less memory.

Where ``/proc`` is missing (not Linux) the peak falls back to ``ru_maxrss``, which only grows, and a
phase's peak is then the process's peak so far.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
from pathlib import Path

from coderl.threads import glibc

_STATUS = Path("/proc/self/status")


def _status_mb(field: str) -> float | None:
    try:
        text = _STATUS.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    return None


def rss_mb() -> float:
    """Resident set size now, in MB (0.0 where the kernel does not say)."""
    return _status_mb("VmRSS") or 0.0


def peak_rss_mb() -> float:
    """The resident set's high-water mark since the process started, in MB."""
    hwm = _status_mb("VmHWM")
    if hwm is not None:
        return hwm
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


class PhasePeaks:
    """The largest resident set sampled since the last :meth:`mark`: a daemon thread reads ``VmRSS``
    every ``every_s`` seconds (a peak shorter than that can be missed; the process's own high-water
    mark, :func:`peak_rss_mb`, never misses one)."""

    def __init__(self, every_s: float = 0.25) -> None:
        self.every_s = every_s
        self._peak = rss_mb()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="coderl-rss", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self.observe()

    def observe(self) -> float:
        """Sample now; the phase's peak so far, in MB."""
        now = rss_mb()
        with self._lock:
            self._peak = max(self._peak, now)
            return self._peak

    def mark(self) -> float:
        """The phase's peak in MB; the next phase starts from the resident set now."""
        peak = self.observe()
        with self._lock:
            self._peak = rss_mb()
        return peak

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (glibc's malloc.h)
HEAP_ENV = "CODERL_MMAP_THRESHOLD_MB"
DEFAULT_THRESHOLD_MB = 0.0


def heap_threshold_mb(env: dict[str, str] | None = None) -> float | None:
    """The mmap threshold :func:`bound_heap` would pin, in MB, read from ``$CODERL_MMAP_THRESHOLD_MB``
    (unset or 0: None, glibc's own rising threshold, the default); None too where glibc's
    ``MALLOC_MMAP_THRESHOLD_`` is set (the user's setting stands). A bad value is a ValueError."""
    env = dict(os.environ) if env is None else env
    if "MALLOC_MMAP_THRESHOLD_" in env:
        return None
    raw = env.get(HEAP_ENV, "")
    try:
        mb = float(raw) if raw else DEFAULT_THRESHOLD_MB
    except ValueError:
        raise ValueError(f"{HEAP_ENV}={raw!r}: give a size in MB (e.g. 1), or 0 for glibc's default") from None
    if mb < 0 or mb > 32:
        raise ValueError(f"{HEAP_ENV}={raw!r}: give a size from 0 to 32 MB (glibc's largest threshold)")
    return mb or None


def bound_heap(env: dict[str, str] | None = None) -> float | None:
    """Pin glibc's mmap threshold (module doc) at :func:`heap_threshold_mb`, for the rest of the process;
    the threshold in MB it set, or None where it set nothing."""
    mb = heap_threshold_mb(env)
    if mb is None or not sys.platform.startswith("linux"):
        return None
    libc = glibc()
    if libc is None or not hasattr(libc, "mallopt"):  # not glibc (musl has neither)
        return None
    return mb if libc.mallopt(_M_MMAP_THRESHOLD, int(mb * 2**20)) == 1 else None
