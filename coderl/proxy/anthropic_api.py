"""Anthropic dialect: Messages (``POST /s/{session_id}/v1/messages``), streaming events included.

Anthropic conversations are turned into the OpenAI-style messages the chat layer renders: ``system``
becomes the first message, ``tool_use`` blocks become assistant tool calls, ``tool_result`` blocks
become tool messages (before any text of the same user turn). So both dialects share the prompt
rendering, the mapping to sampled ids and the record.

Claude Code's billing-header system block is left out of the prompt (:data:`BILLING_HEADER`); tools
with ``defer_loading`` are out of the tool list until a tool result's ``tool_reference`` block loads
them. Refused with a 400 (:func:`check_supported`): ``output_config.format`` / ``output_format``,
Anthropic's typed tools, ``mcp_servers``. ``disable_parallel_tool_use`` ends the reply with its first
tool call (:func:`coderl.proxy.service.call_end`).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from coderl.engine.params import SamplingParams
from coderl.errors import ChatError
from coderl.proxy.errors import ApiError, error_body
from coderl.proxy.live import StreamShape
from coderl.proxy.openai_api import SEED_MOD, call_headers, streamed
from coderl.proxy.render import MEDIA_PARTS, Message, media_placeholder, message_text
from coderl.proxy.service import CallRequest, ProxyService, request_key
from coderl.proxy.sse import sse, text_pieces
from coderl.proxy.store import CallRow
from coderl.proxy.tool_choice import anthropic_tool_choice


class Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class Block(Lenient):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None


class AnthropicMessage(Lenient):
    role: Literal["user", "assistant", "system"]
    """``system`` inside ``messages`` is not in Anthropic's documented API, but Claude Code sends such
    entries (its environment notes); they are rendered as system messages where they stand."""
    content: str | list[Block]


class AnthropicTool(Lenient):
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any] = {}
    type: str | None = None
    """Absent or ``custom``: a tool the client runs; Anthropic's typed tools are refused (:func:`check_supported`)."""
    defer_loading: bool | None = None
    """Left out of the prompt's tool list until a ``tool_reference`` block in a tool result loads it."""


class MessagesRequest(Lenient):
    model: str = ""
    messages: list[AnthropicMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    system: str | list[Block] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: dict[str, Any] | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    stream: bool | None = False
    output_config: dict[str, Any] | None = None
    output_format: dict[str, Any] | None = None
    mcp_servers: list[Any] | None = None


BILLING_HEADER = "x-anthropic-billing-header:"
"""Claude Code's first system block (its version and a fingerprint of the task's text): metadata for
Anthropic's billing, not prompt; left out of the rendered prompt (Claude Code leaves it out of its own
prompt hashing too), else every trajectory would start with per-task noise."""


def check_supported(body: MessagesRequest) -> None:
    """400s for what the proxy cannot honour, each naming the field."""
    if body.output_format or (body.output_config or {}).get("format"):
        # Claude Code reads this phrase as "structured outputs unsupported here" and retries without them
        raise ApiError(
            400,
            "output_config.format: Extra inputs are not permitted: this proxy records free sampling and does "
            "not constrain it to a JSON schema; leave output_config.format (and output_format) out",
            param="output_config",
        )
    if body.mcp_servers:
        raise ApiError(
            400,
            "mcp_servers is not supported: the proxy connects to no MCP server; declare the tools the agent "
            "runs itself in tools",
            param="mcp_servers",
        )
    for i, tool in enumerate(body.tools or []):
        if tool.type not in (None, "custom"):
            # Claude Code drops its advisor tool and retries when the 400 says this phrase
            advisor = "; the advisor tool is not available" if tool.type.startswith("advisor") else ""
            raise ApiError(
                400,
                f"tools[{i}] ({tool.name!r}) is Anthropic's {tool.type!r} tool, which Anthropic runs or defines "
                f"itself; this proxy serves custom tools (name, description, input_schema) only{advisor}",
                param=f"tools[{i}].type",
            )


def _block_text(block: Block) -> str:
    if block.type != "text" or block.text is None:
        raise ChatError(f"expected a text block with 'text', got a {block.type!r} block")
    return block.text


def to_openai_messages(body: MessagesRequest) -> list[Message]:
    """Anthropic system + messages -> OpenAI-style messages (text, tool calls, tool results)."""
    out: list[Message] = []
    defs = {t.name: t for t in body.tools or []}
    if body.system:
        text = (
            body.system
            if isinstance(body.system, str)
            else "".join(_block_text(b) for b in body.system if not (b.text or "").startswith(BILLING_HEADER))
        )
        if text:
            out.append({"role": "system", "content": text})
    for msg in body.messages:
        if isinstance(msg.content, str):
            out.append({"role": msg.role, "content": msg.content})
            continue
        if msg.role == "system":
            out.append({"role": "system", "content": "".join(_block_text(b) for b in msg.content)})
            continue
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for block in msg.content:
            if block.type == "text":
                texts.append(block.text or "")
            elif block.type == "tool_use" and msg.role == "assistant":
                if not block.name:
                    raise ChatError("a tool_use block needs a 'name'")
                args = json.dumps(block.input or {}, ensure_ascii=False)
                calls.append(
                    {
                        "id": block.id or "",
                        "type": "function",
                        "function": {"name": block.name, "arguments": args},
                    }
                )
            elif block.type == "tool_result" and msg.role == "user":
                result = message_text(_load_references(block.content, defs))
                if block.is_error:
                    result = f"Error: {result}"
                out.append({"role": "tool", "tool_call_id": block.tool_use_id or "", "content": result})
            elif block.type in ("thinking", "redacted_thinking"):
                continue
            elif block.type in MEDIA_PARTS and msg.role == "user":
                texts.append(media_placeholder(block.type))
            else:
                raise ChatError(f"unsupported content block {block.type!r} in a {msg.role} message")
        if msg.role == "assistant":
            entry: Message = {"role": "assistant", "content": "".join(texts)}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
        elif texts:
            out.append({"role": "user", "content": "".join(texts)})
    return out


def _function(t: AnthropicTool) -> dict[str, Any]:
    return {"name": t.name, **({"description": t.description} if t.description else {}), "parameters": t.input_schema}


def _load_references(content: Any, defs: dict[str, AnthropicTool]) -> Any:
    """A tool result's ``tool_reference`` blocks (Claude Code's ToolSearch: "load these deferred tools")
    as the text its tool description promises: a ``<functions>`` block with one
    ``<function>{"description", "name", "parameters"}</function>`` line per tool, each a declared one."""
    if not isinstance(content, list) or not any(b.get("type") == "tool_reference" for b in content):
        return content
    out: list[dict[str, Any]] = []
    lines: list[str] = []
    for block in [*content, {"type": "end"}]:
        if block.get("type") == "tool_reference":
            name = block.get("tool_name")
            if name not in defs:
                raise ChatError(
                    f"a tool_reference names {name!r}, which the request does not declare; the declared tools "
                    f"are {sorted(defs)}"
                )
            fn = _function(defs[name])
            lines.append("<function>" + json.dumps({"description": fn.get("description", ""), "name": name,
                                                    "parameters": fn["parameters"]}, ensure_ascii=False) + "</function>")  # fmt: skip
            continue
        if lines:
            out.append({"type": "text", "text": "<functions>\n" + "\n".join(lines) + "\n</functions>"})
            lines = []
        if block.get("type") != "end":
            out.append(block)
    return out


def declared(tools: list[AnthropicTool] | None) -> list[dict[str, Any]] | None:
    """Every declared tool, deferred ones too (what a ``tool_choice`` may name)."""
    return [{"type": "function", "function": _function(t)} for t in tools or []] or None


def openai_tools(tools: list[AnthropicTool] | None) -> list[dict[str, Any]] | None:
    """The prompt's tool list: every declared tool but those whose loading is deferred (a tool result's
    ``tool_reference`` shows the model those)."""
    listed = [{"type": "function", "function": _function(t)} for t in tools or [] if not t.defer_loading]
    return listed or None


def take_prefill(msgs: list[Message], forced_call: bool) -> str:
    """A final assistant turn of text is the start of the reply (Anthropic's prefill): it is taken off
    ``msgs`` and returned, and the model continues it. A final turn with tool calls stays a turn."""
    if not msgs or msgs[-1].get("role") != "assistant" or msgs[-1].get("tool_calls"):
        return ""
    prefill = str(msgs.pop().get("content") or "")
    if prefill != prefill.rstrip():
        raise ApiError(400, "final assistant content cannot end with trailing whitespace", param="messages")
    if prefill and forced_call:
        raise ApiError(
            400,
            "a prefilled final assistant turn cannot go with tool_choice any or tool: the forced call must "
            "start the reply (leave out the prefill, or use tool_choice auto)",
            param="tool_choice",
        )
    return prefill


def extra_seed(body: MessagesRequest) -> int | None:
    """Anthropic has no seed; an integer ``seed`` sent anyway (a coderl extension) is honoured."""
    seed = (body.model_extra or {}).get("seed")
    return seed % SEED_MOD if isinstance(seed, int) and not isinstance(seed, bool) else None


def stop_reason(row: CallRow) -> str:
    r = row.result
    if r["tool_calls"]:
        return "tool_use"
    if r["finish"] == "length":
        return "max_tokens"
    return "stop_sequence" if r.get("stop_sequence") else "end_turn"


def continuation(result: dict[str, Any]) -> str:
    """The reply's text as Anthropic answers it: without the client's prefill (``result["prefill"]``)."""
    content, prefill = str(result["content"]), str(result.get("prefill", ""))
    for start in (prefill, prefill.lstrip()):  # parsed content has its leading whitespace stripped
        if start and content.startswith(start):
            return content[len(start) :]
    return content


def content_blocks(row: CallRow) -> list[dict[str, Any]]:
    r = row.result
    blocks: list[dict[str, Any]] = []
    text = continuation(r)
    if text or not r["tool_calls"]:
        blocks.append({"type": "text", "text": text})
    for call in r["tool_calls"]:
        fn = call["function"]
        blocks.append(
            {"type": "tool_use", "id": call["id"], "name": fn["name"], "input": json.loads(fn["arguments"])}
        )
    return blocks


def message_body(row: CallRow) -> dict[str, Any]:
    r = row.result
    return {
        "id": f"msg_{r['id']}",
        "type": "message",
        "role": "assistant",
        "model": r["model"],
        "content": content_blocks(row),
        "stop_reason": stop_reason(row),
        "stop_sequence": r.get("stop_sequence"),
        "usage": usage(row),
    }


def usage(row: CallRow) -> dict[str, int]:
    """Anthropic's usage: ``input_tokens`` are the prompt's tokens *not* read from the cache (the
    engine's prefix cache), so input + cache reads + cache writes is the prompt, as clients add it up."""
    r = row.result
    cached = int(r.get("cached_tokens", 0))
    return {
        "input_tokens": r["prompt_tokens"] - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": r["completion_tokens"],
    }


class MessageStream(StreamShape):
    """Messages events: message_start, the text block's deltas as they come, then (from the record) the
    rest of the text, tool_use blocks, message_delta and message_stop."""

    def __init__(self, uid: str, model: str) -> None:
        self.uid, self.model = uid, model
        self.text_open = False

    def opening(self, prompt_tokens: int) -> list[bytes]:
        usage = {"input_tokens": prompt_tokens, "output_tokens": 0}
        message: dict[str, Any] = {
            "id": f"msg_{self.uid}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
        }
        return [sse({"type": "message_start", "message": message}, "message_start")]

    def open_text(self) -> list[bytes]:
        if self.text_open:
            return []
        self.text_open = True
        start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        return [sse(start, "content_block_start")]

    def delta(self, text: str) -> list[bytes]:
        out = self.open_text()
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
        out.append(sse(delta, "content_block_delta"))
        return out

    def closing(self, row: CallRow, rest: str) -> list[bytes]:
        body = message_body(row)
        out: list[bytes] = []
        blocks = body["content"]
        if blocks and blocks[0]["type"] == "text":
            out += self.open_text()
            for piece in text_pieces(rest):
                out += self.delta(piece)
            out.append(sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
            blocks = blocks[1:]
        first = 1 if self.text_open else 0
        for index, block in enumerate(blocks, start=first):
            opened = {**block, "input": {}}
            json_delta = {
                "type": "input_json_delta",
                "partial_json": json.dumps(block["input"], ensure_ascii=False),
            }
            out.append(
                sse(
                    {"type": "content_block_start", "index": index, "content_block": opened},
                    "content_block_start",
                )
            )
            out.append(
                sse(
                    {"type": "content_block_delta", "index": index, "delta": json_delta},
                    "content_block_delta",
                )
            )
            out.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        delta = {"stop_reason": body["stop_reason"], "stop_sequence": body["stop_sequence"]}
        # cumulative totals (they overwrite message_start's, whose cache reads were not known yet)
        out.append(sse({"type": "message_delta", "delta": delta, "usage": body["usage"]}, "message_delta"))
        out.append(sse({"type": "message_stop"}, "message_stop"))
        return out

    def error(self, status: int, message: str) -> bytes:
        return sse(error_body("anthropic", status, message), "error")

    def keepalive(self) -> bytes:
        return sse({"type": "ping"}, "ping")

    def replay(self, row: CallRow) -> list[bytes]:
        return [*self.opening(row.result["prompt_tokens"]), *self.closing(row, continuation(row.result))]


def anthropic_router(service: ProxyService) -> APIRouter:
    router = APIRouter(prefix="/s/{session_id}/v1", tags=["anthropic"])
    cfg = service.cfg

    def convert(body: MessagesRequest) -> tuple[list[Message], list[dict[str, Any]] | None]:
        check_supported(body)
        try:
            return to_openai_messages(body), openai_tools(body.tools)
        except ChatError as exc:
            raise ApiError(400, str(exc), param="messages") from None

    @router.post("/messages", response_model=None)
    async def messages(
        session_id: str,
        body: MessagesRequest,
        request: Request,
        idempotency_key: str | None = Header(None),
    ) -> Response:
        session = service.agent_session(request, session_id)
        msgs, tools = convert(body)
        choice = anthropic_tool_choice(body.tool_choice, declared(body.tools))
        prefill = take_prefill(msgs, bool(choice.prefix(service.chat.tool_format)))
        raw = await request.body()
        params = SamplingParams(
            max_tokens=body.max_tokens or cfg.default_max_tokens,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            top_k=body.top_k or 0,
            seed=extra_seed(body),
        )
        req = CallRequest(
            api="messages",
            params=params,
            body=raw.decode("utf-8", "replace"),
            request_key=request_key("messages", raw, idempotency_key),
            messages=msgs,
            tools=tools,
            parse_tools=bool(body.tools) and choice.mode != "none",
            one_call=bool((body.tool_choice or {}).get("disable_parallel_tool_use")),
            reply_prefix=choice.prefix(service.chat.tool_format),
            prefill=prefill,
            stop=[s for s in body.stop_sequences or [] if s],
            id_prefix="toolu",
        )
        if body.stream:
            return await streamed(service, request, session, req, MessageStream(req.uid, service.model))
        row, replayed = await service.answer(request, session, req)
        return JSONResponse(message_body(row), headers=call_headers(row, replayed))

    @router.post("/messages/count_tokens")
    async def count_tokens(session_id: str, body: MessagesRequest, request: Request) -> dict[str, int]:
        service.agent_session(request, session_id)
        msgs, tools = convert(body)
        prefill = take_prefill(msgs, False)  # prompt tokens after the generation prompt, as messages() has them
        try:
            return {"input_tokens": len(service.chat.render(msgs, tools)) + len(service.chat.encode(prefill))}
        except ChatError as exc:
            raise ApiError(400, str(exc), param="messages") from None

    return router
