"""A scripted engine and app helpers for the proxy's fast tests (no model, answers at once)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from coderl.chat import ChatFormat
from coderl.engine.base import Engine
from coderl.engine.params import SamplingParams
from coderl.proxy.app import create_app
from coderl.proxy.config import ProxyConfig
from coderl.types import Completion

ADMIN = "adm-test-token"


class FakeEngine(Engine):
    """Answers the n-th call (over all sessions) with ``replies[n]``: text (encoded, then <|im_end|>),
    a list of ids (as given) or an exception (raised). Logprobs are -0.01 * (position + 1)."""

    name = "fake"

    def __init__(self, tokenizer: Any, replies: list[Any] | None = None, latency_s: float = 0.0) -> None:
        self.tokenizer = tokenizer
        self.latency_s = latency_s
        self.replies: list[Any] = list(replies or [])
        self.prompts: list[list[int]] = []
        self.params: list[SamplingParams] = []
        self.end_id = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))
        self.version = 0

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    @property
    def policy_version(self) -> int:
        return self.version

    def stats(self) -> dict[str, Any]:
        return {"requests": len(self.prompts)}

    async def update_weights(self, weights: Mapping[str, Any] | str | Path) -> int:
        self.version += 1
        return self.version

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None = None
    ) -> Completion:
        n = len(self.prompts)
        self.prompts.append(list(prompt_ids))
        self.params.append(params)
        reply = self.replies[n] if n < len(self.replies) else "ok"
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, str):
            ids = [*self.tokenizer.encode(reply, add_special_tokens=False), self.end_id]
        else:
            ids = list(reply)
        finish = "stop" if ids and ids[-1] == self.end_id else "length"
        ids = ids[: params.max_tokens]
        if len(ids) == params.max_tokens and ids[-1] != self.end_id:
            finish = "length"
        logprobs = [-0.01 * (i + 1) for i in range(len(ids))]
        return Completion(ids, logprobs, finish, self.version, prompt_tokens=len(prompt_ids))


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
