"""Serving an ASGI app (``engine serve``, ``proxy serve``, ``sandbox serve``, ``view``) until SIGINT or
SIGTERM, and stopping promptly.

uvicorn stops by closing its sockets and then waiting, with no time limit by default, for every open
request to finish: a sandbox command running for minutes kept ``coderl sandbox serve`` alive that
long after a SIGTERM, past a container platform's grace period. Here the wait is bounded by
:data:`SHUTDOWN_GRACE_S`, after which uvicorn cancels what is still open. uvicorn raises the signal
again once stopped; it reaches ``coderl``'s entry point as KeyboardInterrupt, so a server stopped by
Ctrl-C exits 130 and one stopped by SIGTERM 143, as every command does.
"""

from __future__ import annotations

from typing import Any

import uvicorn

SHUTDOWN_GRACE_S = 5
"""How long a stopping server waits for requests still open (uvicorn then cancels them)."""


def server_config(app: Any, host: str, port: int, log_level: str = "info") -> uvicorn.Config:
    """uvicorn's settings for ``app`` on ``host``:``port``, with the bounded shutdown."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=SHUTDOWN_GRACE_S)


def serve_until_stopped(server: uvicorn.Server) -> int:
    """Serve until a signal stops it (then KeyboardInterrupt, module doc); 3 when it could not start."""
    server.run()
    return 0 if server.started else 3
