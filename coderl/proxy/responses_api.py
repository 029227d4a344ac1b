"""OpenAI Responses API: ``POST /s/{session_id}/v1/responses``, recorded token-exactly like chat completions.

The request's ``instructions`` and ``input`` items become the chat messages the chat endpoint renders
(:mod:`coderl.proxy.responses_items`), so prompts, the reuse of sampled ids, tool-call parsing
(``model.tool_format``) and the merge into trajectories are the chat endpoint's. The reply comes back
as output items: a ``message`` with one ``output_text`` part and one ``function_call`` item per call.

Supported: ``input`` (a string, or message / function_call / function_call_output items, and their
custom_tool_call counterparts; left out, ``previous_response_id``'s conversation is answered as it is), ``instructions``, function and custom ``tools`` (a custom tool's free
text travels as a function's one string parameter: :mod:`coderl.proxy.responses_items`), ``tool_choice`` (auto / none / required / one named function,
forced in token space: :mod:`coderl.proxy.tool_choice`), ``max_output_tokens`` (a cut reply is
``incomplete`` with reason ``max_output_tokens``), ``temperature``, ``top_p``, ``stream``
(:mod:`coderl.proxy.responses_stream`), ``store`` and ``previous_response_id``
(:mod:`coderl.proxy.responses_memory`), ``include: ["message.output_text.logprobs"]`` (every sampled
token's logprob and bytes, its calls' and end token's too, as chat completions gives them, on the
output_text part: a reply of calls only has none; a stream gives them on ``output_text.done``, its
deltas carry none), and ``seed`` (a coderl extension, as in chat completions).
``parallel_tool_calls: false`` (the reply ends with its first call: :func:`coderl.proxy.service.call_end`).
Echoed, not acted on: ``metadata``, ``user``, ``truncation`` (nothing is ever truncated), ``text`` with format text (and its ``verbosity``),
``reasoning``'s effort and summary. Refused with a 400:
built-in tools, ``reasoning`` / ``item_reference`` / built-in tool items in the input, content parts of unknown types,
``text.format`` other than text, ``top_logprobs`` above 0, ``background``, ``conversation`` and
``prompt``. Other fields (``prompt_cache_key``, ``service_tier``, ``safety_identifier``,
``stream_options``, ``max_tool_calls``...) are accepted and ignored, as clients such as the Codex CLI
send them and none changes what the proxy records.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from coderl.chat import ChatFormat
from coderl.engine.params import SamplingParams
from coderl.proxy.errors import ApiError
from coderl.proxy.openai_api import SEED_MOD, call_headers, streamed, token_logprobs
from coderl.proxy.responses_items import (
    chat_messages,
    chat_tools,
    custom_names,
    echo_tools,
    input_items,
    output_items,
)
from coderl.proxy.responses_memory import ResponseMemory, StoredResponse
from coderl.proxy.responses_stream import ResponseStream
from coderl.proxy.service import CallRequest, ProxyService, request_key
from coderl.proxy.store import CallRow
from coderl.proxy.tool_choice import responses_tool_choice

LOGPROBS = "message.output_text.logprobs"
MAX_METADATA = 16


class Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextFormat(Lenient):
    type: str = "text"


class TextConfig(Lenient):
    format: TextFormat | None = None
    verbosity: str | None = None


class ResponsesRequest(Lenient):
    model: str = ""
    input: str | list[dict[str, Any]] = []  # none: previous_response_id's conversation as it is
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    include: list[str] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    text: TextConfig | None = None
    truncation: Literal["auto", "disabled"] | None = None
    background: bool | None = None
    stream: bool | None = False


def check_supported(body: ResponsesRequest) -> None:
    """400 for what the proxy cannot honour, naming the field and what it accepts."""
    if body.background:
        raise ApiError(
            400,
            "background=true is not supported: the proxy answers within the request (streamed or not); "
            "leave background out or false",
            param="background",
        )
    for name in ("conversation", "prompt"):
        if (body.model_extra or {}).get(name) is not None:
            raise ApiError(
                400,
                f"{name!r} is not supported: the proxy keeps no conversations or prompt templates; send the "
                "items as input (and previous_response_id to continue a stored response)",
                param=name,
            )
    if body.top_logprobs:
        raise ApiError(
            400,
            f"top_logprobs={body.top_logprobs} is not supported: the record keeps the sampled token's "
            f"logprob only (include {LOGPROBS!r}); leave top_logprobs out or 0",
            param="top_logprobs",
        )
    kind = body.text.format.type if body.text and body.text.format else "text"
    if kind != "text":
        raise ApiError(
            400,
            f"text.format type {kind!r} is not supported: the proxy records free sampling and does not "
            "constrain it; leave text.format out or use {'type': 'text'}",
            param="text.format",
        )
    if body.metadata is not None and len(body.metadata) > MAX_METADATA:
        raise ApiError(
            400, f"metadata holds {len(body.metadata)} pairs; at most {MAX_METADATA} are allowed", "metadata"
        )


def response_head(
    body: ResponsesRequest, uid: str, created: int, model: str, tools: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """The response object as created: everything the request sets, no output yet."""
    return {
        "id": f"resp_{uid}",
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata or {},
        "model": model,
        "output": [],
        "parallel_tool_calls": True if body.parallel_tool_calls is None else body.parallel_tool_calls,
        "previous_response_id": body.previous_response_id,
        "reasoning": reasoning_echo(body),
        "store": body.store is not False,
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "text": {"format": {"type": "text"}, **({"verbosity": body.text.verbosity} if body.text and body.text.verbosity else {})},
        "tool_choice": "auto" if body.tool_choice is None else body.tool_choice,
        "tools": echo_tools(body.tools, tools),
        "top_p": 1.0 if body.top_p is None else body.top_p,
        "truncation": body.truncation or "disabled",
        "usage": None,
        "user": body.user,
    }


def reasoning_echo(body: ResponsesRequest) -> dict[str, Any]:
    """The request's ``reasoning`` as the response echoes it (effort and summary; the model samples
    whatever its chat template lets it, the setting changes nothing here)."""
    given = (body.model_extra or {}).get("reasoning")
    given = given if isinstance(given, dict) else {}
    return {"effort": given.get("effort"), "summary": given.get("summary")}


def usage(row: CallRow) -> dict[str, Any]:
    r = row.result
    return {
        "input_tokens": r["prompt_tokens"],
        # cache_write_tokens: no cache write is billed (a prompt the engine's prefix cache keeps costs nothing)
        "input_tokens_details": {"cached_tokens": r.get("cached_tokens", 0), "cache_write_tokens": 0},
        "output_tokens": r["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": r["prompt_tokens"] + r["completion_tokens"],
    }


def output_logprobs(chat: ChatFormat, row: CallRow) -> list[dict[str, Any]]:
    """Every sampled token with its logprob and bytes, as chat completions gives them (tool calls'
    tokens too: :func:`~coderl.proxy.openai_api.token_logprobs`)."""
    return token_logprobs(chat, row)


def response_body(
    head: dict[str, Any], row: CallRow, logprobs: list[dict[str, Any]] | None, custom: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The finished response of a recorded call."""
    r = row.result
    incomplete = r["finish"] == "length"
    return {
        **head,
        "id": f"resp_{r['id']}",
        "created_at": r["created"],
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "output": output_items(row, logprobs, custom),
        "usage": usage(row),
    }


def responses_router(service: ProxyService, memory: ResponseMemory | None = None) -> APIRouter:
    router = APIRouter(prefix="/s/{session_id}/v1", tags=["openai"])
    memory = memory if memory is not None else ResponseMemory()

    def earlier(session_id: str, response_id: str | None) -> StoredResponse | None:
        if response_id is None:
            return None
        stored = memory.get(session_id, response_id) or from_record(session_id, response_id)
        if stored is None:
            raise ApiError(
                400,
                f"Previous response with id {response_id!r} not found: this session stored no such response "
                "(store=false, or from another session); send the whole conversation as input instead",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return stored

    def from_record(session_id: str, response_id: str) -> StoredResponse | None:
        """A response the session's durable record holds (after a restart, or once evicted from
        memory): rebuilt with the chain it continued from the recorded requests and replies."""
        rows = {f"resp_{c.result['id']}": c for c in service.store.calls(session_id) if c.api == "responses"}
        chain: list[tuple[str, CallRow, dict[str, Any]]] = []
        rid: str | None = response_id
        while rid is not None and memory.get(session_id, rid) is None:
            row = rows.get(rid)
            if row is None or any(rid == seen for seen, _, _ in chain):
                return None
            request = json.loads(row.request_body)
            if request.get("store") is False:
                return None
            chain.append((rid, row, request))
            rid = request.get("previous_response_id")
        parent = memory.get(session_id, rid) if rid is not None else None
        for rid_, row, request in reversed(chain):  # from the oldest: each continues the one before
            custom = custom_names(request.get("tools"))
            parent = StoredResponse(parent, (*input_items(request.get("input", [])), *output_items(row, None, custom)))
            memory.put(session_id, rid_, parent)
        return parent

    @router.post("/responses", response_model=None)
    async def create_response(
        session_id: str,
        body: ResponsesRequest,
        request: Request,
        idempotency_key: str | None = Header(None),
    ) -> Response:
        session = service.agent_session(request, session_id)
        check_supported(body)
        tools = chat_tools(body.tools)
        custom = custom_names(body.tools)
        choice = responses_tool_choice(body.tool_choice, tools)
        new_items = input_items(body.input)
        parent = earlier(session.id, body.previous_response_id)
        prior = parent.conversation() if parent else []
        if not prior and not new_items:
            raise ApiError(
                400, "input is empty; give a string or at least one item (or previous_response_id)", param="input"
            )
        messages = chat_messages([*prior, *new_items], body.instructions, first=len(prior))
        raw = await request.body()
        req = CallRequest(
            api="responses",
            params=SamplingParams(
                max_tokens=body.max_output_tokens or service.cfg.default_max_tokens,
                temperature=1.0 if body.temperature is None else body.temperature,
                top_p=1.0 if body.top_p is None else body.top_p,
                seed=None if body.seed is None else body.seed % SEED_MOD,
            ),
            body=raw.decode("utf-8", "replace"),
            request_key=request_key("responses", raw, idempotency_key),
            messages=messages,
            tools=tools,
            parse_tools=bool(tools) and choice.mode != "none",
            one_call=body.parallel_tool_calls is False,
            reply_prefix=choice.prefix(service.chat.tool_format),
        )
        head = response_head(body, req.uid, req.created, service.model, tools)
        with_logprobs = LOGPROBS in (body.include or [])

        def finish(row: CallRow) -> dict[str, Any]:
            """The final response; kept for previous_response_id unless store is false."""
            if body.store is not False:
                stored = StoredResponse(parent, (*new_items, *output_items(row, None, custom)))
                memory.put(session.id, f"resp_{row.result['id']}", stored)
            logprobs = output_logprobs(service.chat, row) if with_logprobs else None
            return response_body(head, row, logprobs, custom)

        try:
            if body.stream:
                return await streamed(service, request, session, req, ResponseStream(head, finish))
            row, replayed = await service.answer(request, session, req)
        except ApiError as exc:
            if exc.param == "messages":  # the chat template refused the conversation: it came as input
                exc.param = "input"
            raise
        return JSONResponse(finish(row), headers=call_headers(row, replayed))

    return router
