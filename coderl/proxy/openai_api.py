"""OpenAI dialect: Chat Completions, Completions and Models under ``/s/{session_id}/v1``.

Supported: messages (text content, tool calls, tool results), tools, tool_choice ("none" turns tool
parsing off; "required" and a named function force a tool call, :mod:`coderl.proxy.tool_choice`),
stop, max_tokens / max_completion_tokens, temperature, top_p, seed, n=1, logprobs (the sampled
token's; ``top_logprobs`` above 0 and a ``response_format`` other than text are refused with a 400, as
the proxy cannot honour them), stream with stream_options.include_usage, ``parallel_tool_calls: false``
(the reply ends with its first call: :func:`coderl.proxy.service.call_end`). Other unknown fields are
accepted and ignored, as agents send many (user, metadata...).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from coderl.chat import ChatFormat
from coderl.chat.token_bytes import token_bytes
from coderl.engine.params import SamplingParams
from coderl.proxy.errors import ApiError, error_body
from coderl.proxy.live import LiveCall, LiveText, StreamShape, live_response
from coderl.proxy.service import CallRequest, ProxyService, request_key
from coderl.proxy.sse import sse, sse_response, text_pieces
from coderl.proxy.store import CallRow, SessionRow
from coderl.proxy.tool_choice import openai_tool_choice

SEED_MOD = 2**63


class Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(Lenient):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCallIn(Lenient):
    id: str = ""
    type: str = "function"
    function: FunctionCall


class ChatMessage(Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class FunctionDef(Lenient):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDef(Lenient):
    type: Literal["function"] = "function"
    function: FunctionDef


class StreamOptions(Lenient):
    include_usage: bool = False


class Sampling(Lenient):
    model: str = ""
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = None
    n: int | None = Field(None, ge=1, le=1)
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None


class ChatRequest(Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolDef] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    response_format: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None


class CompletionRequest(Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=5)
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1, le=1)


def sampling_params(body: Sampling, max_tokens: int | None, default_max: int) -> SamplingParams:
    return SamplingParams(
        max_tokens=max_tokens or default_max,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        seed=None if body.seed is None else body.seed % SEED_MOD,
    )


def stop_list(stop: str | list[str] | None) -> list[str]:
    items = [stop] if isinstance(stop, str) else list(stop or [])
    if len(items) > 4:
        raise ApiError(400, f"stop takes at most 4 sequences, got {len(items)}", param="stop")
    return [s for s in items if s]


def finish_reason(row: CallRow) -> str:
    if row.result["tool_calls"]:
        return "tool_calls"
    return "length" if row.result["finish"] == "length" else "stop"


def usage(row: CallRow) -> dict[str, Any]:
    r = row.result
    return {
        "prompt_tokens": r["prompt_tokens"],
        "completion_tokens": r["completion_tokens"],
        "total_tokens": r["prompt_tokens"] + r["completion_tokens"],
        "prompt_tokens_details": {"cached_tokens": r.get("cached_tokens", 0)},
    }


def token_strings(chat: ChatFormat, ids: list[int]) -> list[str]:
    return [str(chat.tokenizer.decode([i], skip_special_tokens=False)) for i in ids]


def token_logprobs(chat: ChatFormat, row: CallRow) -> list[dict[str, Any]]:
    """Every sampled token of the reply (its tool calls' and its end token too) with its logprob and
    its own bytes (a token holding part of a character decodes to U+FFFD alone; its bytes are the
    part: joined, the entries' bytes are the reply's UTF-8)."""
    ids = row.completion_ids
    pieces = token_bytes(chat.tokenizer, ids)
    return [
        {"token": t, "logprob": lp, "bytes": list(b), "top_logprobs": []}
        for t, b, lp in zip(token_strings(chat, ids), pieces, row.logprobs, strict=True)
    ]


def chat_logprobs(chat: ChatFormat, row: CallRow) -> dict[str, Any]:
    return {"content": token_logprobs(chat, row), "refusal": None}


def call_headers(row: CallRow, replayed: bool) -> dict[str, str]:
    return {"x-coderl-call-id": str(row.id), "x-coderl-replayed": "true" if replayed else "false"}


def chat_message(row: CallRow) -> dict[str, Any]:
    r = row.result
    msg: dict[str, Any] = {"role": "assistant", "content": r["content"] or None, "refusal": None}
    if r["tool_calls"]:
        msg["tool_calls"] = r["tool_calls"]
    elif msg["content"] is None:
        msg["content"] = ""
    return msg


def chat_body(row: CallRow, chat: ChatFormat, logprobs: bool) -> dict[str, Any]:
    r = row.result
    return {
        "id": f"chatcmpl-{r['id']}",
        "object": "chat.completion",
        "created": r["created"],
        "model": r["model"],
        "system_fingerprint": f"coderl-policy-{row.policy_version}",
        "choices": [
            {
                "index": 0,
                "message": chat_message(row),
                "logprobs": chat_logprobs(chat, row) if logprobs else None,
                "finish_reason": finish_reason(row),
            }
        ],
        "usage": usage(row),
    }


class ChatStream(StreamShape):
    """Chat Completions chunks: the opening role chunk, content deltas, then (from the record) the
    rest of the content with the logprobs, tool-call deltas, the finish chunk, usage and [DONE]."""

    def __init__(
        self, uid: str, created: int, model: str, version: int, chat: ChatFormat, logprobs: bool, usage: bool
    ) -> None:
        self.head = {
            "id": f"chatcmpl-{uid}",
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": f"coderl-policy-{version}",
        }
        self.chat, self.logprobs, self.usage = chat, logprobs, usage

    def chunk(self, delta: dict[str, Any], finish: str | None = None, lp: Any = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}
        return sse({**self.head, "choices": [choice], **({"usage": None} if self.usage else {})})

    def opening(self, prompt_tokens: int) -> list[bytes]:
        return [self.chunk({"role": "assistant", "content": ""})]

    def delta(self, text: str) -> list[bytes]:
        return [self.chunk({"content": text})]

    def closing(self, row: CallRow, rest: str) -> list[bytes]:
        out = []
        lps = chat_logprobs(self.chat, row) if self.logprobs else None
        pieces = list(text_pieces(rest))
        for i, piece in enumerate(pieces):
            out.append(self.chunk({"content": piece}, lp=lps if (lps and i == 0) else None))
        if lps and not pieces:
            out.append(self.chunk({"content": ""}, lp=lps))
        for i, call in enumerate(row.result["tool_calls"]):
            fn = call["function"]
            start = {
                "index": i,
                "id": call["id"],
                "type": "function",
                "function": {"name": fn["name"], "arguments": ""},
            }
            out.append(self.chunk({"tool_calls": [start]}))
            out.append(self.chunk({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]}))
        out.append(self.chunk({}, finish_reason(row)))
        if self.usage:
            out.append(sse({**self.head, "choices": [], "usage": usage(row)}))
        out.append(sse("[DONE]"))
        return out

    def error(self, status: int, message: str) -> bytes:
        return sse(error_body("openai", status, message))

    def replay(self, row: CallRow) -> list[bytes]:
        """The whole stream of a recorded call."""
        self.head["system_fingerprint"] = f"coderl-policy-{row.policy_version}"
        return [*self.opening(0), *self.closing(row, row.result["content"])]


def completion_logprobs(chat: ChatFormat, row: CallRow) -> dict[str, Any]:
    tokens = token_strings(chat, row.completion_ids)
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t)
    return {"tokens": tokens, "token_logprobs": row.logprobs, "top_logprobs": None, "text_offset": offsets}


def completion_body(row: CallRow, chat: ChatFormat, logprobs: bool) -> dict[str, Any]:
    r = row.result
    choice = {
        "text": r["content"],
        "index": 0,
        "logprobs": completion_logprobs(chat, row) if logprobs else None,
        "finish_reason": "length" if r["finish"] == "length" else "stop",
    }
    return {
        "id": f"cmpl-{r['id']}",
        "object": "text_completion",
        "created": r["created"],
        "model": r["model"],
        "choices": [choice],
        "usage": usage(row),
    }


class CompletionStream(StreamShape):
    """Completions chunks: text deltas, then (from the record) the rest, the final choice, usage, [DONE]."""

    def __init__(
        self, uid: str, created: int, model: str, chat: ChatFormat, logprobs: bool, usage: bool
    ) -> None:
        self.head = {"id": f"cmpl-{uid}", "object": "text_completion", "created": created, "model": model}
        self.chat, self.logprobs, self.usage = chat, logprobs, usage

    def opening(self, prompt_tokens: int) -> list[bytes]:
        return []

    def delta(self, text: str) -> list[bytes]:
        return [
            sse(
                {
                    **self.head,
                    "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": None}],
                }
            )
        ]

    def closing(self, row: CallRow, rest: str) -> list[bytes]:
        body = completion_body(row, self.chat, self.logprobs)
        out = [event for piece in text_pieces(rest) for event in self.delta(piece)]
        out.append(sse({**self.head, "choices": [{**body["choices"][0], "text": ""}]}))
        if self.usage:
            out.append(sse({**self.head, "choices": [], "usage": body["usage"]}))
        out.append(sse("[DONE]"))
        return out

    def error(self, status: int, message: str) -> bytes:
        return sse(error_body("openai", status, message))

    def replay(self, row: CallRow) -> list[bytes]:
        return self.closing(row, row.result["content"])


async def streamed(
    service: ProxyService, request: Request, session: SessionRow, req: CallRequest, shape: StreamShape
) -> Response:
    """A streamed call: events as the engine samples (:mod:`coderl.proxy.live`), or, answered from the
    record, the whole recorded stream."""
    req.live = LiveCall()
    text = LiveText(
        service.chat.decode,
        req.stop,
        req.prefill + req.reply_prefix,
        req.parse_tools,
        service.chat.tool_format,
        shown=req.prefill,
    )

    def replay(row: CallRow, replayed: bool) -> Response:
        return sse_response(shape.replay(row), call_headers(row, replayed))

    return await live_response(
        service.answer(request, session, req), req.live, text, shape, replay, service.cfg.stream_keepalive_s
    )


def model_card(name: str) -> dict[str, Any]:
    """The served model as both OpenAI's and Anthropic's SDKs read a model (their keys differ)."""
    return {
        "id": name, "object": "model", "created": 0, "owned_by": "coderl",
        "type": "model", "display_name": name, "created_at": "1970-01-01T00:00:00Z",
    }  # fmt: skip


def openai_router(service: ProxyService) -> APIRouter:
    router = APIRouter(prefix="/s/{session_id}/v1", tags=["openai"])
    cfg, chat = service.cfg, service.chat

    @router.get("/models")
    async def models(session_id: str, request: Request) -> dict[str, Any]:
        service.agent_session(request, session_id)
        name = service.model  # the list in OpenAI's shape and Anthropic's at once (their keys differ)
        return {"object": "list", "data": [model_card(name)], "has_more": False, "first_id": name, "last_id": name}

    @router.get("/models/{model_id:path}")
    async def model(session_id: str, model_id: str, request: Request) -> dict[str, Any]:
        service.agent_session(request, session_id)
        if model_id != service.model:
            raise ApiError(404, f"no model {model_id!r}; this proxy serves {service.model!r}", param="model")
        return model_card(model_id)

    @router.post("/chat/completions", response_model=None)
    async def chat_completions(
        session_id: str,
        body: ChatRequest,
        request: Request,
        idempotency_key: str | None = Header(None),
    ) -> Response:
        session = service.agent_session(request, session_id)
        messages = [m.model_dump(exclude_none=True, exclude_unset=False) for m in body.messages]
        tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
        choice = openai_tool_choice(body.tool_choice, tools)
        if body.top_logprobs:
            raise ApiError(
                400,
                f"top_logprobs={body.top_logprobs} is not supported: the record keeps the sampled token's "
                "logprob only (logprobs=true); leave top_logprobs out or 0",
                param="top_logprobs",
            )
        response_format = body.response_format or {"type": "text"}
        if response_format.get("type") != "text":
            raise ApiError(
                400,
                f"response_format {response_format!r} is not supported: the proxy records free sampling "
                "and does not constrain it; leave response_format out or use {'type': 'text'}",
                param="response_format",
            )
        raw = await request.body()
        req = CallRequest(
            api="chat",
            params=sampling_params(
                body, body.max_completion_tokens or body.max_tokens, cfg.default_max_tokens
            ),
            body=raw.decode("utf-8", "replace"),
            request_key=request_key("chat", raw, idempotency_key),
            messages=messages,
            tools=tools,
            parse_tools=bool(tools) and choice.mode != "none",
            one_call=body.parallel_tool_calls is False,
            reply_prefix=choice.prefix(chat.tool_format),
            stop=stop_list(body.stop),
        )
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            version = service.engine.policy_version
            shape = ChatStream(
                req.uid, req.created, service.model, version, chat, bool(body.logprobs), include_usage
            )
            return await streamed(service, request, session, req, shape)
        row, replayed = await service.answer(request, session, req)
        return JSONResponse(chat_body(row, chat, bool(body.logprobs)), headers=call_headers(row, replayed))

    @router.post("/completions", response_model=None)
    async def completions(
        session_id: str,
        body: CompletionRequest,
        request: Request,
        idempotency_key: str | None = Header(None),
    ) -> Response:
        session = service.agent_session(request, session_id)
        prompt: Any = body.prompt
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            if len(prompt) != 1:
                raise ApiError(400, f"only one prompt per request is supported, got {len(prompt)}", "prompt")
            prompt = prompt[0]
        if body.echo or body.suffix:
            raise ApiError(400, "echo and suffix are not supported", param="echo" if body.echo else "suffix")
        if isinstance(prompt, list) and not prompt:
            raise ApiError(400, "prompt is empty; give at least one token", param="prompt")
        raw = await request.body()
        req = CallRequest(
            api="completions",
            params=sampling_params(body, body.max_tokens, cfg.default_max_tokens),
            body=raw.decode("utf-8", "replace"),
            request_key=request_key("completions", raw, idempotency_key),
            prompt=prompt,
            stop=stop_list(body.stop),
        )
        logprobs = body.logprobs is not None
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            shape = CompletionStream(req.uid, req.created, service.model, chat, logprobs, include_usage)
            return await streamed(service, request, session, req, shape)
        row, replayed = await service.answer(request, session, req)
        return JSONResponse(completion_body(row, chat, logprobs), headers=call_headers(row, replayed))

    return router
