"""The proxy's OpenAI dialect and sessions, on a scripted engine (in process, fast)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any, Literal

import openai
import pytest

from coderl.chat import ChatFormat
from coderl.engine.scripted import ScriptedEngine
from coderl.proxy.live import LiveText
from tests.proxy_fakes import new_session, proxy_client, record, scripted, sdk_http_client

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "run a command",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]
CALL_TEXT = '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>'


@pytest.fixture(scope="module")
def chat(tokenizer: Any) -> ChatFormat:
    return ChatFormat(tokenizer)


def auth(session: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {session['secret']}"}


def url(session: dict[str, Any], path: str) -> str:
    return f"/s/{session['id']}/v1{path}"


async def test_chat_completion_is_recorded_with_ids(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["Hello there."])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client, task_id="t1")
        assert s["openai_base_url"].endswith(f"/s/{s['id']}/v1")
        assert s["anthropic_base_url"].endswith(f"/s/{s['id']}")
        messages = [{"role": "user", "content": "hi"}]
        body = {"model": "x", "messages": messages, "max_tokens": 20, "temperature": 0, "seed": 3}
        r = await client.post(url(s, "/chat/completions"), json=body, headers=auth(s))
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["object"] == "chat.completion" and out["model"] == "test-model"
        assert out["choices"][0]["message"] == {
            "role": "assistant",
            "content": "Hello there.",
            "refusal": None,
        }
        assert out["choices"][0]["finish_reason"] == "stop"
        assert engine.prompts[0] == chat.render(messages)
        assert (
            engine.calls[0].params.max_tokens == 20
            and engine.calls[0].params.temperature == 0
            and engine.calls[0].params.seed == 3
        )
        rec = await record(client, s["id"])
        (call,) = rec["calls"]
        assert call["prompt_ids"] == chat.render(messages)
        assert call["completion_ids"] == [*chat.encode("Hello there."), engine.end_id]
        assert call["logprobs"] == pytest.approx(
            [-0.01 * (i + 1) for i in range(len(call["completion_ids"]))]
        )
        assert call["request"] == body and call["finish_reason"] == "stop" and call["policy_version"] == 0
        assert out["usage"]["prompt_tokens"] == len(call["prompt_ids"])
        assert rec["trajectories"][0]["task_id"] == "t1"


async def test_multi_turn_with_tools_merges_into_one_trajectory(chat: ChatFormat, tmp_path: Path) -> None:
    # The second reply is sampled as one id per character: re-tokenising its text would not give these ids.
    odd = [chat.tokenizer.convert_tokens_to_ids(c) for c in "done"] + [
        chat.tokenizer.convert_tokens_to_ids("<|im_end|>")
    ]
    engine = scripted(chat.tokenizer, [CALL_TEXT, odd, "bye"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "list"},
        ]
        r1 = (
            await client.post(
                url(s, "/chat/completions"), json={"messages": msgs, "tools": TOOLS}, headers=auth(s)
            )
        ).json()
        message = r1["choices"][0]["message"]
        assert r1["choices"][0]["finish_reason"] == "tool_calls"
        assert message["content"] is None
        (tc,) = message["tool_calls"]
        assert tc["function"]["name"] == "bash" and json.loads(tc["function"]["arguments"]) == {"cmd": "ls"}
        msgs += [message, {"role": "tool", "tool_call_id": tc["id"], "content": "a.py\nb.py"}]
        r2 = (
            await client.post(
                url(s, "/chat/completions"), json={"messages": msgs, "tools": TOOLS}, headers=auth(s)
            )
        ).json()
        assert r2["choices"][0]["message"]["content"] == "done"
        msgs += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}]
        await client.post(
            url(s, "/chat/completions"), json={"messages": msgs, "tools": TOOLS}, headers=auth(s)
        )
        rec = await record(client, s["id"])
        c1, c2, c3 = rec["calls"]
        assert c2["base_call_id"] == c1["id"] and c3["base_call_id"] == c2["id"]
        assert c3["prompt_ids"][: len(c2["prompt_ids"]) + len(odd)] == c2["prompt_ids"] + odd
        assert rec["stats"] == {"calls": 3, "trajectories": 1, "splits": 0, "split_reasons": {}, "context_refusals": 0}
        (traj,) = rec["trajectories"]
        assert traj["prompt_ids"] == c1["prompt_ids"]
        assert traj["prompt_ids"] + traj["response_ids"] == c3["prompt_ids"] + c3["completion_ids"]
        sampled = [t for t, m in zip(traj["response_ids"], traj["response_mask"], strict=True) if m]
        assert sampled == c1["completion_ids"] + c2["completion_ids"] + c3["completion_ids"]
        assert traj["call_ids"] == [c1["id"], c2["id"], c3["id"]]

        # The agent rewrites its history (drops the tool exchange): a new trajectory, counted as a split.
        rewritten = [msgs[0], msgs[1], {"role": "user", "content": "start over"}]
        await client.post(
            url(s, "/chat/completions"), json={"messages": rewritten, "tools": TOOLS}, headers=auth(s)
        )
        rec = await record(client, s["id"])
        assert rec["stats"]["trajectories"] == 2 and rec["stats"]["splits"] == 1
        assert rec["splits"][0]["call_id"] == rec["calls"][3]["id"]


async def test_malformed_tool_call_is_returned_as_content(chat: ChatFormat, tmp_path: Path) -> None:
    bad = '<tool_call>\n{"name": "bash", "arguments": {"cmd": \n</tool_call>'
    engine = scripted(chat.tokenizer, [bad])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        body = {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS}
        r = await client.post(url(s, "/chat/completions"), json=body, headers=auth(s))
        assert r.status_code == 200
        choice = r.json()["choices"][0]
        assert choice["message"]["content"] == bad.strip() and "tool_calls" not in choice["message"]
        assert choice["finish_reason"] == "stop"


async def test_retries_are_answered_from_the_record(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["one", "two", "three"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        body = {"messages": [{"role": "user", "content": "x"}], "temperature": 1.0}
        r1 = await client.post(url(s, "/chat/completions"), json=body, headers=auth(s))
        r2 = await client.post(url(s, "/chat/completions"), json=body, headers=auth(s))
        assert r1.json() == r2.json() and r2.headers["x-coderl-replayed"] == "true"
        # Same Idempotency-Key, different body bytes (key order): still the recorded answer.
        key = {**auth(s), "Idempotency-Key": "k1"}
        r3 = await client.post(url(s, "/chat/completions"), json={**body, "top_p": 0.5}, headers=key)
        r4 = await client.post(url(s, "/chat/completions"), json={"top_p": 0.5, **body}, headers=key)
        assert (
            r3.json()["choices"][0]["message"]["content"]
            == "two"
            == r4.json()["choices"][0]["message"]["content"]
        )
        assert len(engine.prompts) == 2
        assert len((await record(client, s["id"]))["calls"]) == 2
        # The same key with a different request is refused, and its prompt never reaches the engine.
        other = {**body, "messages": [{"role": "user", "content": "something else"}]}
        r5 = await client.post(url(s, "/chat/completions"), json=other, headers=key)
        assert r5.status_code == 409 and "Idempotency-Key 'k1'" in r5.json()["error"]["message"]
        assert r5.json()["error"]["code"] == "idempotency_key_reused"
        assert len(engine.prompts) == 2 and len((await record(client, s["id"]))["calls"]) == 2


async def test_a_retry_while_the_first_attempt_runs_shares_its_answer(
    chat: ChatFormat, tmp_path: Path
) -> None:
    engine = scripted(chat.tokenizer, ["slow answer", "other"], latency_s=0.2)
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        body = {"messages": [{"role": "user", "content": "x"}]}
        post = client.post(url(s, "/chat/completions"), json=body, headers=auth(s))
        first, retry = await asyncio.gather(
            post, client.post(url(s, "/chat/completions"), json=body, headers=auth(s))
        )
        assert first.json() == retry.json() and len(engine.prompts) == 1
        assert {first.headers["x-coderl-replayed"], retry.headers["x-coderl-replayed"]} == {"true", "false"}


async def test_streaming_through_the_openai_sdk(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["Let me look. " + CALL_TEXT, "plain answer " * 10])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, app):
        s = await new_session(client)
        sdk = openai.AsyncOpenAI(
            base_url=s["openai_base_url"],
            api_key=s["secret"],
            http_client=sdk_http_client(app),
        )
        stream = await sdk.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "go"}],
            tools=TOOLS,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
            logprobs=True,
        )
        chunks = [c async for c in stream]
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert content == "Let me look."
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        assert calls[0].function.name == "bash" and calls[0].id
        assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == {"cmd": "ls"}
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        lps = [
            t.logprob
            for c in chunks
            if c.choices and c.choices[0].logprobs
            for t in c.choices[0].logprobs.content or []
        ]
        rec = await record(client, s["id"])
        assert lps == pytest.approx(rec["calls"][0]["logprobs"])
        assert chunks[-1].usage.completion_tokens == len(rec["calls"][0]["completion_ids"])

        plain = await sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "again"}], max_tokens=4
        )
        assert plain.choices[0].finish_reason == "length" and plain.usage is not None
        assert plain.usage.completion_tokens == 4
        # the SDK's request id (x-request-id), one per request, as OpenAI's API gives it
        again = await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "more"}], max_tokens=2)
        assert plain._request_id and plain._request_id.startswith("req_") and again._request_id != plain._request_id
        models = await sdk.models.list()
        assert [m.id for m in models.data] == ["test-model"]


async def test_keep_alives_while_a_tool_call_is_held_back_are_skipped_by_the_sdk(
    chat: ChatFormat, tmp_path: Path
) -> None:
    """A slow engine sampling a tool call sends nothing to stream until the call is whole; keep-alive
    comments fill the silence, and the openai SDK reads the chat and Responses streams past them."""
    slow = "Let me look. " + CALL_TEXT
    engine = ScriptedEngine([slow] * 4, chat.tokenizer, default="ok", token_delay_s=0.05)
    async with proxy_client(chat, engine, tmp_path / "p.db", stream_keepalive_s=0.2) as (client, app):
        s = await new_session(client)
        body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": TOOLS, "stream": True}
        raw = (await client.post(f"/s/{s['id']}/v1/chat/completions", json=body, headers=auth(s))).text
        assert raw.count(": keep-alive\n\n") >= 3
        sdk = openai.AsyncOpenAI(base_url=s["openai_base_url"], api_key=s["secret"], http_client=sdk_http_client(app))
        chunks = [c async for c in await sdk.chat.completions.create(**{**body, "stream": True})]
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        assert calls[0].function.name == "bash" and chunks[-1].choices[0].finish_reason == "tool_calls"
        flat = [{"type": "function", **t["function"]} for t in TOOLS]
        raw = (await client.post(f"/s/{s['id']}/v1/responses", json={"input": "go", "tools": flat, "stream": True},
                                 headers=auth(s))).text  # fmt: skip
        assert raw.count("event: response.in_progress") >= 4  # re-sent: Codex's idle timer counts events
        async with sdk.responses.stream(model="m", input="go", tools=flat) as stream:  # type: ignore[arg-type]
            final = await stream.get_final_response()
        assert final.output[1].type == "function_call" and final.output[1].name == "bash"


async def test_stop_strings_cut_the_completion_and_its_ids(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["alpha beta END gamma"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        body = {"messages": [{"role": "user", "content": "x"}], "stop": ["END"]}
        out = (await client.post(url(s, "/chat/completions"), json=body, headers=auth(s))).json()
        content = out["choices"][0]["message"]["content"]
        assert out["choices"][0]["finish_reason"] == "stop"
        assert content == "alpha beta"  # " END" is one token: the reply ends at the token boundary before it
        call = (await record(client, s["id"]))["calls"][0]
        assert chat.decode(call["completion_ids"]) == content  # the record is what the client saw
        assert len(call["logprobs"]) == len(call["completion_ids"]) == len(chat.encode("alpha beta"))
        assert engine.calls[0].params.stop == [
            "END"
        ]  # the engine was told, so it ends there (not at max_tokens)


TWO_TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("bash", "python")
]
FORCED = {  # tool format: (the call's opening for bash, what the model writes after it), the same for any tool
    "hermes": (
        ('<tool_call>\n{"name": "bash", "arguments": ', '{"cmd": "ls"}}\n</tool_call>'),
        ('<tool_call>\n{"name": "', 'bash", "arguments": {"cmd": "pwd"}}\n</tool_call>'),
    ),
    "auto": (
        ('<tool_call>\n{"name": "bash", "arguments": ', '{"cmd": "ls"}}\n</tool_call>'),
        ('<tool_call>\n{"name": "', 'bash", "arguments": {"cmd": "pwd"}}\n</tool_call>'),
    ),
    "xml": (
        ("<tool_call>\n<function=bash>\n", "<parameter=cmd>\nls\n</parameter>\n</function>\n</tool_call>"),
        ("<tool_call>\n<function=", "bash>\n<parameter=cmd>\npwd\n</parameter>\n</function>\n</tool_call>"),
    ),
    "json": (
        ('{"name": "bash", "arguments": ', '{"cmd": "ls"}}'),
        ('{"name": "', 'bash", "arguments": {"cmd": "pwd"}}'),
    ),
}


def one_call(response: Any, stream: bool) -> tuple[str, str, dict[str, Any], str]:
    """(content, the one tool call's name and arguments, finish reason) of a chat answer or stream."""
    if not stream:
        choice = response.json()["choices"][0]
        (call,) = choice["message"].get("tool_calls") or [{"function": {"name": "", "arguments": "{}"}}]
        fn = call["function"]
        return (
            choice["message"]["content"] or "",
            fn["name"],
            json.loads(fn["arguments"]),
            choice["finish_reason"],
        )
    lines = [line[6:] for line in response.text.splitlines() if line.startswith("data: {")]
    choices = [c["choices"][0] for c in map(json.loads, lines) if c["choices"]]
    content = "".join(c["delta"].get("content") or "" for c in choices)
    calls = [tc["function"] for c in choices for tc in c["delta"].get("tool_calls", [])]
    name = "".join(fn.get("name", "") for fn in calls)
    arguments = json.loads("".join(fn.get("arguments", "") for fn in calls) or "{}")
    return content, name, arguments, choices[-1]["finish_reason"]


@pytest.mark.parametrize("tool_format", list(FORCED))
@pytest.mark.parametrize("stream", [False, True])
async def test_a_forced_tool_choice_works_in_every_tool_format(
    tokenizer: Any, tmp_path: Path, tool_format: Literal["hermes", "auto", "xml", "json"], stream: bool
) -> None:
    chat = ChatFormat(tokenizer, tool_format)
    (named_opening, named_rest), (any_opening, any_rest) = FORCED[tool_format]
    engine = scripted(tokenizer, [named_rest, any_rest])
    messages = [{"role": "user", "content": "x"}]
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        body = {"messages": messages, "tools": TWO_TOOLS, "stream": stream}
        answers = []
        for choice in ({"type": "function", "function": {"name": "bash"}}, "required"):
            forced = {**body, "tool_choice": choice}
            answers.append(
                one_call(await client.post(url(s, "/chat/completions"), json=forced, headers=auth(s)), stream)
            )
        assert answers == [
            ("", "bash", {"cmd": "ls"}, "tool_calls"),
            ("", "bash", {"cmd": "pwd"}, "tool_calls"),
        ]
        named, any_ = (await record(client, s["id"]))["calls"]
        prompt = chat.render(messages, TWO_TOOLS)
        assert named["prompt_ids"] == prompt + chat.encode(named_opening)  # the opening is prompt, not sample
        assert any_["prompt_ids"] == prompt + chat.encode(any_opening)
        assert [chat.decode(c["completion_ids"]) for c in (named, any_)] == [named_rest, any_rest]


async def test_required_with_one_tool_names_it_and_an_undeclared_name_is_refused(
    tokenizer: Any, tmp_path: Path
) -> None:
    chat = ChatFormat(tokenizer, "xml")
    engine = scripted(tokenizer, ["<parameter=cmd>\nls\n</parameter>\n</function>\n</tool_call>"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        body = {"messages": [{"role": "user", "content": "x"}], "tools": TWO_TOOLS[:1]}
        r = await client.post(
            url(s, "/chat/completions"), json={**body, "tool_choice": "required"}, headers=auth(s)
        )
        (call,) = r.json()["choices"][0]["message"]["tool_calls"]
        assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == (
            "bash",
            {"cmd": "ls"},
        )
        opening = chat.encode(
            "<tool_call>\n<function=bash>\n"
        )  # the only tool: the model cannot name another
        assert engine.prompts[0][-len(opening) :] == opening
        paris = {"type": "function", "function": {"name": "Paris"}}
        r = await client.post(
            url(s, "/chat/completions"), json={**body, "tool_choice": paris}, headers=auth(s)
        )
        error = r.json()["error"]
        assert r.status_code == 400 and error["param"] == "tool_choice"
        assert "'Paris'" in error["message"] and "['bash']" in error["message"], error
        body.pop("tools")
        r = await client.post(
            url(s, "/chat/completions"), json={**body, "tool_choice": paris}, headers=auth(s)
        )
        assert (
            r.status_code == 400
            and "'Paris'" in r.json()["error"]["message"]
            and "no tools" in r.json()["error"]["message"]
        )
        assert len(engine.calls) == 1


async def test_an_agent_that_drops_a_malformed_reply_gets_the_split_named(
    chat: ChatFormat, tmp_path: Path
) -> None:
    engine = scripted(chat.tokenizer, ['<tool_call>\n{"name": "bash", "argu', "fixed"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        first = [{"role": "user", "content": "list the files"}]
        await client.post(url(s, "/chat/completions"), json={"messages": first}, headers=auth(s))
        retry = [*first, {"role": "user", "content": "Your last reply was not a valid tool call."}]
        await client.post(url(s, "/chat/completions"), json={"messages": retry}, headers=auth(s))
        assert (await record(client, s["id"]))["stats"]["split_reasons"] == {"reply_dropped": 1}


STREAM_CASES = [
    ("Once upon a time there was a dragon.", {"stop": [" th"]}),  # the stop begins inside a token
    ("Once upon a time, far away. The end.", {"stop": ["."]}),  # a one-character stop string
    ("The sea is blue", {"stop": [" "]}),  # ... that is the start of the second token
    ('Sure, let me look.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>', {}),
    ('  I will call it.\n<tool_call>\n{"name": "bash", "argu', {}),  # malformed: plain content
    ("Use {braces} and <tags> freely.  ", {}),
]


@pytest.mark.parametrize(("reply", "extra"), STREAM_CASES)
async def test_streamed_content_is_exactly_the_content_of_the_answer(
    chat: ChatFormat, tmp_path: Path, reply: str, extra: dict[str, Any]
) -> None:
    engine = scripted(chat.tokenizer, [reply, reply])
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        body = {"messages": [{"role": "user", "content": "x"}], "tools": tools, **extra}
        plain = (await client.post(url(s, "/chat/completions"), json=body, headers=auth(s))).json()
        body["messages"] = [{"role": "user", "content": "y"}]  # another request, the same reply
        stream = await client.post(
            url(s, "/chat/completions"), json={**body, "stream": True}, headers=auth(s)
        )
        chunks = [json.loads(line[6:]) for line in stream.text.splitlines() if line.startswith("data: {")]
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
        live = [d["content"] for d in deltas if d.get("content")]
        assert "".join(live) == (plain["choices"][0]["message"]["content"] or "")
        streamed_calls = [
            tc["function"]["name"] for d in deltas for tc in d.get("tool_calls", []) if "id" in tc
        ]
        assert streamed_calls == [
            tc["function"]["name"] for tc in plain["choices"][0]["message"].get("tool_calls", [])
        ]
        assert len(live) > 1 or len("".join(live)) < 12  # it came in pieces, as sampled


def stream_text(text: str) -> str:
    """The content deltas of an OpenAI stream (chat or completions), joined."""
    chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    pieces = [c["choices"][0] for c in chunks if c["choices"]]
    return "".join(p["delta"].get("content") or "" if "delta" in p else p["text"] for p in pieces)


@pytest.mark.parametrize(("reply", "stop"), [("Once upon a time, far away.", "."), ("The sea is blue", " ")])
@pytest.mark.parametrize("api", ["/chat/completions", "/completions"])
async def test_a_stream_never_sends_the_stop_string(
    chat: ChatFormat, tmp_path: Path, caplog: pytest.LogCaptureFixture, api: str, reply: str, stop: str
) -> None:
    engine = scripted(chat.tokenizer, [reply, reply])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        asks = (
            [{"messages": [{"role": "user", "content": x}]} for x in "xy"]
            if api == "/chat/completions"
            else [{"prompt": x} for x in "xy"]
        )
        plain = (await client.post(url(s, api), json={**asks[0], "stop": stop}, headers=auth(s))).json()
        plain_text = plain["choices"][0].get("text", plain["choices"][0].get("message", {}).get("content"))
        with caplog.at_level(logging.WARNING, logger="coderl"):
            stream = await client.post(
                url(s, api), json={**asks[1], "stop": stop, "stream": True}, headers=auth(s)
            )
        assert plain_text == reply[: reply.index(stop)]  # ends at the whole token before the stop
        assert stream_text(stream.text) == plain_text  # not "...way." or "The sea"
        streamed_call = (await record(client, s["id"]))["calls"][1]
        assert chat.decode(streamed_call["completion_ids"]) == plain_text
        ours = [r for r in caplog.records if r.name.startswith("coderl")]  # not another test's GC'd task
        assert not ours, [r.getMessage() for r in ours]


TOKENS = ["hel", "lo", " wor", "ld", "!"]


def toy_decode(ids: list[int]) -> str:
    return "".join(TOKENS[i] for i in ids)


@pytest.mark.parametrize(
    ("stops", "sent"),
    [
        (["lo w"], ["", "hel", "", "", ""]),  # "l" could begin it: held; at "hello" only "lo" could; then cut
        (["xyz"], ["hel", "lo", " wor", "ld", "!"]),  # nothing could begin a stop: every token at once
        (["ld!"], ["", "hello", " wor", "", ""]),  # "l" (then "ld") is held while "ld!" may follow; cut
        (["d"], ["hel", "lo", " wor", "", ""]),  # a one-character stop: the token holding it is never sent
    ],
)
def test_live_text_sends_only_whole_tokens_before_any_possible_stop(
    stops: list[str], sent: list[str]
) -> None:
    text = LiveText(toy_decode, stops, "", parse_tools=False, tool_format="hermes")
    assert [text.feed([i]) for i in range(len(TOKENS))] == sent


async def test_completions_api_reuses_sampled_ids_for_its_own_text(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["world", "again"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        r1 = await client.post(
            url(s, "/completions"), json={"prompt": "hello ", "max_tokens": 8, "logprobs": 1}, headers=auth(s)
        )
        assert r1.status_code == 200, r1.text
        out = r1.json()
        assert out["object"] == "text_completion" and out["choices"][0]["text"] == "world"
        assert len(out["choices"][0]["logprobs"]["token_logprobs"]) == len(chat.encode("world")) + 1
        r2 = await client.post(
            url(s, "/completions"), json={"prompt": "hello world and", "max_tokens": 8}, headers=auth(s)
        )
        assert r2.status_code == 200
        c1, c2 = (await record(client, s["id"]))["calls"]
        assert c2["base_call_id"] == c1["id"]
        assert c2["prompt_ids"] == c1["prompt_ids"] + c1["completion_ids"] + chat.encode(" and")
        r3 = await client.post(
            url(s, "/completions"), json={"prompt": [1, 2, 3], "stream": True}, headers=auth(s)
        )
        assert r3.text.rstrip().endswith("data: [DONE]")
        assert engine.prompts[-1] == [1, 2, 3]
