"""Streaming as it is generated: token ids from the engine to content deltas the client may already see.

:class:`LiveCall` carries a call's sampled ids from the engine to the SSE writer while the call runs.
:class:`LiveText` decides how much of their text is safe to send: only text that is certain to be the
start of the reply's final content (what the record holds and the non-streamed answer would say):

- nothing a stop string cuts or could still cut (:func:`coderl.engine.stops.cut_at_stop` ends the
  reply at the last whole token before a stop string begins): once a stop string is in the text, only
  the whole tokens before it; until then, only the whole tokens that end before any text that could be
  the start of a stop string (under the stop ``"."`` the token holding the ``"."`` never goes out;
  under the stop ``"ld!"`` a token that ends in ``"l"`` waits for the tokens that show what follows);
- nothing from where a tool call may begin (``<tool_call>``, or ``{`` where bare JSON calls are
  parsed): tool calls and any text after them come with the final chunks, parsed;
- with tools, no leading whitespace and no trailing whitespace yet (that content is stripped); never a
  half-decoded character.

When the call is done, the rest of the final content follows; the streamed text is always a prefix of
it, so the concatenated deltas equal the non-streamed content exactly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from fastapi.responses import Response, StreamingResponse

from coderl.chat.parse import ToolFormat
from coderl.engine.stops import cut_at_stop, first_stop, partial_stop_at
from coderl.proxy.errors import ApiError
from coderl.proxy.sse import SSE_HEADERS
from coderl.proxy.store import CallRow

Decode = Callable[[list[int]], str]
log = logging.getLogger(__name__)


class LiveCall:
    """A running call's sampled ids (in order) and its prompt size, for the stream writer."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[list[int]] = asyncio.Queue()
        self.prompt_tokens = 0

    def tokens(self, ids: list[int], logprobs: list[float]) -> None:
        self.queue.put_nowait(ids)


class LiveText:
    """The safe prefix of a growing completion's content (see the module docstring)."""

    def __init__(
        self,
        decode: Decode,
        stops: list[str],
        prefix: str,
        parse_tools: bool,
        tool_format: ToolFormat,
        shown: str = "",
    ) -> None:
        """``prefix``: the reply's start that is prompt tokens (a prefill, a forced call's opening);
        ``shown``: the part of it the client wrote itself (Anthropic's prefill), never sent back."""
        self.decode = decode
        self.stops = [s for s in stops if s]
        self.prefix = prefix
        self.strip = parse_tools
        self.markers = ["<tool_call>"] if parse_tools else []
        if parse_tools and tool_format not in ("hermes", "xml"):
            self.markers.append("{")
        self.ids: list[int] = []
        self.ends: list[int] = []  # the completion's text length after each token (with stop strings)
        self.sent = self.shown = shown.lstrip() if parse_tools else shown

    def settled_text(self) -> str:
        """The text of the whole tokens so far that no stop string cuts or could still cut."""
        completion = self.decode(self.ids)
        if not self.stops:
            return completion
        if first_stop(completion, self.stops) is not None:  # as the record will be cut
            return cut_at_stop(self.decode, self.ids, self.stops)[1]
        held = partial_stop_at(completion, self.stops)
        return completion[: max((end for end in self.ends if end <= held), default=0)]

    def feed(self, ids: list[int]) -> str:
        """Take newly sampled ids; returns the content that became safe to send (often '')."""
        for tok in ids:
            self.ids.append(tok)
            if self.stops:
                self.ends.append(len(self.decode(self.ids)))
        safe = self.prefix + self.settled_text()
        for marker in self.markers:  # a tool call may begin at a marker, or at a marker's start at the end
            at = safe.find(marker)
            if at >= 0:
                safe = safe[:at]
            for n in range(min(len(marker) - 1, len(safe)), 0, -1):
                if safe.endswith(marker[:n]):
                    safe = safe[: len(safe) - n]
                    break
        safe = safe.rstrip("\ufffd")
        if self.strip:
            safe = safe.strip()
        if len(safe) <= len(self.sent) or not safe.startswith(self.sent):
            return ""
        delta, self.sent = safe[len(self.sent) :], safe
        return delta

    def rest(self, content: str) -> str:
        """The final content still to send."""
        if not content.startswith(self.sent):
            if self.sent != self.shown:  # only the client's own prefill (it went into a tool call) may differ
                log.error("streamed content %r is not the start of the reply %r", self.sent, content)
            return ""
        return content[len(self.sent) :]


class StreamShape(Protocol):
    """How one API frames a stream: its opening events, a content delta, and the rest from the record."""

    def opening(self, prompt_tokens: int) -> list[bytes]: ...

    def delta(self, text: str) -> list[bytes]: ...

    def closing(self, row: CallRow, rest: str) -> list[bytes]: ...

    def error(self, status: int, message: str) -> bytes: ...

    def replay(self, row: CallRow) -> list[bytes]: ...

    def keepalive(self) -> bytes:
        """Sent when nothing else was for a while (a tool call being sampled is held back whole): an
        SSE comment, which every client's parser skips; Anthropic's stream has its ``ping`` event."""
        return b": keep-alive\n\n"


async def live_response(
    call: Awaitable[tuple[CallRow, bool]],
    live: LiveCall,
    text: LiveText,
    shape: StreamShape,
    replay: Callable[[CallRow, bool], Response],
    keepalive_s: float | None = None,
) -> Response:
    """The HTTP answer of a streamed call. It waits for the first sampled ids (or the end), so a call
    that fails before generating gets a plain HTTP error; a call answered from the record (a retry)
    is replayed whole by ``replay``; otherwise the events follow the engine token by token, with
    ``shape.keepalive()`` after every ``keepalive_s`` without one (agents drop a stream that says
    nothing for a while: Claude Code's idle watchdog)."""
    task = asyncio.ensure_future(call)
    waiting = asyncio.ensure_future(live.queue.get())
    try:
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        waiting.cancel()
        raise
    if not waiting.done():
        waiting.cancel()
        row, replayed = task.result()  # raises the call's error as an HTTP error
        return replay(row, replayed)

    async def events() -> AsyncIterator[bytes]:
        try:
            for event in shape.opening(live.prompt_tokens):
                yield event
            clock = asyncio.get_running_loop().time
            sent = clock()  # when the client last got something
            pending: asyncio.Future[list[int]] | None = waiting
            while pending is not None:
                if keepalive_s is not None and clock() - sent >= keepalive_s:
                    yield shape.keepalive()  # ids came, but none made text that is safe to send yet
                    sent = clock()
                left = None if keepalive_s is None else max(0.0, keepalive_s - (clock() - sent))
                both: list[asyncio.Future[Any]] = [task, pending]
                done, _ = await asyncio.wait(both, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if pending in done:
                    delta = text.feed(pending.result())
                    if delta:
                        for event in shape.delta(delta):
                            yield event
                        sent = clock()
                    pending = asyncio.ensure_future(live.queue.get())
                elif task.done():
                    pending.cancel()
                    pending = None
            try:
                row, _ = task.result()
            except ApiError as exc:  # headers are out: the error goes in the stream
                yield shape.error(exc.status, exc.message)
                return
            for event in shape.closing(row, text.rest(row.result["content"])):
                yield event
        finally:
            task.cancel()  # a client that left mid-stream stops its generation

    return StreamingResponse(events(), media_type="text/event-stream", headers=dict(SSE_HEADERS))
