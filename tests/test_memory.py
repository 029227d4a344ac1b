"""coderl.memory: the process's resident set, its per-phase peak, and the pinned mmap threshold that
keeps freed activations from staying resident."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from coderl.memory import HEAP_ENV, PhasePeaks, bound_heap, heap_threshold_mb, peak_rss_mb, rss_mb

# frees 30 blocks of 10 MB out of 31, the last kept (so the heap cannot shrink from its top), after a
# 20 MB block was freed (which raises glibc's own threshold to 20 MB): what stays resident?
HOLES = """
import ctypes, ctypes.util, json, sys
from coderl.memory import bound_heap, rss_mb
bound_heap(dict(json.loads(sys.argv[1])))
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
big = libc.malloc(20 << 20); ctypes.memset(big, 1, 20 << 20); libc.free(big)
before = rss_mb()
blocks = [libc.malloc(10 << 20) for _ in range(31)]
for b in blocks:
    ctypes.memset(b, 1, 10 << 20)
for b in blocks[:-1]:
    libc.free(b)
print(json.dumps({"kept_mb": rss_mb() - before}))
"""


def _kept(env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", HOLES, json.dumps(env)], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout)["kept_mb"])


def test_a_pinned_threshold_returns_freed_blocks_that_glibc_would_keep() -> None:
    assert _kept({}) > 200  # glibc's rising threshold (the default): 300 MB of holes stay resident
    assert _kept({HEAP_ENV: "1"}) < 40  # pinned at 1 MB: each block was a mapping, unmapped when freed


def test_the_threshold_setting_is_checked_and_a_user_setting_stands() -> None:
    """Read only: pinning it here would slow every later test in this process (coderl.memory)."""
    assert heap_threshold_mb({"MALLOC_MMAP_THRESHOLD_": "65536", HEAP_ENV: "2"}) is None  # glibc's own wins
    assert heap_threshold_mb({HEAP_ENV: "0"}) is None
    assert heap_threshold_mb({HEAP_ENV: "2"}) == 2.0
    assert heap_threshold_mb({}) is None and bound_heap({}) is None  # time first by default
    for bad in ("lots", "-1", "64"):
        with pytest.raises(ValueError, match=rf"{HEAP_ENV}='{bad}'"):
            heap_threshold_mb({HEAP_ENV: bad})


def test_a_phase_peak_starts_again_at_each_mark_and_the_process_peak_stays() -> None:
    import mmap

    peaks = PhasePeaks(every_s=0.01)
    try:
        assert rss_mb() > 10 and peak_rss_mb() >= rss_mb()
        # a mapping of its own, not malloc's: freeing it unmaps it whatever the process's heap holds (in a
        # pytest worker that ran other tests first, malloc may keep a freed block in its heap)
        block = mmap.mmap(-1, 200 << 20)
        for page in range(0, 200 << 20, mmap.PAGESIZE):
            block[page] = 1  # touched: resident
        high = peaks.mark()
        assert high > rss_mb() - 20 and high >= 200
        block.close()
        peaks.mark()  # this phase began with the block still resident
        assert peaks.mark() < high - 150  # the next one began without it
        assert peak_rss_mb() >= high - 5  # (its counters lag a little) the kernel's high-water mark (what /usr/bin/time reads) is untouched
    finally:
        peaks.close()
