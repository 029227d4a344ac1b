"""Property-based fuzzing of every endpoint in the app's OpenAPI schema: bad input never gets a 5xx,
and every error comes back in the format of the API the path speaks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coderl.chat import ChatFormat
from coderl.proxy.app import create_app
from coderl.proxy.config import ProxyConfig
from tests.proxy_fakes import ADMIN, scripted

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=16,
)
VALID = {
    "chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    "completions": {"prompt": "hi", "max_tokens": 4},
    "messages": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    "messages/count_tokens": {"messages": [{"role": "user", "content": "hi"}]},
    "responses": {"input": "hi", "max_output_tokens": 4},
}
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "bogus"]), "content": JSON},
    optional={"tool_calls": JSON, "tool_call_id": JSON, "name": JSON},
)
ITEM = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            ["message", "function_call", "function_call_output", "reasoning", "item_reference", "bogus"]
        )
    },
    optional={
        "role": st.sampled_from(["user", "assistant", "developer", "tool"]) | JSON,
        "content": JSON
        | st.lists(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["input_text", "output_text", "input_image"]), "text": JSON}
            )
        ),
        "call_id": JSON,
        "name": JSON,
        "arguments": JSON | st.sampled_from(["{}", '{"a": 1}', "[1]"]),
        "output": JSON,
    },
)


def bodies(valid: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Random JSON, or a valid body with one field replaced / added / removed, or random messages."""
    keys = [
        *valid,
        "tools",
        "stop",
        "stream",
        "temperature",
        "n",
        "tool_choice",
        "system",
        "seed",
        "logprobs",
        "input",
        "instructions",
        "previous_response_id",
        "include",
        "text",
        "metadata",
        "store",
        "top_logprobs",
    ]
    mutated = st.builds(lambda k, v: {**valid, k: v}, st.sampled_from(keys), JSON)
    removed = st.sampled_from(list(valid)).map(lambda k: {x: y for x, y in valid.items() if x != k})
    messages = st.lists(MESSAGE, max_size=4).map(lambda m: {**valid, "messages": m})
    items = st.lists(ITEM, max_size=4).map(lambda i: {**valid, "input": i})
    return JSON | mutated | removed | messages | items


@pytest.fixture(scope="module")
def chat(tokenizer: Any) -> ChatFormat:
    return ChatFormat(tokenizer)


def test_no_5xx_for_any_body_on_any_endpoint(chat: ChatFormat, tmp_path: Path) -> None:
    cfg = ProxyConfig(db=tmp_path / "fuzz.db", admin_token=ADMIN, max_body_mb=0.05)
    app = create_app(cfg, scripted(chat.tokenizer), chat, model_name="m")
    operations = [
        (method.upper(), path)
        for path, ops in app.openapi()["paths"].items()
        for method in ops
        if method in ("get", "post", "delete")
    ]
    assert len(operations) >= 10
    with TestClient(app) as client:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        session = client.post("/sessions", headers=admin).json()
        state = {"sid": session["id"], "secret": session["secret"]}

        @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
        @given(
            op=st.sampled_from(operations),
            body=st.one_of(*(bodies(v) for v in VALID.values())),
            raw=st.none() | st.binary(max_size=64),
            who=st.sampled_from(["agent", "admin", "none", "wrong"]),
            known=st.booleans(),
        )
        def probe(op: tuple[str, str], body: Any, raw: bytes | None, who: str, known: bool) -> None:
            method, template = op
            sid = state["sid"]
            agent = {"Authorization": f"Bearer {state['secret']}"}
            path = re.sub(r"\{session_id\}", sid if known else "nosuchsession", template)
            path = re.sub(r"\{model_id(:path)?\}", "some/model", path)
            headers = {"agent": agent, "admin": admin, "none": {}, "wrong": {"x-api-key": "nope"}}[who]
            headers = {**headers, "content-type": "application/json"}
            content = raw if raw is not None else json.dumps(body).encode()
            r = client.request(method, path, content=None if method == "GET" else content, headers=headers)
            assert r.status_code < 500, (method, path, body, r.status_code, r.text)
            if r.status_code >= 400:
                err = r.json()
                if path.startswith(f"/s/{sid}/v1/messages") or path.startswith(
                    "/s/nosuchsession/v1/messages"
                ):
                    assert err["type"] == "error" and set(err["error"]) == {"type", "message"}
                else:
                    assert set(err["error"]) == {"message", "type", "param", "code"}
            elif method == "DELETE" or template.endswith("/complete"):
                # the fuzzer closed our session: start a fresh one so later probes still reach the engine
                fresh = client.post("/sessions", headers=admin).json()
                state.update(sid=fresh["id"], secret=fresh["secret"])

        probe()


def test_bad_responses_bodies_get_a_400_naming_a_field_they_hold(chat: ChatFormat, tmp_path: Path) -> None:
    cfg = ProxyConfig(db=tmp_path / "fuzz.db", admin_token=ADMIN)
    app = create_app(cfg, scripted(chat.tokenizer), chat, model_name="m")
    with TestClient(app) as client:
        session = client.post("/sessions", headers={"Authorization": f"Bearer {ADMIN}"}).json()
        path = f"/s/{session['id']}/v1/responses"
        agent = {"Authorization": f"Bearer {session['secret']}"}

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
        @given(body=bodies(VALID["responses"]).filter(lambda b: isinstance(b, dict)))
        def probe(body: dict[str, Any]) -> None:
            r = client.post(path, json=body, headers=agent)
            assert r.status_code < 500, (body, r.status_code, r.text)
            if r.status_code >= 400:
                assert r.status_code == 400, (body, r.text)
                err = r.json()["error"]
                field = re.split(r"[.\[]", err["param"] or "")[0]
                assert field and (field in body or field == "input"), (body, err)

        probe()
