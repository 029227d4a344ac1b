"""Sessions, secrets and hostile input: every error in its API's own format, never a 5xx for bad input."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coderl.chat import ChatFormat
from coderl.errors import EngineError, EngineOverloadedError, EngineUnavailableError
from tests.proxy_fakes import ADMIN, new_session, proxy_client, record, scripted

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
MSG = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def chat(tokenizer: Any) -> ChatFormat:
    return ChatFormat(tokenizer)


def openai_error(r: Any, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return dict(err)


def anthropic_error(r: Any, status: int, kind: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == kind and body["error"]["message"]


async def test_new_sessions_take_json_under_any_content_type(chat: ChatFormat, tmp_path: Path) -> None:
    async with proxy_client(chat, scripted(chat.tokenizer), tmp_path / "p.db") as (client, _):
        form = {**ADMIN_H, "content-type": "application/x-www-form-urlencoded"}  # what curl -d sends
        r = await client.post("/sessions", content=b'{"metadata": {"task_id": "t1"}}', headers=form)
        assert r.status_code == 201, r.text
        assert (await record(client, r.json()["id"]))["metadata"] == {"task_id": "t1"}
        assert (await client.post("/sessions", headers=ADMIN_H)).status_code == 201  # no body at all
        err = openai_error(await client.post("/sessions", content=b"task_id=t1", headers=form), 400)
        assert "JSON body" in err["message"]
        err = openai_error(await client.post("/sessions", json={"metadata": [1]}, headers=ADMIN_H), 400)
        assert err["param"] == "metadata"
        err = openai_error(await client.post("/sessions", json={"task_id": "t1"}, headers=ADMIN_H), 400)
        assert "task_id" in err["message"]  # an unknown field, named
        schema = (await client.get("/openapi.json")).json()
        assert "NewSession" in str(schema["paths"]["/sessions"]["post"]["requestBody"])


SESSION_ENDPOINTS = [
    "POST /s/{sid}/v1/chat/completions",
    "POST /s/{sid}/v1/completions",
    "GET /s/{sid}/v1/models",
    "GET /s/{sid}/v1/models/{{model_id}}",
    "POST /s/{sid}/v1/messages",
    "POST /s/{sid}/v1/messages/count_tokens",
]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/embeddings"),
        ("POST", "/v1/foo"),
        ("GET", "/v1/chat/completion"),
        ("POST", "/chat/completions"),
    ],
)
async def test_an_unknown_path_in_a_session_names_it_and_the_endpoints_served(
    chat: ChatFormat, tmp_path: Path, method: str, path: str
) -> None:
    async with proxy_client(chat, scripted(chat.tokenizer), tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        asked = f"/s/{s['id']}{path}"
        r = await client.request(method, asked, json=MSG, headers={"Authorization": f"Bearer {s['secret']}"})
        err = openai_error(r, 404)
        assert f"{method} {asked}" in err["message"], err
        for endpoint in SESSION_ENDPOINTS:
            assert endpoint.format(sid=s["id"]) in err["message"], (endpoint, err["message"])
        r = await client.post(
            f"/s/{s['id']}/v1/messages/batches", json=MSG, headers={"x-api-key": s["secret"]}
        )
        anthropic_error(r, 404, "not_found_error")
        assert f"/s/{s['id']}/v1/messages/batches" in r.json()["error"]["message"]
        err = openai_error(await client.get(f"/s/{s['id']}/v1/chat/completions"), 405)
        assert err["message"] == f"GET is not allowed on /s/{s['id']}/v1/chat/completions; it takes POST"


async def test_rough_edges_are_honoured_or_refused_clearly(chat: ChatFormat, tmp_path: Path) -> None:
    async with proxy_client(chat, scripted(chat.tokenizer), tmp_path / "p.db") as (client, _):
        s = await new_session(client, task_id="t1")
        h = {"Authorization": f"Bearer {s['secret']}"}
        chat_path = f"/s/{s['id']}/v1/chat/completions"
        as_json = {**h, "content-type": "application/json"}
        err = openai_error(await client.post(chat_path, content=b'{"messages": [}', headers=as_json), 400)
        assert err["message"].startswith("the request body is not valid JSON") and err["param"] is None
        err = openai_error(await client.post(chat_path, content=b'{"messages": [}', headers=h), 400)
        assert "one JSON object (Content-Type: application/json)" in err["message"]
        for field, value in [("top_logprobs", 2), ("response_format", {"type": "json_object"})]:
            err = openai_error(await client.post(chat_path, json={**MSG, field: value}, headers=h), 400)
            assert err["param"] == field and "not supported" in err["message"]
        assert (
            await client.post(chat_path, json={**MSG, "response_format": {"type": "text"}}, headers=h)
        ).status_code == 200
        tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
        for choice in ["always", {"type": "function", "function": {"name": "nosuch"}}]:
            err = openai_error(
                await client.post(chat_path, json={**MSG, "tools": tools, "tool_choice": choice}, headers=h),
                400,
            )
            assert err["param"] == "tool_choice"
        err = openai_error(
            await client.post(chat_path, json={**MSG, "tool_choice": "required"}, headers=h), 400
        )
        assert "no tools" in err["message"]
        err = openai_error(await client.post("/v1/chat/completions", json=MSG, headers=h), 404)
        assert "/s/<session id>/v1/chat/completions" in err["message"]
        assert (await client.get(f"/s/{s['id']}/v1/models/test-model", headers=h)).status_code == 200
        openai_error(await client.get(f"/s/{s['id']}/v1/models/gpt-4o", headers=h), 404)
        listed = (await client.get("/sessions", headers=ADMIN_H)).json()["sessions"]
        mine = [x for x in listed if x["id"] == s["id"]]
        assert len(mine) == 1 and mine[0]["metadata"] == {"task_id": "t1"} and mine[0]["calls"] == 1
        assert (await client.get("/sessions?status=complete", headers=ADMIN_H)).json() == {"sessions": []}
        openai_error(await client.get("/sessions", headers=h), 401)  # an agent's secret lists nothing
        openai_error(await client.get("/sessions?status=odd", headers=ADMIN_H), 400)
        spec = (await client.get("/openapi.json")).json()
        assert set(spec["components"]["securitySchemes"]) == {"adminToken", "sessionSecret", "sessionApiKey"}
        chat_op = spec["paths"]["/s/{session_id}/v1/chat/completions"]["post"]
        assert {"sessionSecret": []} in chat_op["security"] and "422" not in chat_op["responses"]
        assert {"400", "401", "409", "413"} <= set(chat_op["responses"])
        assert spec["paths"]["/sessions"]["get"]["security"] == [{"adminToken": []}]


async def test_secrets_isolate_sessions(chat: ChatFormat, tmp_path: Path) -> None:
    async with proxy_client(chat, scripted(chat.tokenizer), tmp_path / "p.db") as (client, _):
        assert (await client.post("/sessions")).status_code == 401
        assert (await client.post("/sessions", headers={"Authorization": "Bearer nope"})).status_code == 401
        a, b = await new_session(client), await new_session(client)
        path = f"/s/{a['id']}/v1/chat/completions"
        openai_error(await client.post(path, json=MSG), 401)
        openai_error(
            await client.post(path, json=MSG, headers={"Authorization": f"Bearer {b['secret']}"}), 401
        )
        openai_error(await client.post(path, json=MSG, headers={"x-api-key": ADMIN}), 401)
        assert (await client.post(path, json=MSG, headers={"x-api-key": a["secret"]})).status_code == 200
        # both headers (a gateway's Authorization beside the SDK's x-api-key): the secret in either opens
        both = {"Authorization": "Bearer gateway-token", "x-api-key": a["secret"]}
        assert (await client.post(path, json={**MSG, "seed": 1}, headers=both)).status_code == 200
        both = {"Authorization": f"Bearer {b['secret']}", "x-api-key": "gateway-token"}
        openai_error(await client.post(path, json=MSG, headers=both), 401)  # b's secret opens b only
        unknown = openai_error(
            await client.post("/s/nosuch/v1/chat/completions", json=MSG, headers={"x-api-key": "x"}), 401
        )
        wrong = openai_error(await client.post(path, json=MSG, headers={"x-api-key": "x"}), 401)
        assert unknown == wrong  # an unknown session reads as a wrong secret: ids cannot be probed
        # An agent's secret is not an admin token.
        r = await client.get(f"/sessions/{a['id']}", headers={"Authorization": f"Bearer {a['secret']}"})
        openai_error(r, 401)
        assert (await record(client, b["id"]))["calls"] == []
        assert len((await record(client, a["id"]))["calls"]) == 2


async def test_complete_delete_and_idle_expiry(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer)
    # A long TTL here: on a loaded machine a short one could expire the session before its first call.
    async with proxy_client(chat, engine, tmp_path / "p.db", session_ttl_s=600) as (client, _):
        s = await new_session(client)
        h = {"Authorization": f"Bearer {s['secret']}"}
        path = f"/s/{s['id']}/v1/chat/completions"
        assert (await client.post(path, json=MSG, headers=h)).status_code == 200
        r = await client.post(f"/sessions/{s['id']}/complete", headers=ADMIN_H)
        assert r.json() == {"id": s["id"], "status": "complete"}
        assert engine.ended == [s["id"]]  # the engine may drop the session's cached KV
        openai_error(await client.post(path, json=MSG, headers=h), 410)
        assert len((await record(client, s["id"]))["calls"]) == 1  # the record stays readable
        assert (await client.delete(f"/sessions/{s['id']}", headers=ADMIN_H)).json()["deleted"] is True
        openai_error(await client.get(f"/sessions/{s['id']}", headers=ADMIN_H), 404)
        openai_error(await client.delete(f"/sessions/{s['id']}", headers=ADMIN_H), 404)

    engine = scripted(chat.tokenizer)
    async with proxy_client(chat, engine, tmp_path / "q.db", session_ttl_s=0.3) as (client, _):
        idle = await new_session(client)
        await asyncio.sleep(0.5)
        r = await client.post(
            f"/s/{idle['id']}/v1/chat/completions", json=MSG, headers={"x-api-key": idle["secret"]}
        )
        assert "expired" in openai_error(r, 404)["message"]
        assert (await record(client, idle["id"]))["status"] == "expired"
        assert engine.ended[-1] == idle["id"]


async def test_bad_input_gets_4xx_in_openai_format(chat: ChatFormat, tmp_path: Path) -> None:
    async with proxy_client(chat, scripted(chat.tokenizer), tmp_path / "p.db", max_body_mb=0.01) as (
        client,
        _,
    ):
        s = await new_session(client)
        h = {"Authorization": f"Bearer {s['secret']}", "content-type": "application/json"}
        path = f"/s/{s['id']}/v1/chat/completions"
        openai_error(await client.post(path, content=b"{not json", headers=h), 400)
        openai_error(await client.post(path, json={}, headers=h), 400)
        openai_error(await client.post(path, json={"messages": []}, headers=h), 400)
        openai_error(await client.post(path, json={"messages": "hi"}, headers=h), 400)
        openai_error(await client.post(path, json={**MSG, "n": 2}, headers=h), 400)
        openai_error(await client.post(path, json={**MSG, "max_tokens": "many"}, headers=h), 400)
        openai_error(await client.post(path, json={**MSG, "temperature": -1}, headers=h), 400)
        openai_error(await client.post(path, json={**MSG, "stop": ["a", "b", "c", "d", "e"]}, headers=h), 400)
        openai_error(
            await client.post(path, json={"messages": [{"role": "wizard", "content": "x"}]}, headers=h), 400
        )
        hologram = [{"role": "user", "content": [{"type": "hologram", "data": "x"}]}]
        err = openai_error(await client.post(path, json={"messages": hologram}, headers=h), 400)
        assert "only text content is supported" in err["message"] and "'hologram'" in err["message"]
        bad_args = [
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]},
            MSG["messages"][0],
        ]
        openai_error(await client.post(path, json={"messages": bad_args}, headers=h), 400)
        openai_error(await client.post(path, content=b"[1, 2]", headers=h), 400)
        big = {"messages": [{"role": "user", "content": "x" * 20_000}]}
        openai_error(await client.post(path, json=big, headers=h), 413)
        raw = json.dumps(big).encode()

        async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: the size shows only as it streams
            for at in range(0, len(raw), 1000):
                yield raw[at : at + 1000]

        too_big = await client.post(path, content=chunked(), headers=h)
        err = openai_error(too_big, 413)
        assert "proxy.max_body_mb" in err["message"]
        # refused before the app: still with its request id, under both APIs' header names
        assert too_big.headers["x-request-id"] == too_big.headers["request-id"] != ""
        openai_error(await client.get(f"/s/{s['id']}/v1/nothing-here", headers=h), 404)
        openai_error(
            await client.post(f"/s/{s['id']}/v1/completions", json={"prompt": ["a", "b"]}, headers=h), 400
        )
        openai_error(
            await client.post(f"/s/{s['id']}/v1/completions", json={"prompt": [10**12]}, headers=h), 400
        )


async def test_bad_input_gets_4xx_in_anthropic_format(chat: ChatFormat, tmp_path: Path) -> None:
    async with proxy_client(chat, scripted(chat.tokenizer), tmp_path / "p.db", max_body_mb=0.01) as (
        client,
        _,
    ):
        s = await new_session(client)
        h = {"x-api-key": s["secret"], "content-type": "application/json"}
        path = f"/s/{s['id']}/v1/messages"
        anthropic_error(await client.post(path, content=b"{", headers=h), 400, "invalid_request_error")
        anthropic_error(
            await client.post(path, json={"max_tokens": 5}, headers=h), 400, "invalid_request_error"
        )
        block = {"role": "user", "content": [{"type": "hologram", "source": {}}]}
        anthropic_error(
            await client.post(path, json={"messages": [block]}, headers=h), 400, "invalid_request_error"
        )
        anthropic_error(
            await client.post(path, json=MSG, headers={"x-api-key": "wrong"}), 401, "authentication_error"
        )
        anthropic_error(
            await client.post("/s/zzz/v1/messages", json=MSG, headers=h), 401, "authentication_error"
        )
        anthropic_error(await client.post("/v1/messages", json=MSG, headers=h), 404, "not_found_error")
        tools = [{"name": "bash", "input_schema": {"type": "object"}}]
        for choice in [{"type": "tool", "name": "nosuch"}, {"type": "sometimes"}]:
            anthropic_error(
                await client.post(path, json={**MSG, "tools": tools, "tool_choice": choice}, headers=h),
                400,
                "invalid_request_error",
            )
        big = {"messages": [{"role": "user", "content": "x" * 20_000}]}
        anthropic_error(await client.post(path, json=big, headers=h), 413, "request_too_large")


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (EngineUnavailableError("down"), 503),
        (EngineOverloadedError("full"), 429),
        (EngineError("too long"), 400),
    ],
)
async def test_engine_failures_keep_their_status(
    chat: ChatFormat, tmp_path: Path, exc: Exception, status: int
) -> None:
    engine = scripted(chat.tokenizer, [exc, "fine"])
    async with proxy_client(chat, engine, tmp_path / "p.db", retry_after_s=2) as (client, _):
        s = await new_session(client)
        r = await client.post(
            f"/s/{s['id']}/v1/chat/completions", json=MSG, headers={"x-api-key": s["secret"]}
        )
        openai_error(r, status)
        if status != 400:
            assert r.headers["retry-after"] == "2"
        r = await client.post(f"/s/{s['id']}/v1/messages", json=MSG, headers={"x-api-key": s["secret"]})
        assert r.status_code == 200  # the next attempt is served; the failed one left no record
        assert len((await record(client, s["id"]))["calls"]) == 1


def test_a_client_that_disconnects_cancels_its_generation(chat: ChatFormat, tmp_path: Path) -> None:
    import httpx

    from coderl.proxy.app import create_app
    from coderl.proxy.config import ProxyConfig
    from tests.servers import serve

    engine = scripted(chat.tokenizer, ["late answer", "second"], latency_s=3.0)
    app = create_app(ProxyConfig(db=tmp_path / "p.db", admin_token=ADMIN), engine, chat, model_name="m")
    with serve(app) as base:
        s = httpx.post(f"{base}/sessions", headers=ADMIN_H, timeout=30).json()
        path, h = f"{base}/s/{s['id']}/v1/chat/completions", {"Authorization": f"Bearer {s['secret']}"}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(path, json=MSG, headers=h, timeout=0.5)  # the client gives up and hangs up
        deadline = time.monotonic() + 2.0  # well before the engine's 3 s latency would have ended
        while engine.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.running == 0  # its generation was cancelled, not left to run
        rec = httpx.get(f"{base}/sessions/{s['id']}", headers=ADMIN_H, timeout=30).json()
        assert rec["calls"] == []  # nobody received an answer: nothing recorded
        retry = httpx.post(path, json=MSG, headers=h, timeout=30)  # a retry starts afresh
        assert retry.status_code == 200 and retry.headers["x-coderl-replayed"] == "false"


def test_stopping_the_server_ends_its_calls_in_flight_with_a_503(chat: ChatFormat, tmp_path: Path) -> None:
    import threading

    import httpx

    from coderl.proxy.app import create_app
    from coderl.proxy.config import ProxyConfig
    from coderl.proxy.server import ProxyServer
    from coderl.proxy.store import Store
    from tests.servers import serve

    engine = scripted(chat.tokenizer, latency_s=120.0)  # no answer before the server stops
    app = create_app(ProxyConfig(db=tmp_path / "p.db", admin_token=ADMIN), engine, chat, model_name="m")
    answers: dict[str, httpx.Response] = {}

    def ask(name: str, url: str, body: dict[str, Any], secret: str) -> None:
        answers[name] = httpx.post(url, json=body, headers={"x-api-key": secret}, timeout=180)

    with serve(app, make_server=lambda config: ProxyServer(config, app.state.service)) as base:
        s = httpx.post(f"{base}/sessions", headers=ADMIN_H, timeout=30).json()
        callers = [
            threading.Thread(
                target=ask, args=("chat", f"{s['openai_base_url']}/chat/completions", MSG, s["secret"])
            ),
            threading.Thread(
                target=ask,
                args=(
                    "messages",
                    f"{s['anthropic_base_url']}/v1/messages",
                    {**MSG, "stream": True},
                    s["secret"],
                ),
            ),
        ]
        for caller in callers:
            caller.start()
        deadline = time.monotonic() + 30
        while engine.running < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    # leaving the block stopped the server: its calls were ended, not waited for
    for caller in callers:
        caller.join(timeout=30)
    openai_error(answers["chat"], 503)
    anthropic_error(answers["messages"], 503, "overloaded_error")
    for answer in answers.values():
        assert answer.headers["retry-after"] and "shutting down" in answer.text
    assert engine.running == 0
    assert Store(tmp_path / "p.db").open().calls(s["id"]) == []  # nobody got an answer: nothing recorded


async def test_a_stopping_proxy_refuses_new_calls(chat: ChatFormat, tmp_path: Path) -> None:
    async with proxy_client(chat, scripted(chat.tokenizer), tmp_path / "p.db") as (client, app):
        s = await new_session(client)
        assert app.state.service.stop_calls() == 0
        r = await client.post(
            f"/s/{s['id']}/v1/chat/completions", json=MSG, headers={"x-api-key": s["secret"]}
        )
        assert "shutting down" in openai_error(r, 503)["message"] and r.headers["retry-after"]


async def test_a_proxy_served_in_a_loop_stops_in_seconds_with_a_call_under_way(
    chat: ChatFormat, tmp_path: Path
) -> None:
    # the remote loop's proxy and the Ray proxy actor serve with serve_in_loop(before_stop=stop_calls)
    from coderl.loopback import serve_in_loop
    from coderl.proxy.app import create_app
    from coderl.proxy.config import ProxyConfig

    app = create_app(ProxyConfig(db=tmp_path / "p.db", admin_token=ADMIN), scripted(chat.tokenizer, latency_s=60), chat)
    async with httpx.AsyncClient(timeout=30) as client:
        async with serve_in_loop(app, before_stop=app.state.service.stop_calls) as url:
            s = (await client.post(f"{url}/sessions", json={}, headers={"Authorization": f"Bearer {ADMIN}"})).json()
            call = asyncio.create_task(
                client.post(f"{url}/s/{s['id']}/v1/chat/completions", json=MSG, headers={"x-api-key": s["secret"]})
            )
            await asyncio.sleep(0.5)  # the call waits in the engine
            t0 = time.monotonic()
        assert time.monotonic() - t0 < 5  # not the engine's 60 s
        r = await call
        assert "shutting down" in openai_error(r, 503)["message"]


async def test_an_internal_error_carries_its_request_id_into_the_answer_and_the_log(
    chat: ChatFormat, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 500 is answered outside the middleware stack; it still names the request, and the proxy's log
    line names the same id (what an agent's SDK reports as ``_request_id`` finds the traceback)."""
    async with proxy_client(chat, scripted(chat.tokenizer), tmp_path / "p.db") as (client, app):
        s = await new_session(client)

        def broken(session_id: str) -> Any:
            raise RuntimeError("a bug")

        app.state.service.session = broken
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy.test") as raw:
            with caplog.at_level("ERROR", logger="coderl.proxy.app"):
                r = await raw.get(f"/sessions/{s['id']}", headers=ADMIN_H)
        assert openai_error(r, 500)["message"] == "internal proxy error: RuntimeError"
        rid = r.headers["x-request-id"]
        assert rid.startswith("req_") and r.headers["request-id"] == rid
        assert f"(request {rid})" in caplog.text
