"""The C allocator of a ``coderl`` command's process: jemalloc where the machine has it, glibc's else.

A training step on CPU allocates and frees gigabytes in blocks of 1-100 MB (activations, their
gradients, the vocabulary's logits a chunk at a time) from several threads (the actor's, OpenMP's, the
engine's). glibc's malloc keeps what a thread freed in that thread's arena, fragmented, so a step's
peak resident set is far above the tensors alive in it: the warm start's actor peaked at 3.0-3.5 GB
resident while torch's profiler counted at most 2.0 GB of live tensors. jemalloc reuses freed blocks
across threads and sizes: the same actor, same steps, peaked 0.5-0.8 GB lower (2026-11-27, 2 cores,
probes side by side, one thread each; figures in docs/training.md, "Memory"). It runs with
:data:`JEMALLOC_CONF` unless ``MALLOC_CONF`` is set.

An allocator is chosen when a process starts, so :func:`preload_jemalloc` runs the command again
(``execve``: same process id, arguments, standard streams) with ``LD_PRELOAD`` naming jemalloc, once,
before torch is imported; :func:`forget_preload` then takes ``LD_PRELOAD`` (and the ``MALLOC_CONF`` it
set) out of the environment again, so that what the command starts (sandboxes, pytest, git, pip) runs with the system's allocator
and never sees a library path that a sandbox's file system lacks.

Not done where: the platform is not Linux; ``CODERL_ALLOCATOR=system``; the user set ``LD_PRELOAD``
(their choice stands); no jemalloc library is found; or the re-run already happened (no loop). Only the
``coderl`` command and ``python -m coderl`` do it; importing coderl as a library changes nothing.

Owns: that choice and its environment. Must not: import torch, or read a config (it runs first).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

ENV = "CODERL_ALLOCATOR"
"""``jemalloc`` (the default: used where found) or ``system`` (the C library's malloc)."""
CHOICES = ("jemalloc", "system")
JEMALLOC_CONF = "thp:always"
"""jemalloc's settings on the re-run (where ``MALLOC_CONF`` is unset): its arenas in transparent huge
pages. jemalloc hands the pages of big freed blocks back to the system, and a step's next activations
fault them in again, 4 KiB at a time: with its defaults the warm start's actor took 4.6x glibc's page
faults and its steps ~10% longer; in huge pages, half glibc's faults and 3% longer (module doc)."""
_MARK = "CODERL_PRELOADED"
"""Set on the re-run, for :func:`forget_preload` (and so that it never runs again): ``conf`` where the
re-run set ``MALLOC_CONF`` too, ``library`` where the user's ``MALLOC_CONF`` was kept."""
_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
    "/usr/lib64/libjemalloc.so.2",
    "/usr/lib/libjemalloc.so.2",
    "/usr/local/lib/libjemalloc.so.2",
)


class AllocatorError(ValueError):
    """``CODERL_ALLOCATOR`` holds something other than :data:`CHOICES`."""


def choice(env: Mapping[str, str] | None = None) -> str:
    """The allocator asked for: ``$CODERL_ALLOCATOR``, default ``jemalloc``."""
    value = (os.environ if env is None else env).get(ENV, "").strip().lower() or "jemalloc"
    if value not in CHOICES:
        raise AllocatorError(
            f"{ENV}={value!r} is not an allocator coderl knows; use one of {', '.join(CHOICES)}"
        )
    return value


@functools.cache
def jemalloc_library() -> str | None:
    """jemalloc's shared library on this machine (a path), or None."""
    for path in _CANDIDATES:
        if Path(path).is_file():
            return path
    name = ctypes.util.find_library("jemalloc")  # e.g. 'libjemalloc.so.2', found through ldconfig's cache
    return name or None


def preload_env(env: Mapping[str, str], platform: str = sys.platform) -> dict[str, str] | None:
    """The environment to run this command again with jemalloc preloaded, or None where it should not
    be (module doc)."""
    if not platform.startswith("linux") or _MARK in env or env.get("LD_PRELOAD", "").strip():
        return None
    if choice(env) != "jemalloc":
        return None
    library = jemalloc_library()
    if library is None:
        return None
    conf = {} if "MALLOC_CONF" in env else {"MALLOC_CONF": JEMALLOC_CONF}  # the user's settings stand
    return {**env, "LD_PRELOAD": library, **conf, _MARK: "conf" if conf else "library"}


def preload_jemalloc(argv: Sequence[str] | None = None) -> None:
    """Run this command again with jemalloc preloaded where :func:`preload_env` says so (never returns
    then); else return. ``argv``: the interpreter's own command line (``sys.orig_argv``)."""
    new_env = preload_env(os.environ)
    if new_env is None or not sys.executable:
        return
    argv = list(sys.orig_argv if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, argv, new_env)
    except OSError:  # could not run again (odd interpreter path): go on with the system's allocator
        return


def forget_preload(env: MutableMapping[str, str] | None = None) -> None:
    """After the re-run: ``LD_PRELOAD`` out of the environment again (it was empty before), so child
    processes do not inherit it; the library stays loaded in this process."""
    env = os.environ if env is None else env
    mark = env.pop(_MARK, None)
    if mark is not None:
        env.pop("LD_PRELOAD", None)
        if mark == "conf":
            env.pop("MALLOC_CONF", None)


def env_for(name: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process (one that is not the ``coderl`` command) that should run on
    allocator ``name``: ``LD_PRELOAD`` set to jemalloc's library (with :data:`JEMALLOC_CONF` unless
    ``MALLOC_CONF`` is set), or taken out. A benchmark compares the two this way."""
    if name not in CHOICES:
        raise AllocatorError(f"allocator {name!r} is not one coderl knows; use one of {', '.join(CHOICES)}")
    out = {k: v for k, v in (os.environ if env is None else env).items() if k not in ("LD_PRELOAD", _MARK)}
    library = jemalloc_library()
    if name == "jemalloc":
        if library is None:
            raise AllocatorError(
                "no jemalloc library on this machine (Debian/Ubuntu: apt-get install libjemalloc2)"
            )
        out["LD_PRELOAD"] = library
        out.setdefault("MALLOC_CONF", JEMALLOC_CONF)  # as the coderl command runs it
    return out


@functools.cache
def _mallctl() -> Any | None:
    """jemalloc's ``mallctl`` where it serves this process, else None; looked up once."""
    try:
        return getattr(ctypes.CDLL(None), "mallctl", None)
    except OSError:
        return None


def active() -> str:
    """The allocator serving this process: ``jemalloc`` where its ``mallctl`` is loaded, else ``system``."""
    return "jemalloc" if _mallctl() is not None else "system"


def purge() -> None:
    """Return jemalloc's free pages (every arena's) to the system now; nothing under another allocator."""
    mallctl = _mallctl()
    if mallctl is not None:  # MALLCTL_ARENAS_ALL (4096): every arena; a void command, no old or new value
        mallctl(b"arena.4096.purge", None, None, None, ctypes.c_size_t(0))
