"""The serving process's heap settling (coderl.proxy.standalone.settle_heap), in a process of its own:
it freezes what start-up left alive and raises the young generation's threshold, and the frozen heap
stays out of every later collection."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import gc
from coderl.proxy.standalone import GC_GEN0_THRESHOLD, settle_heap
start_heap = [[i] for i in range(1000)]  # alive at start-up, like a tokenizer's tables
before = gc.get_threshold()
settle_heap()
assert gc.get_freeze_count() >= 1000, gc.get_freeze_count()
assert gc.get_threshold() == (GC_GEN0_THRESHOLD, before[1], before[2]), gc.get_threshold()
tracked = len(gc.get_objects())  # the collector no longer sees the frozen heap
assert tracked < 1000 and not any(o is start_heap[0] for o in gc.get_objects()), tracked
print("ok")
"""


def test_settle_heap_freezes_the_start_up_heap() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
