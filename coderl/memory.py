"""This process's resident memory: now, its peak, and the peak of one phase of a run.

Owns reading the kernel's figures (``/proc/self/status``: ``VmRSS`` and the high-water mark
``VmHWM``) and resetting the high-water mark between phases (writing ``5`` to
``/proc/self/clear_refs``), so a run can say which phase needed how much. It does not free anything:
returning the C heap's free pages is :func:`coderl.threads.release_free_memory`'s job.

Where ``/proc`` is missing (not Linux) the peak falls back to ``ru_maxrss``, which only grows, and a
phase's peak is then the process's peak so far.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


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
    """The resident set's high-water mark, in MB: since the last :func:`reset_peak`, or since the
    process started."""
    hwm = _status_mb("VmHWM")
    if hwm is not None:
        return hwm
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


def reset_peak() -> bool:
    """Start a new high-water mark at the current resident set; False where the kernel cannot."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True
