"""The proxy's core, shared by every dialect: sessions, rendering, the engine call, the record.

A call: look up the session and check its secret; answer a retry (same idempotency key or same body)
from the record; otherwise render the prompt (reusing sampled ids, :mod:`coderl.proxy.render`), call
the engine with the session id (its prefix cache; the engine ends at a stop string), cut the reply
before the stop string on a token boundary (:mod:`coderl.engine.stops`: the recorded ids decode to
exactly the text returned), parse tool calls, and commit the call to SQLite before anything is sent
back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from coderl.chat import ChatFormat, parse_completion
from coderl.engine.base import Engine
from coderl.engine.params import SamplingParams
from coderl.engine.stops import cut_at_stop
from coderl.errors import (
    ChatError,
    EngineError,
    EngineOverloadedError,
    EngineUnavailableError,
    PromptTooLongError,
)
from coderl.proxy.auth import WRONG_SECRET, hash_secret, new_secret, new_session_id, secret_ok
from coderl.proxy.config import ProxyConfig
from coderl.proxy.errors import ApiError
from coderl.proxy.live import LiveCall
from coderl.proxy.merge import CallTokens, merge_calls
from coderl.proxy.render import Message, PriorCall, canonical_message, render_prompt
from coderl.proxy.store import CallRow, SessionRow, Store
from coderl.proxy.too_long import prompt_too_long_message
from coderl.types import Completion

log = logging.getLogger(__name__)


@dataclass
class CallRequest:
    """One model call, dialect-neutral."""

    api: str
    """chat | completions | messages | responses"""
    params: SamplingParams
    body: str
    """The request body as received."""
    request_key: str
    messages: list[Message] | None = None
    prompt: str | list[int] | None = None
    """Completions API: prompt text or ids (instead of messages)."""
    tools: list[dict[str, Any]] | None = None
    parse_tools: bool = False
    reply_prefix: str = ""
    """Forced start of the reply (a forced tool call, :mod:`coderl.proxy.tool_choice`): appended to the
    prompt, so the record keeps it as prompt ids and the completion is only what was sampled."""
    prefill: str = ""
    """The reply's start as the client wrote it (Anthropic's prefilled final assistant turn): before
    ``reply_prefix`` in the prompt ids, part of the assistant message (tool parsing, the next turn's
    id reuse), and kept as ``result["prefill"]`` so the answer leaves it out as Anthropic's does."""
    stop: list[str] = field(default_factory=list)
    one_call: bool = False
    """The client takes one tool call per reply (``parallel_tool_calls: false``, Anthropic's
    ``disable_parallel_tool_use``): the engine ends the reply with its first call (:func:`call_end`)."""
    id_prefix: str = "call"
    live: LiveCall | None = None
    """Set for a streamed call: the engine's ids reach it as they are sampled."""
    uid: str = field(default_factory=lambda: secrets.token_hex(8))
    """The reply's id (chunks streamed before the record is written carry it)."""
    created: int = field(default_factory=lambda: int(time.time()))


def call_end(tool_format: str) -> str | None:
    """The text that closes a tool call in ``tool_format``; None where a call has no closing tag (bare
    ``json``): there a reply may still hold several calls."""
    return None if tool_format == "json" else "</tool_call>"


def request_key(api: str, body: bytes, idempotency_key: str | None) -> str:
    if idempotency_key:
        return "idem:" + idempotency_key[:200]
    return "body:" + hashlib.sha256(api.encode() + b"\0" + body).hexdigest()


def same_request(req: CallRequest, first_body: str) -> None:
    """A retry under an ``Idempotency-Key`` must repeat the request (the same JSON, key order aside);
    a different request under a used key is refused (409), never answered with the first one's reply."""
    if not req.request_key.startswith("idem:") or req.body == first_body:
        return
    try:
        same = json.loads(req.body) == json.loads(first_body)
    except ValueError:
        same = False
    if not same:
        key = req.request_key.removeprefix("idem:")
        raise ApiError(
            409,
            f"Idempotency-Key {key!r} was already used for a different request in this session; "
            "send a new key for a new request (a retry must repeat the same body)",
        )


async def _disconnect(request: Request) -> None:
    """Returns when the client has gone (the server's receive channel says http.disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class ProxyService:
    """Sessions and calls over one engine, one chat format and one store."""

    def __init__(self, cfg: ProxyConfig, engine: Engine, chat: ChatFormat, store: Store, model: str) -> None:
        self.cfg = cfg
        self.engine = engine
        self.chat = chat
        self.store = store
        self.model = model
        self._sessions: dict[str, SessionRow] = {}
        self._history: dict[str, list[CallRow]] = {}
        self._over_context: dict[str, int] = {}
        """session -> calls refused because the prompt left no room in the context (this process only)."""
        self._in_flight: dict[tuple[str, str], tuple[str, asyncio.Future[CallRow]]] = {}
        self._answering: set[asyncio.Future[tuple[CallRow, bool]]] = set()
        self.stopping = False
        """Set by :meth:`stop_calls`: the server is stopping and takes no more calls."""
        self._generation_prompt = chat.generation_prompt()

    # ------------------------------------------------------------------ sessions
    def create_session(self, metadata: dict[str, Any]) -> tuple[SessionRow, str]:
        secret = new_secret()
        row = self.store.create_session(new_session_id(), hash_secret(secret), metadata)
        self._sessions[row.id] = row
        return row, secret

    def session(self, session_id: str) -> SessionRow:
        """The session's row (404 if unknown); expires it on the spot if idle past the TTL."""
        row = self._sessions.get(session_id) or self.store.get_session(session_id)
        if row is None:
            raise ApiError(404, f"no session {session_id!r}; create one with POST /sessions")
        self._sessions[session_id] = row
        if row.status == "active" and time.time() - row.last_active > self.cfg.session_ttl_s:
            self._expire(row)
        return row

    def agent_session(self, request: Request, session_id: str) -> SessionRow:
        """The session an agent request may use: known and the right secret (401 alike, so ids cannot
        be probed), still open."""
        try:
            row: SessionRow | None = self.session(session_id)
        except ApiError:
            row = None
        if row is None or not secret_ok(request, row.secret_hash):
            raise ApiError(401, WRONG_SECRET)
        if row.status == "expired":
            raise ApiError(404, f"session {session_id!r} expired after {self.cfg.session_ttl_s:g} s idle")
        if row.status != "active":
            raise ApiError(410, f"session {session_id!r} is {row.status}; it takes no more calls")
        row.last_active = time.time()
        return row

    def list_sessions(self, status: str | None, limit: int) -> list[dict[str, Any]]:
        """GET /sessions: the newest sessions, without their calls."""
        return [
            {
                "id": row.id,
                "status": row.status,
                "created_at": row.created_at,
                "last_active": max(row.last_active, getattr(self._sessions.get(row.id), "last_active", 0.0)),
                "metadata": row.metadata,
                "calls": calls,
            }
            for row, calls in self.store.list_sessions(status, limit)
        ]

    def complete(self, session_id: str) -> SessionRow:
        row = self.session(session_id)
        if row.status == "active":
            row.status = "complete"
            self.store.touch(session_id, row.last_active)
            self.store.set_status(session_id, "complete")
        self._history.pop(session_id, None)
        return row

    def delete(self, session_id: str) -> None:
        self.session(session_id)
        self.store.delete_session(session_id)
        self._sessions.pop(session_id, None)
        self._history.pop(session_id, None)

    async def release(self, session_ids: list[str]) -> None:
        """Tell the engine these sessions send no more calls (it drops their cached KV)."""
        for sid in session_ids:
            try:
                await self.engine.end_session(sid)
            except EngineError as exc:  # an engine that is gone keeps nothing
                log.debug("ending session %s: %s", sid, exc)

    def expire_idle(self) -> list[str]:
        """Persist in-memory activity, then expire sessions idle past the TTL."""
        for row in list(self._sessions.values()):
            if row.status == "active":
                self.store.touch(row.id, row.last_active)
        expired = self.store.expire_idle(time.time() - self.cfg.session_ttl_s)
        for sid in expired:
            if sid in self._sessions:
                self._sessions[sid].status = "expired"
            self._history.pop(sid, None)
        return expired

    def _expire(self, row: SessionRow) -> None:
        row.status = "expired"
        self.store.set_status(row.id, "expired")
        self._history.pop(row.id, None)

    def record(self, session_id: str) -> dict[str, Any]:
        """GET /sessions/{id}: the session, its calls, the built trajectories and stats."""
        row = self.session(session_id)
        calls = self.store.calls(session_id)
        merged = merge_calls(
            [
                CallTokens(c.id, c.prompt_ids, c.completion_ids, c.logprobs, c.policy_version, _head(c))
                for c in calls
            ],
            session_id=session_id,
            task_id=str(row.metadata.get("task_id", "")),
            generation_prompt=self._generation_prompt,
        )
        trajectories = [
            {**{k: v for k, v in dataclasses.asdict(t).items() if k != "parts"}, "call_ids": ids}
            for t, ids in zip(merged.trajectories, merged.call_ids, strict=True)
        ]
        return {
            "id": row.id,
            "status": row.status,
            "created_at": row.created_at,
            "last_active": row.last_active,
            "metadata": row.metadata,
            "calls": [c.public() for c in calls],
            "trajectories": trajectories,
            "splits": merged.splits,
            "stats": {**merged.stats(), "context_refusals": self._over_context.get(session_id, 0)},
        }

    # ------------------------------------------------------------------ calls
    async def call(self, session: SessionRow, req: CallRequest) -> tuple[CallRow, bool]:
        """Answer one call; returns (the recorded call, whether it was replayed from the record)."""
        if self.stopping:  # also a retry whose first attempt was just ended by stop_calls
            raise self._stopping_error()
        key = (session.id, req.request_key)
        pending = self._in_flight.get(key)
        if pending is not None:  # a retry while the first attempt still runs: share its answer
            same_request(req, pending[0])
            try:
                return await asyncio.shield(pending[1]), True
            except asyncio.CancelledError:
                if not pending[1].cancelled():
                    raise  # this retry itself was cancelled
                return await self.call(session, req)  # the first attempt's client left: start anew
        done = self.store.find_call(session.id, req.request_key)
        if done is not None:
            same_request(req, done.request_body)
            return done, True
        future: asyncio.Future[CallRow] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = (req.body, future)
        try:
            row = await self._generate(session, req)
        except asyncio.CancelledError:
            future.cancel()  # a retry waiting on it starts its own attempt
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when no retry waits on it
            raise
        finally:
            self._in_flight.pop(key, None)
        future.set_result(row)
        return row, False

    async def answer(self, request: Request, session: SessionRow, req: CallRequest) -> tuple[CallRow, bool]:
        """:meth:`call` for an HTTP request, abandoned if the client disconnects first or the server
        stops (:meth:`stop_calls`): the generation is cancelled (the engine stops sampling it) and
        nothing is recorded, since nobody got an answer."""
        if self.stopping:
            raise self._stopping_error()
        work = asyncio.ensure_future(self.call(session, req))
        gone = asyncio.ensure_future(_disconnect(request))
        self._answering.add(work)
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            raise
        finally:
            gone.cancel()
            self._answering.discard(work)
        if self.stopping and work.cancelled():
            raise self._stopping_error()
        if not work.done():
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
            raise ApiError(499, "the client disconnected before the answer; its generation was cancelled")
        return work.result()

    def stop_calls(self) -> int:
        """The server is stopping: cancel the generation of every call in flight (its client gets a
        503 with Retry-After, to retry once the proxy is back; nothing is recorded) and refuse new
        calls alike. Returns how many calls it ended."""
        self.stopping = True
        ended = [work for work in self._answering if work.cancel()]
        return len(ended)

    def _stopping_error(self) -> ApiError:
        return self._retry_error(
            503, "the proxy is shutting down; this call was cancelled and not recorded: retry it later"
        )

    def _history_of(self, session_id: str) -> list[CallRow]:
        if session_id not in self._history:
            self._history[session_id] = self.store.calls(session_id)
        return self._history[session_id]

    def _prompt(self, session_id: str, req: CallRequest) -> tuple[list[int], list[str], str, int | None]:
        """(prompt ids, canonical conversation, tools key, base call id)."""
        history = self._history_of(session_id)
        if req.messages is not None:
            prior = [
                PriorCall(c.id, c.tools_key, tuple(c.canon), c.prompt_ids, c.completion_ids)
                for c in history
                if c.api != "completions"
            ]
            rendered = render_prompt(self.chat, req.messages, req.tools, prior)
            return rendered.prompt_ids, list(rendered.canon), rendered.tools_key, rendered.base_call_id
        if isinstance(req.prompt, list):
            vocab = len(self.chat.tokenizer)
            bad = [i for i in req.prompt if not 0 <= i < vocab]
            if bad:
                raise ApiError(
                    400, f"token id {bad[0]} is outside the vocabulary [0, {vocab})", param="prompt"
                )
            return list(req.prompt), [], "", None
        text = req.prompt or ""
        best: CallRow | None = None
        for c in history:  # the longest earlier completions call whose prompt + text starts this prompt
            if c.api == "completions" and len(c.canon) == 2:
                seen = c.canon[0] + c.canon[1]
                if text.startswith(seen) and (best is None or len(seen) > len(best.canon[0] + best.canon[1])):
                    best = c
        if best is not None:
            rest = text[len(best.canon[0] + best.canon[1]) :]
            ids = best.prompt_ids + best.completion_ids + (self.chat.encode(rest) if rest else [])
            return ids, [text], "", best.id
        ids = self.chat.encode(text)
        if not ids:
            raise ApiError(400, "prompt is empty; give at least one token of text", param="prompt")
        return ids, [text], "", None

    async def _generate(self, session: SessionRow, req: CallRequest) -> CallRow:
        t0 = time.perf_counter()
        try:
            prompt_ids, canon, tkey, base = self._prompt(session.id, req)
        except ChatError as exc:
            raise ApiError(400, str(exc), param="messages") from None
        if req.prefill or req.reply_prefix:
            prompt_ids = prompt_ids + self.chat.encode(req.prefill + req.reply_prefix)
        t_render = time.perf_counter()
        try:
            params = req.params.model_copy(update={"stop": req.stop}) if req.stop else req.params
            end = call_end(self.chat.tool_format) if req.one_call and req.parse_tools else None
            if end is not None:  # kept in the reply (not cut as a client's stop string is): it closes the call
                params = params.model_copy(update={"stop": [*params.stop, end]})
            cap = self.cfg.max_tokens_cap
            if cap is not None and params.max_tokens > cap:
                params = params.model_copy(update={"max_tokens": cap})
            if req.live is not None:
                req.live.prompt_tokens = len(prompt_ids)
                c = await self.engine.generate_streaming(prompt_ids, params, req.live.tokens, session_id=session.id)
            else:
                c = await self.engine.generate(prompt_ids, params, session_id=session.id)
        except EngineOverloadedError as exc:
            raise self._retry_error(429, f"the engine is overloaded: {exc}") from None
        except EngineUnavailableError as exc:
            raise self._retry_error(503, f"the engine is unavailable: {exc}") from None
        except PromptTooLongError as exc:
            self._over_context[session.id] = self._over_context.pop(session.id, 0) + 1
            if len(self._over_context) > 65536:  # a long-lived proxy: keep the latest sessions' counts
                del self._over_context[next(iter(self._over_context))]
            msg = prompt_too_long_message(exc, self.chat, req.messages, req.tools)
            raise ApiError(400, msg, param="messages", code="context_length_exceeded") from None
        except EngineError as exc:
            raise ApiError(400, f"the engine refused the request: {exc}") from None
        t_engine = time.perf_counter()
        row = self._to_row(session.id, req, prompt_ids, canon, tkey, base, c)
        row.timing = {
            "render_s": t_render - t0,
            "engine_s": t_engine - t_render,
            "ttft_s": c.ttft_s,
            "cached_tokens": float(c.cached_tokens),
        }
        row.timing["proxy_s"] = time.perf_counter() - t0 - row.timing["engine_s"]
        self.store.add_call(row)
        self._history_of(session.id).append(row)
        session.last_active = time.time()
        return row

    def _retry_error(self, status: int, message: str) -> ApiError:
        return ApiError(status, message, headers={"Retry-After": str(self.cfg.retry_after_s)})

    def _to_row(
        self,
        session_id: str,
        req: CallRequest,
        prompt_ids: list[int],
        canon: list[str],
        tkey: str,
        base: int | None,
        c: Completion,
    ) -> CallRow:
        ids, logprobs = list(c.token_ids), list(c.logprobs)
        keep, text, stop_hit = cut_at_stop(self.chat.decode, ids, req.stop)  # the text the client gets
        ids, logprobs = ids[:keep], logprobs[:keep]
        finish = "stop" if stop_hit else c.finish_reason
        uid = req.uid
        text = req.prefill + req.reply_prefix + text
        content, tool_calls = text, []
        if req.parse_tools:
            parsed = parse_completion(text, self.chat.tool_format, id_prefix=f"{req.id_prefix}_{uid}")
            content = text.strip()  # as the parsed content is (streaming relies on it: proxy.live)
            if parsed.tool_calls and not parsed.errors:  # a malformed call is answered as plain content
                content, tool_calls = parsed.content, [t.to_openai() for t in parsed.tool_calls]
        if req.messages is not None:
            reply = {"role": "assistant", "content": content, "tool_calls": tool_calls}
            canon = [*canon, canonical_message(reply)]
        else:
            canon = [*canon, content]
        result = {
            "id": uid,
            "created": req.created,
            "model": self.model,
            "content": content,
            "tool_calls": tool_calls,
            "finish": finish,
            "stop_sequence": stop_hit,
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(ids),
            "cached_tokens": c.cached_tokens,
            **({"prefill": req.prefill} if req.prefill else {}),
        }
        return CallRow(
            session_id=session_id,
            api=req.api,
            request_key=req.request_key,
            request_body=req.body,
            canon=canon,
            tools_key=tkey,
            base_call_id=base,
            prompt_ids=list(prompt_ids),
            completion_ids=ids,
            logprobs=logprobs,
            finish_reason=finish,
            policy_version=c.policy_version,
            result=result,
            timing={},
        )


def _head(call: CallRow) -> str | None:
    """A call's first message in canonical form with its tools (many templates render the tools into
    the system turn: a sub-agent with the same system text but other tools is another conversation);
    None for completions calls, which have no messages."""
    return f"{call.tools_key}\n{call.canon[0]}" if call.api != "completions" and call.canon else None
