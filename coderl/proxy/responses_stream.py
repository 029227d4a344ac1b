"""Responses API streaming: the semantic events, each ``event: <type>`` + ``data: {...}`` with a
``sequence_number`` counting from 0, and no ``[DONE]`` (the stream ends with the final response event).

While the engine samples: ``response.created`` and ``response.in_progress`` (the response, status
``in_progress``, no output yet); with the first text that is safe to send (:mod:`coderl.proxy.live`),
``response.output_item.added`` (the message) and ``response.content_part.added`` (its ``output_text``
part), then ``response.output_text.delta`` events. Once the call is recorded: the rest of the text,
``response.output_text.done``, ``response.content_part.done`` and ``response.output_item.done``; for
each tool call ``response.output_item.added`` (a ``function_call`` with empty arguments),
``response.function_call_arguments.delta`` and ``.done`` (``response.custom_tool_call_input.delta`` and
``.done`` for a custom tool's call), ``response.output_item.done``; last
``response.completed``, or ``response.incomplete`` when max_output_tokens cut the reply. The output
items and the final response are the ones the non-streamed call answers. A failure once the stream
has begun (the engine's) ends it with ``error`` and ``response.failed``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coderl.proxy.errors import error_body
from coderl.proxy.live import StreamShape
from coderl.proxy.sse import sse, text_pieces
from coderl.proxy.store import CallRow

Finish = Callable[[CallRow], dict[str, Any]]


class ResponseStream(StreamShape):
    """A :class:`coderl.proxy.live.StreamShape` for ``POST /v1/responses``. ``head`` is the response as
    created (status ``in_progress``); ``finish`` gives the final response object of the recorded call."""

    def __init__(self, head: dict[str, Any], finish: Finish) -> None:
        self.head = head
        self.finish = finish
        self.sequence = 0
        self.text_open = False

    @property
    def message_id(self) -> str:
        return "msg_" + str(self.head["id"]).removeprefix("resp_")

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, **fields, "sequence_number": self.sequence}
        self.sequence += 1
        return sse(data, kind)

    def opening(self, prompt_tokens: int) -> list[bytes]:
        return [
            self.event("response.created", response=self.head),
            self.event("response.in_progress", response=self.head),
        ]

    def open_text(self) -> list[bytes]:
        if self.text_open:
            return []
        self.text_open = True
        item = {
            "id": self.message_id,
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [
            self.event("response.output_item.added", output_index=0, item=item),
            self.event(
                "response.content_part.added",
                item_id=self.message_id,
                output_index=0,
                content_index=0,
                part=part,
            ),
        ]

    def delta(self, text: str) -> list[bytes]:
        where = {"item_id": self.message_id, "output_index": 0, "content_index": 0}
        return [*self.open_text(), self.event("response.output_text.delta", **where, delta=text, logprobs=[])]

    def closing(self, row: CallRow, rest: str) -> list[bytes]:
        body = self.finish(row)
        items = body["output"]
        out: list[bytes] = []
        if items and items[0]["type"] == "message":
            message, items = items[0], items[1:]
            part = message["content"][0]
            out += self.open_text()
            for piece in text_pieces(rest):
                out += self.delta(piece)
            where = {"item_id": message["id"], "output_index": 0, "content_index": 0}
            out.append(
                self.event("response.output_text.done", **where, text=part["text"], logprobs=part["logprobs"])
            )
            out.append(self.event("response.content_part.done", **where, part=part))
            out.append(self.event("response.output_item.done", output_index=0, item=message))
        first = len(body["output"]) - len(items)
        for index, item in enumerate(items, start=first):
            field, kind = (
                ("input", "response.custom_tool_call_input")
                if item["type"] == "custom_tool_call"
                else ("arguments", "response.function_call_arguments")
            )
            opened = {**item, "status": "in_progress", field: ""}
            where = {"item_id": item["id"], "output_index": index}
            out.append(self.event("response.output_item.added", output_index=index, item=opened))
            out.append(self.event(f"{kind}.delta", **where, delta=item[field]))
            out.append(self.event(f"{kind}.done", **where, **{field: item[field]}))
            out.append(self.event("response.output_item.done", output_index=index, item=item))
        final = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        out.append(self.event(final, response=body))
        return out

    def error(self, status: int, message: str) -> bytes:
        """A failure after the headers went out: the ``error`` event (its fields at the top, as the
        API reference has them, and again under ``error``, as the API sends them: the openai SDK raises
        on that key), then ``response.failed`` with the response's ``error`` (what Codex reads)."""
        err = error_body("openai", status, message)["error"]
        code = err["code"] or err["type"]
        failed = {**self.head, "status": "failed", "error": {"code": failed_code(status), "message": message}}
        return self.event(
            "error", code=code, message=message, param=None, error={**err, "code": code}
        ) + self.event("response.failed", response=failed)

    def keepalive(self) -> bytes:
        """``response.in_progress`` again: Codex's idle timer counts events, and skips SSE comments."""
        return self.event("response.in_progress", response=self.head)

    def replay(self, row: CallRow) -> list[bytes]:
        """The whole stream of a recorded call (a retry answered from the record)."""
        self.head = {**self.head, "id": f"resp_{row.result['id']}", "created_at": row.result["created"]}
        return [*self.opening(row.result["prompt_tokens"]), *self.closing(row, row.result["content"])]


def failed_code(status: int) -> str:
    """``response.failed``'s ``error.code``: one the API gives there (the openai SDK's
    ``ResponseError.code``); the ``error`` event before it keeps this proxy's own code
    (``engine_unavailable``, ...)."""
    if status == 429:
        return "rate_limit_exceeded"
    return "invalid_prompt" if 400 <= status < 500 else "server_error"
