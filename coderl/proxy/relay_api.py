"""Relay-mode routes: the workers' WebSocket and the admin view of the workers.

  WS   /ws/worker                  workers (``Authorization: Bearer <proxy.worker_token>``), frames in
                                   :mod:`coderl.proxy.relay_protocol`
  GET  /workers                    admin: connected workers and the relay's counters
  POST /workers/update_weights     admin: ``{"path": DIR}``: every worker loads that checkpoint folder

This module only moves frames between a socket and the :class:`RelayEngine`: a handshake without the
token is refused (HTTP 403) and never registered; the first frame must be a hello; a malformed frame closes
that worker's socket (4400) and its requests go to other workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from fastapi import APIRouter, Request, WebSocket
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import Message
from starlette.websockets import WebSocketState

from coderl.errors import EngineError, EngineUnavailableError
from coderl.proxy.auth import check_admin, worker_token_ok
from coderl.proxy.errors import ApiError
from coderl.proxy.relay import RelayEngine, RelayRefused, WorkerLink
from coderl.proxy.relay_protocol import (
    CLOSE_BAD_MESSAGE,
    CLOSE_TIMEOUT,
    Hello,
    RelayProtocolError,
    close_reason,
    parse_worker_message,
)

log = logging.getLogger(__name__)


class WeightsUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1)
    """A checkpoint folder every worker can read (shared storage)."""


def relay_router(engine: RelayEngine, worker_token: str, admin_token: str) -> APIRouter:
    router = APIRouter(tags=["relay"])

    @router.websocket("/ws/worker")
    async def worker_socket(websocket: WebSocket) -> None:
        peer = f"{websocket.client.host}:{websocket.client.port}" if websocket.client else "unknown"
        if not worker_token_ok(websocket, worker_token):
            log.warning("relay: refused a worker from %s: missing or wrong worker token", peer)
            await _deny(websocket)
            return
        await websocket.accept()
        link = await _handshake(websocket, engine, peer)
        if link is not None:
            await _serve(websocket, engine, link)

    @router.get("/workers")
    async def workers(request: Request) -> dict[str, Any]:
        check_admin(request, admin_token)
        return engine.stats()

    @router.post("/workers/update_weights")
    async def update_weights(request: Request, body: WeightsUpdate) -> dict[str, Any]:
        check_admin(request, admin_token)
        try:
            version = await engine.update_weights(body.path)
        except EngineUnavailableError as exc:
            raise ApiError(503, str(exc)) from None
        except EngineError as exc:
            raise ApiError(400, str(exc)) from None
        return {"policy_version": version, "workers": len(engine.stats()["workers"])}

    return router


async def _deny(websocket: WebSocket) -> None:
    """Refuse the handshake: a close before accept, which the server answers with HTTP 403.

    (A 401 denial response would carry a message, but uvicorn's websockets-sansio protocol logs a
    spurious ERROR after every one, Kludex/uvicorn#3138; our own warning names the peer instead.)"""
    await websocket.close(code=1008)


def _frame(message: Message) -> str | bytes:
    text = message.get("text")
    return text if text is not None else bytes(message.get("bytes") or b"")


async def _handshake(websocket: WebSocket, engine: RelayEngine, peer: str) -> WorkerLink | None:
    """Read and register the hello; on failure close the socket with the reason and return None."""
    try:
        message = await asyncio.wait_for(websocket.receive(), timeout=engine.cfg.worker_timeout_s)
        if message["type"] == "websocket.disconnect":
            return None
        hello = parse_worker_message(_frame(message))
        if not isinstance(hello, Hello):
            raise RelayProtocolError(f"the first frame must be a hello, not {hello.type!r}")
        return engine.connect(hello, peer)
    except TimeoutError:
        code, reason = CLOSE_TIMEOUT, f"no hello within {engine.cfg.worker_timeout_s:g} s"
    except RelayProtocolError as exc:
        code, reason = CLOSE_BAD_MESSAGE, str(exc)
    except RelayRefused as exc:
        code, reason = exc.code, exc.reason
    log.warning("relay: refused a worker from %s: %s", peer, reason)
    await _close(websocket, code, reason)
    return None


async def _serve(websocket: WebSocket, engine: RelayEngine, link: WorkerLink) -> None:
    """Pump the link's outbox to the socket and the socket's frames to the engine until either ends."""

    async def pump() -> None:
        while True:
            await websocket.send_text(await link.outbox.get())

    async def read() -> str:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return f"disconnected (close code {message.get('code')})"
            engine.receive(link, _frame(message))

    reader, writer, gone = (
        asyncio.create_task(read()),
        asyncio.create_task(pump()),
        asyncio.create_task(link.gone.wait()),
    )
    try:
        await asyncio.wait({reader, writer, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (reader, writer, gone):
            task.cancel()
        await asyncio.gather(reader, writer, gone, return_exceptions=True)
    if not link.gone.is_set():
        engine.drop(link, *_why(reader, writer))
    await _close(websocket, link.close_code, link.close_reason)


def _why(reader: asyncio.Task[str], writer: asyncio.Task[None]) -> tuple[str, int]:
    """The reason (and close code) a worker's connection ended, from whichever task ended it."""
    for task in (reader, writer):
        if task.done() and not task.cancelled():
            exc = task.exception()
            if isinstance(exc, RelayProtocolError):
                return f"malformed frame: {exc}", CLOSE_BAD_MESSAGE
            if exc is not None:
                return f"connection failed: {type(exc).__name__}: {exc}", 1011
            if task is reader:
                return str(task.result()), 1000
    return "connection ended", 1000


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    if (
        websocket.application_state == WebSocketState.CONNECTED
        and websocket.client_state == WebSocketState.CONNECTED
    ):
        with contextlib.suppress(Exception):  # the peer may be gone already
            await websocket.close(code, close_reason(reason))
