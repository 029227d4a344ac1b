"""Shared machinery of the backends whose workspace is a folder on this host (bwrap, process)."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from coderl.errors import SandboxError
from coderl.sandbox.base import Sandbox, SandboxSpec, relative_path
from coderl.sandbox.hostfs import HostWorkspace
from coderl.sandbox.runner import EXEC_POOL

READ_LIMIT = 64 << 20
T = TypeVar("T")
log = logging.getLogger(__name__)


# Workspace file work (fill, read, write) is short and holds the GIL for most of its time: more
# threads than this only add thread starts and GIL hand-overs (256 sandboxes filling at once made
# ~200 threads). Making a workspace (a mount, which waits for the host's mount table while bwrap
# starts read it) and removing one (a tree of many files) can take long: they run in the large pool,
# where processes are tended.
HOST_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="coderl-host")


async def _in_pool(fn: Callable[..., T], *args: Any, pool: Executor = HOST_POOL) -> T:
    """Blocking host work off the event loop, in ``pool``."""
    return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


class LocalSandbox(Sandbox, abc.ABC):
    """File operations on a host workspace, serialised with exec by one lock (so no sandboxed
    process runs while the host touches the workspace)."""

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.id = uuid.uuid4().hex[:12]
        self._lock = asyncio.Lock()
        self._ws: HostWorkspace | None = None

    @abc.abstractmethod
    def _create_workspace(self) -> HostWorkspace:
        """Make the empty workspace (runs in a worker thread)."""

    @abc.abstractmethod
    def _destroy_workspace(self, ws: HostWorkspace) -> None:
        """Remove the workspace and release what it held (runs in a worker thread)."""

    async def start(self, warm: bool = False) -> None:
        if self._ws is not None:
            return
        created = asyncio.ensure_future(_in_pool(self._create_workspace, pool=EXEC_POOL))
        try:
            self._ws = await asyncio.shield(created)
        except asyncio.CancelledError:
            # the worker thread makes the workspace (a tmpfs mount, a uid lease) whether anyone waits for
            # it or not: it is kept, so that close() (create_sandbox's, on this cancel) removes it; a Ctrl-C
            # here left a workspace mounted (tests/test_interrupt.py)
            with contextlib.suppress(Exception):
                self._ws = await created
            log.debug("sandbox %s: start cancelled (workspace %s)", self.id, self._ws and self._ws.root)
            raise
        log.debug("sandbox %s: workspace %s", self.id, self._ws.root)
        if warm:
            await self.warm()  # bwrap: its exec agent starts while the workspace fills
        if self.spec.workspace is not None:
            await _in_pool(self._fill, self._ws, Path(self.spec.workspace))

    def _fill(self, ws: HostWorkspace, source: Path) -> None:
        if not source.exists():
            raise SandboxError(f"sandbox workspace source {str(source)!r} does not exist")
        ws.upload(source, "")

    async def read_file(self, path: str) -> bytes:
        ws = self._require()
        async with self._lock:
            return await _in_pool(ws.read, relative_path(self.spec, path), READ_LIMIT)

    async def write_file(self, path: str, data: bytes | str) -> None:
        ws = self._require()
        raw = data.encode() if isinstance(data, str) else data
        async with self._lock:
            await _in_pool(ws.write, relative_path(self.spec, path), raw)

    async def upload(self, local_dir: str | Path, path: str = ".") -> None:
        ws = self._require()
        async with self._lock:
            await _in_pool(ws.upload, Path(local_dir), relative_path(self.spec, path))

    async def download(self, path: str, local_dir: str | Path) -> list[str]:
        ws = self._require()
        async with self._lock:
            return await _in_pool(ws.download, relative_path(self.spec, path), Path(local_dir))

    async def _close(self) -> None:
        log.debug("sandbox %s: closing", self.id)
        async with self._lock:  # waits for a running exec, which kills its own process tree
            await self._stop_processes()
            if self._ws is not None:
                await _in_pool(self._destroy_workspace, self._ws, pool=EXEC_POOL)
        log.debug("sandbox %s: closed", self.id)

    async def _stop_processes(self) -> None:
        """Stop what still runs in the sandbox before its workspace goes (bwrap: its exec agent)."""
        return None

    def _require(self) -> HostWorkspace:
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        if self._ws is None:
            raise SandboxError(f"sandbox {self.id} is not started; use 'await create_sandbox(spec)'")
        return self._ws
