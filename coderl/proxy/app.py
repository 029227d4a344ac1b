"""``create_app``: the recording proxy as a FastAPI app (no module-level state).

Routes:
  POST   /sessions                          admin: new session -> id, secret, base URLs
  GET    /sessions/{id}                     admin: calls, trajectories, splits, stats
  POST   /sessions/{id}/complete            admin: no more calls
  DELETE /sessions/{id}                     admin: forget the session and its record
  GET    /health                            no auth
  WS     /ws/worker                         relay mode: inference workers connect here (worker token)
  GET    /workers, POST /workers/update_weights    relay mode, admin: workers, counters, weight sync
  /s/{id}/v1/chat/completions | completions | models      OpenAI (session secret)
  /s/{id}/v1/responses                                    OpenAI Responses (session secret)
  /s/{id}/v1/messages                                     Anthropic (session secret)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coderl.chat import ChatFormat
from coderl.engine.base import Engine
from coderl.errors import ConfigError
from coderl.proxy.anthropic_api import anthropic_router
from coderl.proxy.auth import new_admin_token
from coderl.proxy.config import ProxyConfig
from coderl.proxy.errors import ApiError, dialect_of, error_response, validation_message
from coderl.proxy.openai_api import openai_router
from coderl.proxy.openapi import document
from coderl.proxy.relay import RelayEngine
from coderl.proxy.relay_api import relay_router
from coderl.proxy.request_id import HEADERS, RequestId, request_id_of
from coderl.proxy.responses_api import responses_router
from coderl.proxy.service import ProxyService
from coderl.proxy.sessions_api import sessions_router
from coderl.proxy.store import Store

log = logging.getLogger(__name__)


def default_db_path() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("coderl")) / "proxy.sqlite"


class BodyLimit:
    """413 for bodies over ``limit`` bytes: at once from Content-Length, else (a chunked upload, or more
    bytes than announced) as soon as the bytes read pass the limit. The body is read here, before the
    app sees it, so the answer is a 413 and never the framework's "error parsing the body"."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"request body is larger than proxy.max_body_mb ({self.limit / 2**20:g} MiB)"
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            await error_response(dialect_of(scope["path"]), 413, message)(scope, receive, send)
            return
        parts: list[bytes] = []
        seen = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":  # the client left: let the app see it
                first: Message = msg
                break
            parts.append(msg.get("body", b""))
            seen += len(parts[-1])
            if seen > self.limit:
                await error_response(dialect_of(scope["path"]), 413, message)(scope, receive, send)
                return
            if not msg.get("more_body", False):
                first = {"type": "http.request", "body": b"".join(parts), "more_body": False}
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()  # later reads: disconnect notices

        await self.app(scope, replay, send)


def create_app(
    cfg: ProxyConfig, engine: Engine, chat: ChatFormat, *, model_name: str | None = None
) -> FastAPI:
    """The proxy app. The store opens here; the engine starts and stops with the app's lifespan,
    which also expires idle sessions. ``app.state.admin_token`` holds the admin token in use.
    In relay mode (``cfg.mode == "relay"``) the engine is a :class:`RelayEngine` fed by /ws/worker."""
    if (cfg.mode == "relay") != isinstance(engine, RelayEngine):
        raise ConfigError(
            f"proxy.mode={cfg.mode} does not fit the engine {engine.name!r}: relay mode serves a "
            "RelayEngine(cfg), engine mode a local engine (coderl.engine.create_engine)"
        )
    admin_token = cfg.admin_token or new_admin_token()
    store = Store(cfg.db or default_db_path(), cfg.db_synchronous).open()
    service = ProxyService(cfg, engine, chat, store, cfg.model_name or model_name or "coderl")

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        sweeper = asyncio.create_task(_expire_loop(service))
        try:
            yield
        finally:
            sweeper.cancel()
            await engine.stop()
            store.close()

    app = FastAPI(title="coderl recording proxy", lifespan=lifespan)
    app.state.admin_token = admin_token
    app.state.service = service
    _error_handlers(app)
    app.include_router(sessions_router(service, admin_token))
    agent_routers = [openai_router(service), responses_router(service), anthropic_router(service)]
    for router in agent_routers:
        app.include_router(router)
    app.state.agent_endpoints = agent_endpoints(agent_routers)  # named by a 404 inside a session

    if isinstance(engine, RelayEngine):
        app.include_router(relay_router(engine, engine.worker_token, admin_token))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        # 200 also with no worker connected: a relay proxy must be reachable (and, on Kubernetes,
        # ready) for workers to connect at all; calls wait proxy.dispatch_timeout_s for one.
        info = {
            "status": "ok",
            "policy_version": engine.policy_version,
            "model": service.model,
            "mode": cfg.mode,
        }
        if isinstance(engine, RelayEngine):
            info["workers"] = len(engine.stats()["workers"])
        return info

    app.add_middleware(BodyLimit, limit=int(cfg.max_body_mb * 2**20))
    app.add_middleware(RequestId)  # outermost of ours: a 413 carries an id too
    document(app)
    return app


async def _expire_loop(service: ProxyService) -> None:
    period = min(30.0, max(0.05, service.cfg.session_ttl_s / 4))
    while True:
        await asyncio.sleep(period)
        try:
            expired = service.expire_idle()
        except Exception:  # the sweeper must outlive a transient database error
            log.exception("expiring idle sessions failed")
            continue
        if expired:
            log.info("expired %d idle sessions", len(expired))
            await service.release(expired)


_IN_SESSION = re.compile(r"^/s/([^/]+)(/.*)?$")


def agent_endpoints(routers: list[APIRouter]) -> list[str]:
    """``METHOD path`` of every route of ``routers``, in order (paths keep ``{session_id}``)."""
    return [
        f"{method} {route.path_format}"
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in sorted(route.methods or ())
    ]


def _not_found(request: Request) -> str | None:
    """A 404's message that says what was asked for and where to go instead (None: the default)."""
    path = request.url.path
    if path == "/v1" or path.startswith("/v1/"):
        return (
            f"no route {path}: agents call the proxy through a session's own base URL, "
            f"/s/<session id>{path} (openai_base_url / anthropic_base_url from POST /sessions)"
        )
    session = _IN_SESSION.match(path)
    if session is None:
        return None
    sid = session.group(1)
    served = ", ".join(e.replace("{session_id}", sid) for e in request.app.state.agent_endpoints)
    return (
        f"no endpoint {request.method} {path}; a session serves {served} (OpenAI base URL /s/{sid}/v1, "
        f"Anthropic base URL /s/{sid})"
    )


def _session_exists(request: Request) -> bool:
    session = _IN_SESSION.match(request.url.path)
    if session is None:
        return False
    try:
        request.app.state.service.session(session.group(1))
    except ApiError:
        return False
    return True


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        path = request.url.path
        return error_response(dialect_of(path), exc.status, exc.message, exc.param, exc.headers, exc.code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(list(exc.errors()))
        return error_response(dialect_of(request.url.path), 400, message, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        path = request.url.path
        if request.method == "HEAD" and exc.status_code in (404, 405) and _session_exists(request):
            # a reachability probe on a session's base URL (Claude Code sends HEAD <base>/api/hello
            # first): 200 while the session exists; no body, no record
            return Response(status_code=200)
        message = str(exc.detail)
        headers = dict(exc.headers or {})
        if exc.status_code == 404:
            message = _not_found(request) or message
        elif exc.status_code == 405 and "Allow" in headers:
            message = f"{request.method} is not allowed on {path}; it takes {headers['Allow']}"
        return error_response(dialect_of(path), exc.status_code, message, headers=headers)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        rid = request_id_of(request.scope)
        log.exception("unhandled error on %s (request %s)", request.url.path, rid)
        answer = error_response(dialect_of(request.url.path), 500, f"internal proxy error: {type(exc).__name__}")
        if rid:  # this answer is sent outside the RequestId middleware: its headers are set here
            for name in HEADERS:
                answer.headers[name.decode()] = rid
        return answer
