"""Machine description and BENCHMARKS.md section writing shared by every benchmark."""

from __future__ import annotations

import os
import platform
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from coderl import allocator


def machine_busy_cpu_s() -> float | None:
    """CPU-seconds the whole machine has spent busy since boot (all processes, all cores; Linux
    /proc/stat), or None where that cannot be read. The difference over a run is what it cost."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    ticks = [int(x) for x in fields[:8]]
    busy = sum(ticks) - ticks[3] - ticks[4]  # minus idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "allocator": allocator.active(),
    }


def command_line() -> str:
    return "coderl " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else "coderl"


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not values:
        return float("nan")
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def write_section(path: Path, name: str, body: str) -> None:
    """Replace (or append) the section ``name`` of a Markdown file, delimited by HTML comments."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    block = (
        f"{start}\n{body.rstrip()}\n\n_Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}._\n{end}"
    )
    text = path.read_text() if path.exists() else "# Benchmarks\n\nFigures written by `coderl bench ...`.\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    text = (
        pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    )
    path.write_text(text)
