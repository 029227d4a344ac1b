"""The proxy's OpenAI Responses API (``/v1/responses``), on a scripted engine (in process, fast), plus one
real-model run (slow)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from coderl.chat import ChatFormat
from coderl.config import EngineConfig, ModelConfig
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.scripted import ScriptedEngine
from coderl.errors import EngineUnavailableError
from coderl.proxy.app import create_app
from coderl.proxy.config import ProxyConfig
from coderl.proxy.responses_items import chat_messages
from coderl.proxy.responses_memory import ResponseMemory, StoredResponse
from coderl.proxy.responses_stream import ResponseStream, failed_code
from tests.proxy_fakes import new_session, proxy_client, record, scripted, sdk_http_client
from tests.servers import serve
from tests.test_proxy_e2e import ADMIN, admin, check_record_against_reference
from tests.test_proxy_openai import CALL_TEXT, auth
from tests.test_proxy_openai import TOOLS as TOOLS_CHAT

PARAMS = {"type": "object", "properties": {"cmd": {"type": "string"}}}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "bash", "description": "run a command", "parameters": PARAMS}}
]
TOOLS = [{"type": "function", "name": "bash", "description": "run a command", "parameters": PARAMS}]


@pytest.fixture(scope="module")
def chat(tokenizer: Any) -> ChatFormat:
    return ChatFormat(tokenizer)


def url(session: dict[str, Any], path: str = "/responses") -> str:
    return f"/s/{session['id']}/v1{path}"


def events(text: str) -> list[dict[str, Any]]:
    """SSE ``event:`` + ``data:`` blocks -> the data objects, checking that each event names its type."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        data = json.loads(lines[1][6:])
        assert data["type"] == lines[0][7:]
        out.append(data)
    return out


def one_call_ids(chat: ChatFormat) -> list[int]:
    """'done' sampled one id per character: re-tokenising its text would not give these ids."""
    return [chat.tokenizer.convert_tokens_to_ids(c) for c in "done"] + [
        chat.tokenizer.convert_tokens_to_ids("<|im_end|>")
    ]


async def test_string_input_is_recorded_and_answered_as_a_response(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["Hello there."])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client, task_id="t1")
        body = {
            "model": "x",
            "input": "hi",
            "max_output_tokens": 20,
            "temperature": 0,
            "metadata": {"k": "v"},
        }
        r = await client.post(url(s), json=body, headers=auth(s))
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["object"] == "response" and out["id"].startswith("resp_") and out["model"] == "test-model"
        assert out["status"] == "completed" and out["incomplete_details"] is None
        (message,) = out["output"]
        assert (
            message["type"] == "message"
            and message["role"] == "assistant"
            and message["id"].startswith("msg_")
        )
        assert message["content"] == [
            {"type": "output_text", "text": "Hello there.", "annotations": [], "logprobs": []}
        ]
        assert out["metadata"] == {"k": "v"} and out["store"] is True and out["previous_response_id"] is None
        assert (out["temperature"], out["top_p"], out["tool_choice"], out["tools"]) == (0, 1.0, "auto", [])
        assert engine.prompts[0] == chat.render([{"role": "user", "content": "hi"}])
        assert engine.calls[0].params.max_tokens == 20 and engine.calls[0].params.temperature == 0
        rec = await record(client, s["id"])
        (call,) = rec["calls"]
        assert call["api"] == "responses" and call["request"] == body
        assert call["completion_ids"] == [*chat.encode("Hello there."), engine.end_id]
        assert out["usage"] == {
            "input_tokens": len(call["prompt_ids"]),
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": len(call["completion_ids"]),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": len(call["prompt_ids"]) + len(call["completion_ids"]),
        }
        assert rec["trajectories"][0]["task_id"] == "t1"


async def test_instructions_and_message_items_render_as_chat_messages(
    chat: ChatFormat, tmp_path: Path
) -> None:
    engine = scripted(chat.tokenizer, ["a", "b"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        items = [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "be brief"}]},
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "one "}, {"type": "input_text", "text": "two"}],
            },
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"role": "user", "content": "three"},
        ]
        r = await client.post(url(s), json={"instructions": "sys", "input": items}, headers=auth(s))
        assert r.status_code == 200, r.text
        assert r.json()["instructions"] == "sys"
        expected = [
            {"role": "system", "content": "sys"},
            {"role": "system", "content": "be brief"},  # SmolLM2's template has no developer role
            {"role": "user", "content": "one two"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "three"},
        ]
        assert engine.prompts[0] == chat.render(expected)
        await client.post(url(s), json={"input": "plain"}, headers=auth(s))  # no instructions: no system turn
        assert engine.prompts[1] == chat.render([{"role": "user", "content": "plain"}])


async def test_function_calls_and_outputs_round_trip_into_one_trajectory(
    chat: ChatFormat, tmp_path: Path
) -> None:
    odd = one_call_ids(chat)
    engine = scripted(chat.tokenizer, ["Let me look. " + CALL_TEXT, odd, "bye"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        conv: list[dict[str, Any]] = [{"role": "user", "content": "list"}]
        body = {"instructions": "sys", "tools": TOOLS}
        first = (await client.post(url(s), json={**body, "input": conv}, headers=auth(s))).json()
        message, call = first["output"]
        assert message["content"][0]["text"] == "Let me look."
        assert call["type"] == "function_call" and call["name"] == "bash" and call["status"] == "completed"
        assert json.loads(call["arguments"]) == {"cmd": "ls"}
        assert call["call_id"].startswith("call_") and call["id"].startswith("fc_")
        assert first["tools"] == [{**TOOLS[0], "strict": None}]
        conv += [
            *first["output"],
            {"type": "function_call_output", "call_id": call["call_id"], "output": "a.py"},
        ]
        second = (await client.post(url(s), json={**body, "input": conv}, headers=auth(s))).json()
        assert second["output"][0]["content"][0]["text"] == "done"
        conv += [*second["output"], {"role": "user", "content": "thanks"}]
        await client.post(url(s), json={**body, "input": conv}, headers=auth(s))
        rec = await record(client, s["id"])
        c1, c2, c3 = rec["calls"]
        assert c2["base_call_id"] == c1["id"] and c3["base_call_id"] == c2["id"]
        assert rec["stats"] == {"calls": 3, "trajectories": 1, "splits": 0, "split_reasons": {}, "context_refusals": 0}
        (traj,) = rec["trajectories"]
        sampled = [t for t, m in zip(traj["response_ids"], traj["response_mask"], strict=True) if m]
        assert sampled == c1["completion_ids"] + c2["completion_ids"] + c3["completion_ids"]
        # The tool result is rendered as the chat template's tool turn.
        tool_turn = chat.render_delta([{"role": "tool", "tool_call_id": "x", "content": "a.py"}], CHAT_TOOLS)
        assert c2["prompt_ids"][-len(tool_turn) :] == tool_turn


PATCH = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 1\n+x = 2\n*** End Patch"
APPLY_PATCH = {
    "type": "custom", "name": "apply_patch", "description": "Edit files with a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" /(.|\\n)+/'},
}  # fmt: skip


async def test_a_custom_tool_takes_free_text_and_round_trips_into_one_trajectory(
    chat: ChatFormat, tmp_path: Path
) -> None:
    """The Codex CLI's apply_patch: a custom tool. The model sees a function with one string parameter
    (its grammar in the description), and its call comes back as a custom_tool_call with that text."""
    call = '<tool_call>\n' + json.dumps({"name": "apply_patch", "arguments": {"input": PATCH}}) + '\n</tool_call>'
    engine = scripted(chat.tokenizer, [call, call, "done"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        conv: list[dict[str, Any]] = [{"role": "user", "content": "fix it"}]
        body = {"instructions": "sys", "tools": [APPLY_PATCH, *TOOLS]}
        first = (await client.post(url(s), json={**body, "input": conv}, headers=auth(s))).json()
        (item,) = first["output"]
        assert item["type"] == "custom_tool_call" and item["name"] == "apply_patch" and item["input"] == PATCH
        assert item["id"].startswith("ctc_") and item["call_id"].startswith("call_")
        assert first["tools"][0] == {**{k: APPLY_PATCH[k] for k in ("type", "name", "description", "format")}}
        assert first["tools"][1]["type"] == "function"
        shown = chat.tokenizer.decode(engine.calls[0].prompt_ids)
        assert "apply_patch" in shown and "lark grammar" in shown and "Begin Patch" in shown
        streamed = events((await client.post(url(s), json={**body, "input": "again", "stream": True}, headers=auth(s))).text)
        kinds = [e["type"] for e in streamed]
        assert "response.custom_tool_call_input.delta" in kinds and "response.function_call_arguments.delta" not in kinds
        done = next(e for e in streamed if e["type"] == "response.custom_tool_call_input.done")
        assert done["input"] == PATCH and streamed[-1]["response"]["output"][0]["input"] == PATCH
        result = {"type": "custom_tool_call_output", "call_id": item["call_id"], "output": "Done!"}
        await client.post(url(s), json={**body, "input": [*conv, item, result]}, headers=auth(s))
        rec = await record(client, s["id"])
        assert rec["stats"]["trajectories"] == 2  # "again" began a conversation of its own
        assert rec["calls"][2]["base_call_id"] == rec["calls"][0]["id"]  # the custom call matched the record
        bad = {**body, "tools": [{**APPLY_PATCH, "format": {"type": "regex"}}], "input": "x"}
        r = await client.post(url(s), json=bad, headers=auth(s))
        assert r.status_code == 400 and r.json()["error"]["param"] == "tools[0].format"


async def test_two_calls_in_one_reply_come_back_as_one_trajectory(chat: ChatFormat, tmp_path: Path) -> None:
    two = CALL_TEXT + "\n" + CALL_TEXT.replace('"ls"', '"pwd"')
    engine = scripted(chat.tokenizer, [two, "done"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        conv: list[dict[str, Any]] = [{"role": "user", "content": "list"}]
        body = {"instructions": "sys", "tools": TOOLS}
        first = (await client.post(url(s), json={**body, "input": conv}, headers=auth(s))).json()
        calls = [o for o in first["output"] if o["type"] == "function_call"]
        assert [json.loads(c["arguments"]) for c in calls] == [{"cmd": "ls"}, {"cmd": "pwd"}]
        assert len({c["call_id"] for c in calls}) == 2
        outputs = [{"type": "function_call_output", "call_id": c["call_id"], "output": "x"} for c in calls]
        await client.post(url(s), json={**body, "input": [*conv, *first["output"], *outputs]}, headers=auth(s))
        rec = await record(client, s["id"])
        assert rec["stats"]["trajectories"] == 1 and rec["stats"]["splits"] == 0  # both ids match the record


async def test_parallel_tool_calls_false_ends_the_reply_with_its_first_call(chat: ChatFormat, tmp_path: Path) -> None:
    """The model would write two calls; asked for one, the engine stops at the first call's closing tag,
    which stays in the sampled ids, and the next turn still builds on them (one trajectory). The same on
    chat completions, streamed."""
    two = CALL_TEXT + "\n" + CALL_TEXT.replace('"ls"', '"pwd"')
    engine = scripted(chat.tokenizer, [two, "done", two])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        conv: list[dict[str, Any]] = [{"role": "user", "content": "list"}]
        body = {"instructions": "sys", "tools": TOOLS, "parallel_tool_calls": False}
        first = (await client.post(url(s), json={**body, "input": conv}, headers=auth(s))).json()
        calls = [o for o in first["output"] if o["type"] == "function_call"]
        assert [json.loads(c["arguments"]) for c in calls] == [{"cmd": "ls"}] and first["parallel_tool_calls"] is False
        assert engine.calls[0].params.stop == ["</tool_call>"]
        out = {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "x"}
        await client.post(url(s), json={**body, "input": [*conv, *first["output"], out]}, headers=auth(s))
        rec = await record(client, s["id"])
        assert rec["stats"]["trajectories"] == 1 and rec["stats"]["splits"] == 0  # the cut ids match the next prompt
        assert chat.decode(rec["calls"][0]["completion_ids"]).endswith("</tool_call>")  # sampled, kept
        chat_body = {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS_CHAT, "parallel_tool_calls": False,
                     "stream": True}  # fmt: skip
        r = await client.post(url(s, "/chat/completions"), json=chat_body, headers=auth(s))
        chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        deltas = [c for ch in chunks for c in ch["choices"] for c in c["delta"].get("tool_calls") or []]
        assert [d["function"]["name"] for d in deltas if d.get("function", {}).get("name")] == ["bash"]
        assert [c["finish_reason"] for ch in chunks for c in ch["choices"] if c["finish_reason"]] == ["tool_calls"]


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "web_search"},
        {"type": "file_search", "vector_store_ids": ["v"]},
        {"type": "computer_use_preview", "display_width": 1, "display_height": 1, "environment": "linux"},
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "image_generation"},
        {"type": "local_shell"},
        {"type": "mcp", "server_label": "x", "server_url": "http://x"},
    ],
)
async def test_built_in_tools_are_refused_by_name(
    chat: ChatFormat, tmp_path: Path, tool: dict[str, Any]
) -> None:
    engine = scripted(chat.tokenizer)
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        r = await client.post(url(s), json={"input": "x", "tools": [*TOOLS, tool]}, headers=auth(s))
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["param"] == "tools[1].type" and repr(tool["type"]) in err["message"]
        assert err["type"] == "invalid_request_error" and set(err) == {"message", "type", "param", "code"}
        assert engine.calls == []


BAD = [
    ({"input": "x", "temperature": 5}, "temperature", "less than or equal to 2"),
    ({"temperature": 1}, "input", "input is empty; give a string or at least one item (or previous_response_id)"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "greater than or equal to 1"),
    ({"input": "x", "tool_choice": "sometimes"}, "tool_choice", "'required'"),
    ({"input": "x", "tool_choice": "required"}, "tool_choice", "has no tools"),
    (
        {"input": "x", "tools": TOOLS, "tool_choice": {"type": "function", "name": "rm"}},
        "tool_choice",
        "'rm'",
    ),
    ({"input": "x", "tools": [{"type": "function", "parameters": {}}]}, "tools[0].name", "non-empty string"),
    ({"input": [{"role": "bogus", "content": "x"}]}, "input[0].role", "user, assistant, system, developer"),
    (
        {"input": [{"role": "user", "content": [{"type": "input_hologram", "data": "u"}]}]},
        "input[0].content[0]",
        "'input_hologram'",
    ),
    ({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}, "input[0].type", "reasoning item"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "previous_response_id"),
    ({"input": [{"type": "web_search_call", "id": "ws"}]}, "input[0].type", "'web_search_call'"),
    (
        {"input": [{"type": "function_call", "name": "bash", "call_id": "c", "arguments": "{"}]},
        "input[0].arguments",
        "not valid JSON",
    ),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id", "non-empty string"),
    ({"input": []}, "input", "empty"),
    ({"input": [{"id": "msg_1"}]}, "input[0].type", "item_reference"),  # no type: the SDK's ItemReference
    ({"input": "x", "text": {"format": {"type": "json_object"}}}, "text.format", "'json_object'"),
    ({"input": "x", "top_logprobs": 3}, "top_logprobs", "sampled token"),
    ({"input": "x", "background": True}, "background", "background"),
    ({"input": "x", "conversation": "conv_1"}, "conversation", "conversation"),
    ({"input": "x", "metadata": {"k": 1}}, "metadata.k", "string"),
    ({"input": "x", "parallel_tool_calls": "maybe"}, "parallel_tool_calls", "boolean"),
]


@pytest.mark.parametrize(("body", "param", "says"), BAD)
async def test_bad_input_is_a_400_naming_the_field(
    chat: ChatFormat, tmp_path: Path, body: dict[str, Any], param: str, says: str
) -> None:
    engine = scripted(chat.tokenizer)
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        r = await client.post(url(s), json=body, headers=auth(s))
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
        assert err["param"] == param and says in err["message"], err
        assert engine.calls == []


async def test_harmless_unknown_fields_are_ignored(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["ok"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        extra = {
            "reasoning": {"effort": "medium", "summary": "auto"},
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "k",
            "service_tier": "auto",
            "text": {"format": {"type": "text"}, "verbosity": "low"},
            "truncation": "auto",
            "parallel_tool_calls": False,
            "user": "u1",
            "some_future_field": {"x": 1},
        }
        r = await client.post(url(s), json={"input": "x", **extra}, headers=auth(s))
        assert r.status_code == 200, r.text
        out = r.json()
        assert (out["parallel_tool_calls"], out["user"], out["truncation"]) == (False, "u1", "auto")


async def test_tool_choice_required_and_named_force_a_function_call(chat: ChatFormat, tmp_path: Path) -> None:
    named_rest = '{"cmd": "ls"}}\n</tool_call>'
    any_rest = '{"cmd": "pwd"}}\n</tool_call>'  # required with one tool declared names it too
    engine = scripted(chat.tokenizer, [named_rest, any_rest, "plain"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        body = {"input": "x", "tools": TOOLS}
        named = {"type": "function", "name": "bash"}
        r1 = (await client.post(url(s), json={**body, "tool_choice": named}, headers=auth(s))).json()
        r2 = (await client.post(url(s), json={**body, "tool_choice": "required"}, headers=auth(s))).json()
        assert r1["tool_choice"] == named and r2["tool_choice"] == "required"
        calls = [r["output"] for r in (r1, r2)]
        assert [[i["type"] for i in c] for c in calls] == [["function_call"], ["function_call"]]
        assert [json.loads(c[0]["arguments"]) for c in calls] == [{"cmd": "ls"}, {"cmd": "pwd"}]
        c1, c2 = (await record(client, s["id"]))["calls"]
        opening = chat.encode('<tool_call>\n{"name": "bash", "arguments": ')
        assert c1["prompt_ids"][-len(opening) :] == opening == c2["prompt_ids"][-len(opening) :]  # prompt, not sample
        assert (
            chat.decode(c1["completion_ids"]) == named_rest and chat.decode(c2["completion_ids"]) == any_rest
        )
        r3 = (await client.post(url(s), json={**body, "tool_choice": "none"}, headers=auth(s))).json()
        assert r3["output"][0]["type"] == "message"


async def test_max_output_tokens_makes_an_incomplete_response(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["one two three four five six", "one two three four five six"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        body = {"input": "count", "max_output_tokens": 3}
        out = (await client.post(url(s), json=body, headers=auth(s))).json()
        assert out["status"] == "incomplete" and out["incomplete_details"] == {"reason": "max_output_tokens"}
        assert out["usage"]["output_tokens"] == 3 and out["output"][0]["status"] == "incomplete"
        assert out["max_output_tokens"] == 3
        body["input"] = "again"
        stream = events((await client.post(url(s), json={**body, "stream": True}, headers=auth(s))).text)
        assert stream[-1]["type"] == "response.incomplete"
        assert stream[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


STREAM_CASES = [
    ("Once upon a time there was a dragon who liked to read long books.", []),
    ("Let me look.\n" + CALL_TEXT, TOOLS),
    (CALL_TEXT, TOOLS),
    ("Use {braces} and <tags> freely.  ", TOOLS),
]


@pytest.mark.parametrize(("reply", "tools"), STREAM_CASES)
async def test_streamed_events_match_the_answer_and_the_record(
    chat: ChatFormat, tmp_path: Path, reply: str, tools: list[Any]
) -> None:
    engine = scripted(chat.tokenizer, [reply, reply])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        plain = (await client.post(url(s), json={"input": "x", "tools": tools}, headers=auth(s))).json()
        r = await client.post(url(s), json={"input": "y", "tools": tools, "stream": True}, headers=auth(s))
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        stream = events(r.text)
        assert [e["sequence_number"] for e in stream] == list(range(len(stream)))
        kinds = [e["type"] for e in stream]
        final = stream[-1]["response"]
        expected = ["response.created", "response.in_progress"]
        for item in final["output"]:
            if item["type"] == "message":
                deltas = kinds.count("response.output_text.delta")
                expected += ["response.output_item.added", "response.content_part.added"]
                expected += ["response.output_text.delta"] * deltas
                expected += [
                    "response.output_text.done",
                    "response.content_part.done",
                    "response.output_item.done",
                ]
            else:
                expected += [
                    "response.output_item.added",
                    "response.function_call_arguments.delta",
                    "response.function_call_arguments.done",
                    "response.output_item.done",
                ]
        assert kinds == [*expected, "response.completed"]
        assert stream[0]["response"]["status"] == "in_progress" and stream[0]["response"]["output"] == []
        text = "".join(e["delta"] for e in stream if e["type"] == "response.output_text.delta")
        plain_text = "".join(
            p["text"] for i in plain["output"] if i["type"] == "message" for p in i["content"]
        )
        assert text == plain_text
        assert [i["type"] for i in final["output"]] == [i["type"] for i in plain["output"]]
        done = [e["item"] for e in stream if e["type"] == "response.output_item.done"]
        assert done == final["output"]
        args = [e["delta"] for e in stream if e["type"] == "response.function_call_arguments.delta"]
        assert args == [i["arguments"] for i in final["output"] if i["type"] == "function_call"]
        call = (await record(client, s["id"]))["calls"][1]
        assert final["id"] == stream[0]["response"]["id"] and final["usage"]["output_tokens"] == len(
            call["completion_ids"]
        )
        if not tools:  # no tool parsing: the text is the recorded ids' text, token for token
            assert text == chat.decode(call["completion_ids"]) and len(text) > 0


async def test_previous_response_id_continues_the_conversation_and_trajectory(
    chat: ChatFormat, tmp_path: Path
) -> None:
    odd = one_call_ids(chat)
    replies: list[Any] = [CALL_TEXT, odd, "bye"]
    engine = scripted(chat.tokenizer, [*replies, "more", *replies])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        body = {"instructions": "sys", "tools": TOOLS}
        r1 = (await client.post(url(s), json={**body, "input": "list"}, headers=auth(s))).json()
        (call,) = r1["output"]
        out = {"type": "function_call_output", "call_id": call["call_id"], "output": "a.py"}
        r2 = (
            await client.post(
                url(s), json={**body, "input": [out], "previous_response_id": r1["id"]}, headers=auth(s)
            )
        ).json()
        assert r2["previous_response_id"] == r1["id"]
        next_turn = {**body, "input": "thanks", "previous_response_id": r2["id"], "stream": True}
        stream = events((await client.post(url(s), json=next_turn, headers=auth(s))).text)
        r3 = stream[-1]["response"]
        # A streamed response is stored too: the conversation goes on from it.
        r4 = await client.post(
            url(s), json={**body, "input": "more", "previous_response_id": r3["id"]}, headers=auth(s)
        )
        assert r4.status_code == 200
        rec = await record(client, s["id"])
        c1, c2, c3, _ = rec["calls"]
        assert [c["base_call_id"] for c in rec["calls"][1:]] == [c1["id"], c2["id"], c3["id"]]
        assert rec["stats"]["trajectories"] == 1 and rec["stats"]["splits"] == 0

        # The same conversation sent whole each time gives the same prompt ids.
        s2 = await new_session(client)
        conv: list[dict[str, Any]] = [{"role": "user", "content": "list"}]
        res = (await client.post(url(s2), json={**body, "input": conv}, headers=auth(s2))).json()
        conv += [*res["output"], {**out, "call_id": res["output"][0]["call_id"]}]
        res = (await client.post(url(s2), json={**body, "input": conv}, headers=auth(s2))).json()
        conv += [*res["output"], {"role": "user", "content": "thanks"}]
        await client.post(url(s2), json={**body, "input": conv}, headers=auth(s2))
        whole = (await record(client, s2["id"]))["calls"]
        assert [c["prompt_ids"] for c in whole] == [c["prompt_ids"] for c in (c1, c2, c3)]


async def test_store_false_and_unknown_previous_response_ids(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["a", "b"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        other = await new_session(client)
        kept = (await client.post(url(s), json={"input": "x"}, headers=auth(s))).json()
        unkept = (await client.post(url(s), json={"input": "y", "store": False}, headers=auth(s))).json()
        assert unkept["store"] is False and kept["store"] is True
        for sid, prev in ((s, unkept["id"]), (s, "resp_nosuch"), (other, kept["id"])):
            body = {"input": "z", "previous_response_id": prev}
            r = await client.post(url(sid), json=body, headers=auth(sid))
            assert r.status_code == 400
            err = r.json()["error"]
            assert err["code"] == "previous_response_not_found" and err["param"] == "previous_response_id"
            assert repr(prev) in err["message"]
        assert len(engine.calls) == 2


async def test_a_conversation_goes_on_from_a_stored_response_after_a_restart(chat: ChatFormat, tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    body = {"instructions": "sys", "tools": TOOLS}
    async with proxy_client(chat, scripted(chat.tokenizer, [CALL_TEXT, "ok"]), db) as (client, _):
        s = await new_session(client)
        r1 = (await client.post(url(s), json={**body, "input": "list"}, headers=auth(s))).json()
        out = {"type": "function_call_output", "call_id": r1["output"][0]["call_id"], "output": "a.py"}
        r2 = (
            await client.post(url(s), json={**body, "input": [out], "previous_response_id": r1["id"]}, headers=auth(s))
        ).json()
        unkept = (await client.post(url(s), json={"input": "y", "store": False}, headers=auth(s))).json()
    # a new proxy process on the same record: the chain r1 -> r2 is rebuilt from it
    async with proxy_client(chat, scripted(chat.tokenizer, ["bye"]), db) as (client, _):
        r3 = await client.post(url(s), json={**body, "input": "thanks", "previous_response_id": r2["id"]}, headers=auth(s))
        assert r3.status_code == 200, r3.text
        rec = await record(client, s["id"])
        _c1, c2, _unkept, c3 = rec["calls"]
        assert c3["base_call_id"] == c2["id"] and c3["prompt_ids"][: len(c2["prompt_ids"])] == c2["prompt_ids"]
        assert len(rec["trajectories"][0]["call_ids"]) == 3  # r1, r2 and r3: one trajectory
        gone = await client.post(url(s), json={"input": "z", "previous_response_id": unkept["id"]}, headers=auth(s))
        assert gone.status_code == 400 and gone.json()["error"]["code"] == "previous_response_not_found"


async def test_a_response_asked_without_input_is_rebuilt_from_the_record(chat: ChatFormat, tmp_path: Path) -> None:
    """``previous_response_id`` alone (no ``input``: answer the conversation as it is), then a restart:
    the chain is rebuilt from the record (its request has no ``input`` key; a KeyError gave a 500)."""
    db = tmp_path / "p.db"
    async with proxy_client(chat, scripted(chat.tokenizer, ["one", "two"]), db) as (client, _):
        s = await new_session(client)
        r1 = (await client.post(url(s), json={"input": "hi"}, headers=auth(s))).json()
        r2 = await client.post(url(s), json={"previous_response_id": r1["id"]}, headers=auth(s))
        assert r2.status_code == 200, r2.text
    async with proxy_client(chat, scripted(chat.tokenizer, ["three"]), db) as (client, _):
        r3 = await client.post(url(s), json={"input": "go on", "previous_response_id": r2.json()["id"]}, headers=auth(s))
        assert r3.status_code == 200, r3.text
        assert r3.json()["output"][0]["content"][0]["text"] == "three"


async def test_the_same_conversation_via_chat_and_responses_records_the_same_ids(
    chat: ChatFormat, tmp_path: Path
) -> None:
    odd = one_call_ids(chat)
    replies: list[Any] = [CALL_TEXT, odd, "bye"]
    engine = scripted(chat.tokenizer, replies * 2)
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        via_chat = await new_session(client)
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "list"},
        ]
        r1 = (
            await client.post(
                url(via_chat, "/chat/completions"),
                json={"messages": msgs, "tools": CHAT_TOOLS},
                headers=auth(via_chat),
            )
        ).json()
        message = r1["choices"][0]["message"]
        msgs += [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "a.py"}]
        r2 = (
            await client.post(
                url(via_chat, "/chat/completions"),
                json={"messages": msgs, "tools": CHAT_TOOLS},
                headers=auth(via_chat),
            )
        ).json()
        msgs += [r2["choices"][0]["message"], {"role": "user", "content": "thanks"}]
        await client.post(
            url(via_chat, "/chat/completions"),
            json={"messages": msgs, "tools": CHAT_TOOLS},
            headers=auth(via_chat),
        )

        via_responses = await new_session(client)
        body = {"instructions": "sys", "tools": TOOLS}
        a1 = (
            await client.post(url(via_responses), json={**body, "input": "list"}, headers=auth(via_responses))
        ).json()
        result = {"type": "function_call_output", "call_id": a1["output"][0]["call_id"], "output": "a.py"}
        a2 = (
            await client.post(
                url(via_responses),
                json={**body, "input": [result], "previous_response_id": a1["id"]},
                headers=auth(via_responses),
            )
        ).json()
        turn = {**body, "input": [{"role": "user", "content": "thanks"}], "previous_response_id": a2["id"]}
        await client.post(url(via_responses), json=turn, headers=auth(via_responses))

        chat_rec = await record(client, via_chat["id"])
        resp_rec = await record(client, via_responses["id"])
        for key in ("prompt_ids", "completion_ids", "logprobs"):
            assert [c[key] for c in resp_rec["calls"]] == [c[key] for c in chat_rec["calls"]], key
        strip = ("call_ids", "group_id")
        assert [{k: v for k, v in t.items() if k not in strip} for t in resp_rec["trajectories"]] == [
            {k: v for k, v in t.items() if k not in strip} for t in chat_rec["trajectories"]
        ]
        assert resp_rec["stats"]["trajectories"] == 1


async def test_retries_are_answered_from_the_record(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["one", "two three four"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        r1 = await client.post(url(s), json={"input": "x"}, headers=auth(s))
        r2 = await client.post(url(s), json={"input": "x"}, headers=auth(s))
        assert r1.json() == r2.json() and r2.headers["x-coderl-replayed"] == "true"
        body = {"input": "y", "stream": True}
        live = events((await client.post(url(s), json=body, headers=auth(s))).text)
        again = await client.post(url(s), json=body, headers=auth(s))
        assert again.headers["x-coderl-replayed"] == "true"
        replayed = events(again.text)
        assert replayed[-1]["response"] == live[-1]["response"] and len(engine.calls) == 2
        assert [e["sequence_number"] for e in replayed] == list(range(len(replayed)))
        assert replayed[0]["response"]["id"] == live[0]["response"]["id"]


async def test_engine_failures_keep_the_openai_error_shape(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer)
    engine.dead = True
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        for stream in (False, True):
            r = await client.post(url(s), json={"input": "x", "stream": stream}, headers=auth(s))
            assert r.status_code == 503 and "Retry-After" in r.headers
            assert r.json()["error"]["code"] == "engine_unavailable"
    # Once the headers are out, an error comes as an ``error`` event in the stream, then response.failed.
    shape = ResponseStream({"id": "resp_1", "status": "in_progress"}, lambda row: {})
    for status, want in [(503, "server_error"), (500, "server_error"), (429, "rate_limit_exceeded"), (400, "invalid_prompt")]:
        assert failed_code(status) == want  # the API's codes (the SDK's ResponseError)
    error, failed = events(shape.error(503, "the engine is unavailable").decode())
    assert error == {
        "type": "error",
        "code": "engine_unavailable",
        "message": "the engine is unavailable",
        "param": None,
        "error": {
            "type": "server_error", "code": "engine_unavailable", "message": "the engine is unavailable", "param": None,
        },
        "sequence_number": 0,
    }  # fmt: skip
    assert failed == {
        "type": "response.failed",
        "response": {
            "id": "resp_1", "status": "failed",
            "error": {"code": "server_error", "message": "the engine is unavailable"},  # the SDK's codes
        },
        "sequence_number": 1,
    }  # fmt: skip


class _LostMidStream(ScriptedEngine):
    """Hands over its reply's first three tokens, then loses its replica."""

    async def generate_streaming(
        self, prompt_ids: list[int], params: Any, on_tokens: Any, session_id: str | None = None
    ) -> Any:
        done = await self.generate(prompt_ids, params, session_id=session_id)
        for token, logprob in list(zip(done.token_ids, done.logprobs, strict=True))[:3]:
            on_tokens([token], [logprob])
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        raise EngineUnavailableError("replica lost")


async def test_an_engine_lost_mid_stream_fails_the_response_for_the_sdk_and_codex(
    chat: ChatFormat, tmp_path: Path
) -> None:
    engine = _LostMidStream(["Once upon a time there was a dragon."], chat.tokenizer, default="ok")
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, app):
        s = await new_session(client)
        r = await client.post(url(s), json={"input": "x", "stream": True}, headers=auth(s))
        got = events(r.text)
        assert r.status_code == 200 and "response.output_text.delta" in [e["type"] for e in got]
        assert [e["type"] for e in got[-2:]] == ["error", "response.failed"]  # Codex reads the last
        assert got[-1]["response"]["error"]["code"] == "server_error"  # Codex: retryable, as engine_unavailable was
        sdk = openai.AsyncOpenAI(
            base_url=s["openai_base_url"], api_key=s["secret"], http_client=sdk_http_client(app), max_retries=0
        )
        stream = await sdk.responses.create(model="m", input="y", stream=True)
        with pytest.raises(openai.APIError, match="replica lost"):
            async for _ in stream:
                pass


async def test_image_and_file_parts_read_as_placeholders(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["I cannot see it."])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        content = [{"type": "input_text", "text": "what is in "}, {"type": "input_image", "image_url": "data:x"},
                   {"type": "input_file", "file_id": "f1"}]  # fmt: skip
        r = await client.post(url(s), json={"input": [{"role": "user", "content": content}]}, headers=auth(s))
        assert r.status_code == 200, r.text
        prompt = chat.tokenizer.decode(engine.prompts[0])
        assert "what is in [input_image omitted: this model reads text only][input_file omitted: this model" in prompt


async def test_logprobs_when_included(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["Hello."])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        body = {"input": "x", "include": ["message.output_text.logprobs"]}
        out = (await client.post(url(s), json=body, headers=auth(s))).json()
        lps = out["output"][0]["content"][0]["logprobs"]
        call = (await record(client, s["id"]))["calls"][0]
        assert [t["logprob"] for t in lps] == pytest.approx(call["logprobs"])
        assert "".join(t["token"] for t in lps[:-1]) == "Hello."


async def test_logprobs_bytes_are_each_tokens_own(chat: ChatFormat, tmp_path: Path) -> None:
    """A token holding part of a character decodes to U+FFFD alone; its ``bytes`` are that part, so the
    entries' bytes join to the reply's UTF-8 (they were U+FFFD's bytes), on both OpenAI endpoints."""
    reply = "naïve 😀 日本"
    engine = scripted(chat.tokenizer, [reply, reply])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _):
        s = await new_session(client)
        body = {"input": "x", "include": ["message.output_text.logprobs"]}
        out = (await client.post(url(s), json=body, headers=auth(s))).json()
        chat_body = {"messages": [{"role": "user", "content": "x"}], "logprobs": True}
        done = (await client.post(url(s, "/chat/completions"), json=chat_body, headers=auth(s))).json()
    for lps in (out["output"][0]["content"][0]["logprobs"], done["choices"][0]["logprobs"]["content"]):
        assert any("\ufffd" in t["token"] for t in lps)  # the case: a character split over tokens
        assert bytes(b for t in lps[:-1] for b in t["bytes"]).decode() == reply  # the last is <|im_end|>
        assert bytes(lps[-1]["bytes"]).decode() == "<|im_end|>"


def test_items_convert_to_the_chat_endpoints_messages() -> None:
    items = [
        {"role": "user", "content": "q"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hm"}]},
        {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "b", "arguments": '{"x": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "r1"}]},
        {"type": "function_call_output", "call_id": "c2", "output": "r2"},
        {"type": "function_call", "call_id": "c3", "name": "a", "arguments": "{}"},
    ]
    call = {"type": "function"}
    assert chat_messages(items, "sys") == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "hm",
            "tool_calls": [
                {"id": "c1", **call, "function": {"name": "a", "arguments": "{}"}},
                {"id": "c2", **call, "function": {"name": "b", "arguments": '{"x": 1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c3", **call, "function": {"name": "a", "arguments": "{}"}}],
        },
    ]


def test_memory_is_bounded_and_keeps_chains() -> None:
    memory = ResponseMemory(per_session=2, sessions=2)
    root = StoredResponse(None, ({"n": 0},))
    memory.put("s1", "r0", root)
    child = StoredResponse(root, ({"n": 1},))
    memory.put("s1", "r1", child)
    memory.put("s1", "r2", StoredResponse(child, ({"n": 2},)))
    assert memory.get("s1", "r0") is None  # evicted: the oldest of three
    r2 = memory.get("s1", "r2")
    assert r2 is not None and r2.conversation() == [{"n": 0}, {"n": 1}, {"n": 2}]  # the chain survives
    memory.put("s2", "r", root)
    memory.put("s3", "r", root)
    assert memory.get("s1", "r2") is None and memory.get("s3", "r") is root and len(memory) == 2


async def test_the_openai_sdk_creates_and_streams_responses(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, ["Let me look. " + CALL_TEXT, "plain answer " * 6, "short"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, app):
        s = await new_session(client)
        sdk = openai.AsyncOpenAI(
            base_url=s["openai_base_url"], api_key=s["secret"], http_client=sdk_http_client(app)
        )
        first = await sdk.responses.create(model="m", instructions="sys", input="go", tools=TOOLS)  # type: ignore[arg-type]
        assert first.status == "completed" and first.output_text == "Let me look."
        call = first.output[1]
        assert (
            call.type == "function_call"
            and call.name == "bash"
            and json.loads(call.arguments) == {"cmd": "ls"}
        )
        stream = await sdk.responses.create(
            model="m",
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "a.py"}],
            previous_response_id=first.id,
            instructions="sys",  # not carried over from the previous response, as in the API
            tools=TOOLS,  # type: ignore[arg-type]
            stream=True,
        )
        got = [e async for e in stream]
        assert got[0].type == "response.created" and got[-1].type == "response.completed"
        text = "".join(e.delta for e in got if e.type == "response.output_text.delta")
        assert text == "plain answer " * 5 + "plain answer"  # stripped, as parsed content is
        async with sdk.responses.stream(
            model="m",
            input="more",
            previous_response_id=got[-1].response.id,
            instructions="sys",
            tools=TOOLS,  # type: ignore[arg-type]
        ) as events_:
            final = await events_.get_final_response()
        rec = await record(client, s["id"])
        assert final.output_text == "short" and final.usage is not None
        assert final.usage.output_tokens == len(rec["calls"][2]["completion_ids"])
        assert final.usage.input_tokens_details.cache_write_tokens == 0  # a field the SDK requires
        assert rec["stats"]["trajectories"] == 1 and rec["stats"]["calls"] == 3
        again = await sdk.responses.create(  # no input: the stored conversation, answered as it is
            model="m", previous_response_id=final.id, instructions="sys", tools=TOOLS,  # type: ignore[arg-type]
            reasoning={"effort": "low"}, text={"verbosity": "low"},
        )  # fmt: skip
        assert again.status == "completed" and again.output_text == "ok"
        assert again.reasoning is not None and again.reasoning.effort == "low" and again.text.verbosity == "low"
        rec = await record(client, s["id"])
        assert rec["stats"]["calls"] == 4


@pytest.mark.slow
def test_responses_against_the_real_engine(tokenizer: Any, hf_model: Any, tmp_path: Path) -> None:
    """The real model through the SDK on loopback: streamed text is the record's text, the record's
    logprobs match an independent forward pass, and previous_response_id continues the trajectory."""
    engine = EmbeddedEngine(EngineConfig(max_batch_size=2, prefill_chunk=256), ModelConfig())
    chat = ChatFormat(tokenizer)
    app = create_app(ProxyConfig(db=tmp_path / "p.db", admin_token=ADMIN), engine, chat, model_name="smol")
    with serve(app) as base:
        s = admin(base, "POST", "/sessions")
        sdk = openai.OpenAI(base_url=s["openai_base_url"], api_key=s["secret"], max_retries=0)
        kwargs: dict[str, Any] = {"model": "smol", "max_output_tokens": 24, "temperature": 0}
        got = list(
            sdk.responses.create(
                input="Tell me about the sea.", instructions="Be brief.", stream=True, **kwargs
            )
        )
        text = "".join(e.delta for e in got if e.type == "response.output_text.delta")
        first = got[-1].response  # type: ignore[union-attr]  # completed, or incomplete at 24 tokens
        second = sdk.responses.create(
            input="And the sky?", previous_response_id=first.id, instructions="Be brief.", **kwargs
        )
        rec = admin(base, "GET", f"/sessions/{s['id']}")
        c1, c2 = rec["calls"]
        assert got[-1].type == (
            "response.incomplete" if c1["finish_reason"] == "length" else "response.completed"
        )
        assert text == first.output_text == tokenizer.decode(c1["completion_ids"], skip_special_tokens=True)
        assert second.output_text == tokenizer.decode(c2["completion_ids"], skip_special_tokens=True)
        assert c2["base_call_id"] == c1["id"] and rec["stats"]["trajectories"] == 1
        check_record_against_reference(rec, hf_model)
