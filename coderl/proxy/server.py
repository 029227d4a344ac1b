"""Serving the proxy app with uvicorn, and stopping it promptly.

uvicorn stops (SIGINT, SIGTERM) by closing its sockets and then waiting, with no time limit by default,
for every open response to finish. A proxy response is a generation: one that runs to ``max_tokens``
kept ``coderl proxy serve`` alive for as long as it took (20 s and more). :class:`ProxyServer` first
ends the calls in flight (:meth:`ProxyService.stop_calls`: the engine stops sampling them, their clients
get a 503 with Retry-After, or an error event in a stream already under way, and nothing is recorded);
:data:`coderl.serving.SHUTDOWN_GRACE_S` bounds the wait for anything else still open.
"""

from __future__ import annotations

import socket

import uvicorn
from fastapi import FastAPI

from coderl.proxy.service import ProxyService
from coderl.serving import serve_until_stopped, server_config


class ProxyServer(uvicorn.Server):
    """uvicorn's server whose shutdown ends the proxy's calls in flight before waiting for connections."""

    def __init__(self, config: uvicorn.Config, service: ProxyService) -> None:
        super().__init__(config)
        self.service = service

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.service.stop_calls()
        await super().shutdown(sockets)


def proxy_server(app: FastAPI, host: str, port: int, log_level: str = "info") -> ProxyServer:
    """The server for a proxy app (:func:`coderl.proxy.app.create_app`) on ``host``:``port``."""
    return ProxyServer(server_config(app, host, port, log_level), app.state.service)


def run_proxy(app: FastAPI, host: str, port: int, log_level: str = "info") -> int:
    """Serve until SIGINT / SIGTERM (:func:`coderl.serving.serve_until_stopped`)."""
    return serve_until_stopped(proxy_server(app, host, port, log_level))
