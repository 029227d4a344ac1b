"""The proxy's Anthropic dialect through the official SDK, on a scripted engine (in process, fast)."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import anthropic
import pytest

from coderl.chat import ChatFormat
from coderl.engine.scripted import ScriptedEngine
from tests.proxy_fakes import new_session, proxy_client, record, scripted, sdk_http_client

TOOLS = [
    {
        "name": "bash",
        "description": "run a command",
        "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    }
]
CALL_TEXT = 'Checking.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>'


@pytest.fixture(scope="module")
def chat(tokenizer: Any) -> ChatFormat:
    return ChatFormat(tokenizer)


async def test_tool_use_round_trip_streams_and_merges(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer, [CALL_TEXT, "There are two files.", "Bye END now"])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, app):
        s = await new_session(client)
        sdk = anthropic.AsyncAnthropic(
            base_url=s["anthropic_base_url"],
            api_key=s["secret"],
            http_client=sdk_http_client(app),
        )
        messages: list[dict[str, Any]] = [{"role": "user", "content": "What is here?"}]
        async with sdk.messages.stream(
            model="m",
            max_tokens=64,
            system="You are terse.",
            messages=messages,
            tools=TOOLS,  # type: ignore[arg-type]
        ) as stream:
            texts = [t async for t in stream.text_stream]
            first = await stream.get_final_message()
        assert "".join(texts) == "Checking."
        assert first.stop_reason == "tool_use"
        text_block, tool_block = first.content
        assert text_block.type == "text" and text_block.text == "Checking."
        assert (
            tool_block.type == "tool_use" and tool_block.name == "bash" and tool_block.input == {"cmd": "ls"}
        )
        assert first.usage.output_tokens == len(chat.encode(CALL_TEXT)) + 1

        messages += [
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_block.id, "content": "a.py b.py"}],
            },
        ]
        second = await sdk.messages.create(
            model="m", max_tokens=64, system="You are terse.", messages=messages, tools=TOOLS
        )  # type: ignore[arg-type]
        assert second.stop_reason == "end_turn" and second.content[0].text == "There are two files."  # type: ignore[union-attr]
        messages += [
            {"role": "assistant", "content": "There are two files."},
            {"role": "user", "content": "ok"},
        ]
        third = await sdk.messages.create(
            model="m",
            max_tokens=64,
            system="You are terse.",
            messages=messages,
            tools=TOOLS,
            stop_sequences=["END"],  # type: ignore[arg-type]
        )
        assert third.stop_reason == "stop_sequence" and third.stop_sequence == "END"
        assert third.content[0].text == "Bye"  # type: ignore[union-attr]  # cut before the token " END"

        rec = await record(client, s["id"])
        c1, c2, c3 = rec["calls"]
        assert [c["api"] for c in rec["calls"]] == ["messages"] * 3
        assert c1["prompt_ids"] == chat.render(
            [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is here?"}],
            [
                {
                    "type": "function",
                    "function": {
                        "name": "bash",
                        "description": "run a command",
                        "parameters": TOOLS[0]["input_schema"],
                    },
                }
            ],
        )
        assert c2["base_call_id"] == c1["id"] and c3["base_call_id"] == c2["id"]
        assert chat.decode(c3["completion_ids"]) == "Bye"  # the record is exactly the text returned
        assert rec["stats"]["trajectories"] == 1 and rec["stats"]["calls"] == 3


@pytest.mark.parametrize(("reply", "stop"), [("Once upon a time, far away.", "."), ("The sea is blue", " ")])
async def test_a_stream_never_sends_the_stop_sequence(
    chat: ChatFormat, tmp_path: Path, caplog: pytest.LogCaptureFixture, reply: str, stop: str
) -> None:
    engine = scripted(chat.tokenizer, [reply, reply])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, app):
        s = await new_session(client)
        sdk = anthropic.AsyncAnthropic(
            base_url=s["anthropic_base_url"], api_key=s["secret"], http_client=sdk_http_client(app)
        )
        ask: dict[str, Any] = {"model": "m", "max_tokens": 64, "stop_sequences": [stop]}
        plain = await sdk.messages.create(messages=[{"role": "user", "content": "x"}], **ask)
        with caplog.at_level(logging.WARNING, logger="coderl"):
            async with sdk.messages.stream(messages=[{"role": "user", "content": "y"}], **ask) as stream:
                texts = [t async for t in stream.text_stream]
                final = await stream.get_final_message()
        expected = reply[: reply.index(stop)]
        assert plain.content[0].text == expected  # type: ignore[union-attr]
        assert "".join(texts) == expected  # not "...way." or "The sea"
        assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
        assert chat.decode((await record(client, s["id"]))["calls"][1]["completion_ids"]) == expected
        ours = [r for r in caplog.records if r.name.startswith("coderl")]  # not another test's GC'd task
        assert not ours, [r.getMessage() for r in ours]


XML_CALL_REST = [  # what the model writes after the forced opening of a call, in Qwen3-Coder's format
    "<parameter=cmd>\nls\n</parameter>\n</function>\n</tool_call>",  # after <tool_call>\n<function=bash>\n
    "python>\n<parameter=code>\nprint(1)\n</parameter>\n</function>\n</tool_call>",  # after <function=
]


@pytest.mark.parametrize("stream", [False, True])
async def test_forced_tool_choice_in_the_xml_tool_format(
    tokenizer: Any, tmp_path: Path, stream: bool
) -> None:
    chat = ChatFormat(tokenizer, "xml")  # the packaged training recipe's model.tool_format
    engine = scripted(tokenizer, XML_CALL_REST)
    tools = [*TOOLS, {"name": "python", "input_schema": {"type": "object"}}]
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, app):
        s = await new_session(client)
        sdk = anthropic.AsyncAnthropic(
            base_url=s["anthropic_base_url"], api_key=s["secret"], http_client=sdk_http_client(app)
        )
        replies = []
        for choice in ({"type": "tool", "name": "bash"}, {"type": "any"}):
            ask: dict[str, Any] = {
                "model": "m",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": "x"}],
                "tools": tools,
                "tool_choice": choice,
            }
            if stream:
                async with sdk.messages.stream(**ask) as events:
                    assert not [t async for t in events.text_stream]
                    replies.append(await events.get_final_message())
            else:
                replies.append(await sdk.messages.create(**ask))
        blocks = [
            [(b.type, getattr(b, "name", None), getattr(b, "input", None)) for b in r.content]
            for r in replies
        ]
        assert blocks == [
            [("tool_use", "bash", {"cmd": "ls"})],
            [("tool_use", "python", {"code": "print(1)"})],
        ]
        assert [r.stop_reason for r in replies] == ["tool_use", "tool_use"]
        opening = chat.encode("<tool_call>\n<function=bash>\n")
        assert engine.prompts[0][-len(opening) :] == opening  # the forced opening is prompt, in xml


async def test_count_tokens_and_errors(chat: ChatFormat, tmp_path: Path) -> None:
    async with proxy_client(chat, scripted(chat.tokenizer), tmp_path / "p.db") as (client, app):
        s = await new_session(client)
        sdk = anthropic.AsyncAnthropic(
            base_url=s["anthropic_base_url"],
            api_key="wrong",
            http_client=sdk_http_client(app),
            max_retries=0,
        )
        with pytest.raises(anthropic.AuthenticationError):
            await sdk.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        r = await client.post(
            f"/s/{s['id']}/v1/messages/count_tokens",
            json={"messages": [{"role": "user", "content": "hi"}]},
            headers={"x-api-key": s["secret"]},
        )
        assert r.json() == {"input_tokens": len(chat.render([{"role": "user", "content": "hi"}]))}


async def test_system_entries_inside_messages_are_rendered_where_they_stand(chat: ChatFormat, tmp_path: Path) -> None:
    # stock Claude Code sends its environment notes as a role "system" entry after the first user turn
    engine = scripted(chat.tokenizer)
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _app):
        s = await new_session(client)
        messages = [
            {"role": "user", "content": [{"type": "text", "text": "fix calc.py"}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /repo"}]},
        ]
        r = await client.post(
            f"/s/{s['id']}/v1/messages",
            json={"model": "m", "max_tokens": 5, "system": "You fix bugs.", "messages": messages},
            headers={"x-api-key": s["secret"]},
        )
        assert r.status_code == 200, r.text
        expected = chat.render(
            [
                {"role": "system", "content": "You fix bugs."},
                {"role": "user", "content": "fix calc.py"},
                {"role": "system", "content": "# Environment\ncwd: /repo"},
            ]
        )
        assert engine.calls[0].prompt_ids == expected


async def test_a_prompt_over_the_context_gets_advice_that_can_work(chat: ChatFormat, tmp_path: Path) -> None:
    from coderl.errors import PromptTooLongError

    engine = scripted(chat.tokenizer, [PromptTooLongError(9100, 8192, 8192)])
    tools = [*TOOLS, {"name": "WebFetch", "description": "fetch a page " * 200, "input_schema": {}}]
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _app):
        s = await new_session(client)
        r = await client.post(
            f"/s/{s['id']}/v1/messages",
            json={"model": "m", "max_tokens": 5, "system": "You fix bugs.", "tools": tools,
                  "messages": [{"role": "user", "content": "hi"}]},
            headers={"x-api-key": s["secret"]},
        )  # fmt: skip
        assert r.status_code == 400
        msg = r.json()["error"]["message"]
        # Anthropic's wording, the one Claude Code matches to compact its conversation (errors.ts)
        assert re.search(r"prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)", msg, re.I)
        assert msg.startswith("prompt is too long: 9100 tokens > 8191 maximum")
        assert "2 tool definitions take about" in msg
        assert msg.index("WebFetch") < msg.index("bash")  # the largest first
        assert "8192 tokens is this model's own limit" in msg and "--tools Bash,Read,Edit" in msg
        assert "raise engine.max_model_len" not in msg  # advice that cannot work is not given
        assert (await record(client, s["id"]))["stats"]["context_refusals"] == 1
    # a prompt past the model's own limit: raising engine.max_model_len (4096 here) would not help either
    assert "raise engine.max_model_len" not in str(PromptTooLongError(17700, 4096, 8192))
    assert "up to 8192" in str(PromptTooLongError(5000, 4096, 8192))  # ... but here it would


async def test_max_tokens_cap_bounds_what_a_client_asks_for(chat: ChatFormat, tmp_path: Path) -> None:
    engine = scripted(chat.tokenizer)
    async with proxy_client(chat, engine, tmp_path / "p.db", max_tokens_cap=16) as (client, _app):
        s = await new_session(client)
        for asked in (32000, 8):
            r = await client.post(
                f"/s/{s['id']}/v1/messages",
                json={"model": "m", "max_tokens": asked, "messages": [{"role": "user", "content": "hi"}]},
                headers={"x-api-key": s["secret"]},
            )
            assert r.status_code == 200, r.text
        assert [c.params.max_tokens for c in engine.calls] == [16, 8]


async def test_a_head_probe_on_the_base_url_is_answered(chat: ChatFormat, tmp_path: Path) -> None:
    async with proxy_client(chat, scripted(chat.tokenizer), tmp_path / "p.db") as (client, _app):
        s = await new_session(client)
        for path in (f"/s/{s['id']}", f"/s/{s['id']}/api/hello"):  # Claude Code's first request
            assert (await client.head(path)).status_code == 200
        assert (await client.head("/s/nosuchsession/api/hello")).status_code == 404
        assert (await record(client, s["id"]))["calls"] == []


async def test_a_tool_call_sampled_slowly_keeps_the_stream_alive_with_pings(chat: ChatFormat, tmp_path: Path) -> None:
    """A tool call is held back until it is whole; meanwhile the stream sends Anthropic's ping events
    (Claude Code drops a stream that says nothing for a while, and the sampled call was lost with it)."""
    engine = ScriptedEngine([CALL_TEXT, CALL_TEXT], chat.tokenizer, default="ok", token_delay_s=0.05)
    async with proxy_client(chat, engine, tmp_path / "p.db", stream_keepalive_s=0.2) as (client, app):
        s = await new_session(client)
        body = {"model": "m", "max_tokens": 64, "tools": TOOLS, "stream": True,
                "messages": [{"role": "user", "content": "What is here?"}]}  # fmt: skip
        r = await client.post(f"/s/{s['id']}/v1/messages", json=body, headers={"x-api-key": s["secret"]})
        kinds = [line[len("event: ") :] for line in r.text.splitlines() if line.startswith("event: ")]
        # ~20 tokens of the call at 0.05 s each, nothing to send for them but pings
        assert kinds.count("ping") >= 3 and kinds[-1] == "message_stop"
        assert kinds.index("content_block_delta") < kinds.index("ping") < kinds.index("content_block_stop")  # after "Checking."
        sdk = anthropic.AsyncAnthropic(
            base_url=s["anthropic_base_url"], api_key=s["secret"], http_client=sdk_http_client(app)
        )
        async with sdk.messages.stream(model="m", max_tokens=64, tools=TOOLS, messages=body["messages"]) as stream:  # type: ignore[arg-type]
            final = await stream.get_final_message()
        assert final.stop_reason == "tool_use" and final.content[1].input == {"cmd": "ls"}  # type: ignore[union-attr]


class _Cached(ScriptedEngine):
    """Says that all but the last 3 prompt tokens came from its prefix cache."""

    async def generate(self, prompt_ids: list[int], params: Any, session_id: str | None = None) -> Any:
        done = await super().generate(prompt_ids, params, session_id=session_id)
        return dataclasses.replace(done, cached_tokens=len(prompt_ids) - 3)


async def test_cache_reads_are_not_counted_again_in_input_tokens(chat: ChatFormat, tmp_path: Path) -> None:
    """Anthropic's input_tokens leave out cache reads (clients add the two up to size their context),
    streamed or not."""
    async with proxy_client(chat, _Cached([], chat.tokenizer, default="ok"), tmp_path / "p.db") as (client, app):
        s = await new_session(client)
        sdk = anthropic.AsyncAnthropic(
            base_url=s["anthropic_base_url"], api_key=s["secret"], http_client=sdk_http_client(app)
        )
        messages = [{"role": "user", "content": "hi"}]
        plain = await sdk.messages.create(model="m", max_tokens=8, messages=messages)  # type: ignore[arg-type]
        async with sdk.messages.stream(model="m", max_tokens=8, messages=messages) as stream:  # type: ignore[arg-type]
            streamed = await stream.get_final_message()
        prompt = len((await record(client, s["id"]))["calls"][0]["prompt_ids"])
        for usage in (plain.usage, streamed.usage):
            assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (
                3, prompt - 3, 0,
            )  # fmt: skip
            assert usage.output_tokens == plain.usage.output_tokens


async def test_an_image_reads_as_a_placeholder_instead_of_ending_the_run(chat: ChatFormat, tmp_path: Path) -> None:
    """Claude Code's Read of a PNG sends the image inside its tool_result; the text-only model reads a
    placeholder, and the conversation goes on (a 400 would end the run: the image stays in the history)."""
    png = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    engine = scripted(chat.tokenizer, ['<tool_call>\n{"name": "bash", "arguments": {"cmd": "cat a.png"}}\n</tool_call>'])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, app):
        s = await new_session(client)
        sdk = anthropic.AsyncAnthropic(
            base_url=s["anthropic_base_url"], api_key=s["secret"], http_client=sdk_http_client(app)
        )
        first = await sdk.messages.create(
            model="m", max_tokens=64, tools=TOOLS, messages=[{"role": "user", "content": "look"}]  # type: ignore[arg-type]
        )
        call = first.content[0]
        assert call.type == "tool_use"
        result = {"type": "tool_result", "tool_use_id": call.id, "content": [
            {"type": "text", "text": "a.png:"}, {"type": "image", "source": png}]}  # fmt: skip
        messages: Any = [
            {"role": "user", "content": "look"},
            {"role": "assistant", "content": [call.model_dump()]},
            {"role": "user", "content": [result, {"type": "document", "source": {"type": "text", "data": "d"}}]},
        ]
        second = await sdk.messages.create(model="m", max_tokens=8, tools=TOOLS, messages=messages)  # type: ignore[arg-type]
        assert second.stop_reason == "end_turn"
        prompt = chat.tokenizer.decode(engine.prompts[1])
        assert "a.png:[image omitted: this model reads text only]" in prompt
        assert "[document omitted: this model reads text only]" in prompt
        rec = await record(client, s["id"])
        assert rec["stats"]["trajectories"] == 1  # the second turn extends the first one's ids


async def test_a_prefilled_assistant_turn_is_continued(chat: ChatFormat, tmp_path: Path) -> None:
    """A final assistant turn of text is the reply's start: the model continues it, the answer holds
    only the continuation (as Anthropic's does), streamed or not, and the next turn, sending the whole
    assistant text back, extends the same trajectory."""
    engine = scripted(chat.tokenizer, ["42).", "42).", "Welcome."])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, app):
        s = await new_session(client)
        sdk = anthropic.AsyncAnthropic(
            base_url=s["anthropic_base_url"], api_key=s["secret"], http_client=sdk_http_client(app)
        )
        ask: Any = [{"role": "user", "content": "What is 6 x 7?"}, {"role": "assistant", "content": "The answer is ("}]
        plain = await sdk.messages.create(model="m", max_tokens=16, messages=ask)
        assert plain.content[0].text == "42)."  # type: ignore[union-attr]
        assert plain._request_id and plain._request_id.startswith("req_")  # Anthropic's request-id header
        assert chat.tokenizer.decode(engine.prompts[0]).endswith("<|im_start|>assistant\nThe answer is (")
        async with sdk.messages.stream(model="m", max_tokens=16, messages=ask) as stream:
            streamed = "".join([t async for t in stream.text_stream])
            final = await stream.get_final_message()
        assert streamed == "42)." and final.content[0].text == "42)."  # type: ignore[union-attr]
        ids = stream.response.headers["request-id"], stream.response.headers["x-request-id"]
        assert ids[0] == ids[1] and ids[0].startswith("req_") and ids[0] != plain._request_id  # streamed too
        rec = await record(client, s["id"])
        assert rec["calls"][0]["completion_ids"][:2] == chat.encode("42).")[:2]  # the prefill is prompt, not sampled
        counted = await sdk.messages.count_tokens(model="m", messages=ask)
        assert counted.input_tokens == len(rec["calls"][0]["prompt_ids"])
        whole = [ask[0], {"role": "assistant", "content": "The answer is (42)."}, {"role": "user", "content": "thanks"}]
        await sdk.messages.create(model="m", max_tokens=16, messages=whole)  # type: ignore[arg-type]
        first, third = rec["calls"][0], (await record(client, s["id"]))["calls"][2]
        assert third["base_call_id"] is not None  # the prefill's and the reply's own ids, reused
        assert third["prompt_ids"][: len(first["prompt_ids"]) + len(first["completion_ids"])] == (
            first["prompt_ids"] + first["completion_ids"]
        )
        bad = [ask[0], {"role": "assistant", "content": "The answer is "}]
        with pytest.raises(anthropic.BadRequestError, match="trailing whitespace"):
            await sdk.messages.create(model="m", max_tokens=16, messages=bad)  # type: ignore[arg-type]


async def test_the_anthropic_sdk_lists_and_retrieves_the_served_model(chat: ChatFormat, tmp_path: Path) -> None:
    async with proxy_client(chat, scripted(chat.tokenizer), tmp_path / "p.db") as (client, app):
        s = await new_session(client)
        sdk = anthropic.AsyncAnthropic(
            base_url=s["anthropic_base_url"], api_key=s["secret"], http_client=sdk_http_client(app)
        )
        listed = [m async for m in sdk.models.list()]
        assert [(m.id, m.type, m.display_name) for m in listed] == [("test-model", "model", "test-model")]
        assert (await sdk.models.retrieve("test-model")).created_at.year == 1970


async def test_claude_codes_billing_header_block_is_not_prompt(chat: ChatFormat, tmp_path: Path) -> None:
    """Claude Code's first system block carries its version and a fingerprint of the task's text: left
    out, two tasks' prompts share their whole system prefix (they shared 25 tokens of 1,101)."""
    engine = scripted(chat.tokenizer)
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _app):
        s = await new_session(client)
        for fp in ("642", "4bb"):
            system = [
                {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.332.{fp}; cc_entrypoint=sdk-cli;"},
                {"type": "text", "text": "You fix bugs."},
            ]
            body = {"model": "m", "max_tokens": 5, "system": system, "messages": [{"role": "user", "content": fp}]}
            r = await client.post(f"/s/{s['id']}/v1/messages", json=body, headers={"x-api-key": s["secret"]})
            assert r.status_code == 200, r.text
    want = chat.render([{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "642"}])
    assert engine.calls[0].prompt_ids == want


BAD_FIELDS = [
    ({"output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}}},
     "output_config", "output_config.format: Extra inputs are not permitted"),  # Claude Code's retry-without phrase
    ({"output_format": {"type": "json_schema", "schema": {"type": "object"}}}, "output_config", "output_config.format"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 8}]}, "tools[0].type", "'web_search_20250305'"),
    ({"tools": [*TOOLS, {"type": "bash_20250124", "name": "bash2"}]}, "tools[1].type", "custom tools"),
    ({"mcp_servers": [{"type": "url", "url": "https://example.com/mcp", "name": "x"}]}, "mcp_servers", "MCP"),
    ({"tools": [{"type": "advisor_20260301", "name": "advisor", "model": "m"}]}, "tools[0].type",
     "the advisor tool is not available"),  # Claude Code's phrase to drop the tool and retry
]  # fmt: skip


@pytest.mark.parametrize(("extra", "param", "says"), BAD_FIELDS)
async def test_what_the_proxy_cannot_honour_is_a_400_naming_it(
    chat: ChatFormat, tmp_path: Path, extra: dict[str, Any], param: str, says: str
) -> None:
    """Structured outputs, Anthropic's own tools and MCP servers were accepted and ignored: a schema the
    reply never followed, a web search the local model answered by itself."""
    engine = scripted(chat.tokenizer)
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _app):
        s = await new_session(client)
        body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], **extra}
        r = await client.post(f"/s/{s['id']}/v1/messages", json=body, headers={"x-api-key": s["secret"]})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and says in err["message"], err
        assert engine.calls == []
        ok = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
              "output_config": {"effort": "high"}, "tools": [{**TOOLS[0], "type": "custom"}]}  # fmt: skip
        r = await client.post(f"/s/{s['id']}/v1/messages", json=ok, headers={"x-api-key": s["secret"]})
        assert r.status_code == 200, r.text  # effort (every Claude Code request) and custom tools stay accepted


async def test_tool_search_loads_deferred_tools_through_tool_reference_blocks(chat: ChatFormat, tmp_path: Path) -> None:
    """Stock Claude Code declares some tools with defer_loading and loads them with ToolSearch, whose
    result holds tool_reference blocks (a 400 before: Claude Code retried three times, then declared
    every tool in full, a new trajectory). A deferred tool is out of the prompt's tool list; a
    reference shows its definition as the ToolSearch description promises."""
    fetch = {"name": "WebFetch", "description": "fetch a URL", "defer_loading": True,
             "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}}  # fmt: skip
    search = {"name": "ToolSearch", "description": "load deferred tools", "input_schema": {"type": "object"}}
    engine = scripted(chat.tokenizer)
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _app):
        s = await new_session(client)
        use = {"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "select:WebFetch"}}
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "cache_control": {"type": "ephemeral"},
                  "content": [{"type": "tool_reference", "tool_name": "WebFetch"}]}  # fmt: skip
        messages = [
            {"role": "user", "content": "fetch it"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ]
        body = {"model": "m", "max_tokens": 5, "tools": [*TOOLS, search, fetch], "messages": messages}
        r = await client.post(f"/s/{s['id']}/v1/messages", json=body, headers={"x-api-key": s["secret"]})
        assert r.status_code == 200, r.text
        line = '<function>{"description": "fetch a URL", "name": "WebFetch", "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}}</function>'
        listed = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                     "parameters": t["input_schema"]}} for t in (*TOOLS, search)]  # fmt: skip
        want = chat.render(
            [
                {"role": "user", "content": "fetch it"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "toolu_1", "type": "function",
                  "function": {"name": "ToolSearch", "arguments": '{"query": "select:WebFetch"}'}}]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": f"<functions>\n{line}\n</functions>"},
            ],
            listed,
        )  # fmt: skip
        assert engine.calls[0].prompt_ids == want
        named = {**body, "tool_choice": {"type": "tool", "name": "WebFetch"}}  # a deferred tool is declared
        r = await client.post(f"/s/{s['id']}/v1/messages", json=named, headers={"x-api-key": s["secret"]})
        assert r.status_code == 200, r.text
        result["content"] = [{"type": "tool_reference", "tool_name": "Nope"}]
        r = await client.post(f"/s/{s['id']}/v1/messages", json=body, headers={"x-api-key": s["secret"]})
        assert r.status_code == 400 and "'Nope'" in r.json()["error"]["message"]


async def test_disable_parallel_tool_use_ends_the_reply_with_its_first_call(chat: ChatFormat, tmp_path: Path) -> None:
    two = CALL_TEXT + "\n" + CALL_TEXT.replace('"ls"', '"pwd"').removeprefix("Checking.\n")
    engine = scripted(chat.tokenizer, [two, two])
    async with proxy_client(chat, engine, tmp_path / "p.db") as (client, _app):
        s = await new_session(client)
        for choice, calls in (({"type": "auto", "disable_parallel_tool_use": True}, 1), ({"type": "auto"}, 2)):
            body = {"model": "m", "max_tokens": 200, "tools": TOOLS, "tool_choice": choice,
                    "messages": [{"role": "user", "content": "list"}]}  # fmt: skip
            r = await client.post(f"/s/{s['id']}/v1/messages", json=body, headers={"x-api-key": s["secret"]})
            got = r.json()
            assert [b["input"] for b in got["content"] if b["type"] == "tool_use"] == [{"cmd": "ls"}, {"cmd": "pwd"}][:calls]
            assert got["stop_reason"] == "tool_use"
