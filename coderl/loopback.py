"""An ASGI app served on a free loopback port inside the running event loop.

For servers a component runs for itself next to its own work - the ``remote`` agent loop's recording
proxy, a test's engine server - where a thread or a process would put the app on another event loop
than the objects it serves (an engine's futures belong to one loop).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any


@contextlib.asynccontextmanager
async def serve_in_loop(
    app: Any,
    host: str = "127.0.0.1",
    startup_timeout_s: float = 60.0,
    port: int = 0,
    before_stop: Callable[[], None] | None = None,
) -> AsyncIterator[str]:
    """Serve ``app`` (lifespan included) on ``host`` at ``port`` (0: a free one) for the length of the
    block; yields its base URL. Signal handlers stay the process's own. ``before_stop`` runs when the
    block ends, before the server waits for its connections (a proxy ends its calls in flight there:
    ``ProxyService.stop_calls``, as :class:`coderl.proxy.server.ProxyServer` does)."""
    import uvicorn

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    server = QuietServer(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve())
    try:
        deadline = asyncio.get_running_loop().time() + startup_timeout_s
        while not server.started:
            if serving.done():
                serving.result()
                raise RuntimeError("the loopback server stopped while starting")
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"the loopback server did not start in {startup_timeout_s:g} s")
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://{host}:{port}"
    finally:
        if before_stop is not None:
            before_stop()
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(serving, timeout=10)
