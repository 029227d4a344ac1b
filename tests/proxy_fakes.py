"""App helpers for the proxy's fast tests over the shared scripted engine (no model, answers at once)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from coderl.chat import ChatFormat
from coderl.engine.base import Engine
from coderl.engine.scripted import ScriptedEngine
from coderl.proxy.app import create_app
from coderl.proxy.config import ProxyConfig

ADMIN = "adm-test-token"


def scripted(tokenizer: Any, replies: list[Any] | None = None, latency_s: float = 0.0) -> ScriptedEngine:
    """The shared scripted engine as the proxy tests use it: the n-th call (over all sessions) gets
    ``replies[n]``, then "ok"."""
    return ScriptedEngine(replies or [], tokenizer, latency_s, default="ok", name="fake")


@contextlib.asynccontextmanager
async def proxy_client(
    chat: ChatFormat, engine: Engine, db: Path, **cfg: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """An httpx client on the app (in process, lifespan run), and the app."""
    app = create_app(ProxyConfig(db=db, admin_token=ADMIN, **cfg), engine, chat, model_name="test-model")
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy.test") as client:
            yield client, app


def sdk_http_client(app: Any) -> Any:
    """An in-process HTTP client for the official SDKs (they use the httpx2 package, not httpx)."""
    import httpx2

    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))


async def new_session(client: httpx.AsyncClient, **metadata: Any) -> dict[str, Any]:
    r = await client.post(
        "/sessions", json={"metadata": metadata}, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


async def record(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    r = await client.get(f"/sessions/{session_id}", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200, r.text
    return dict(r.json())
