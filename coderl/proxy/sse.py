"""Server-sent events: the framing both APIs stream in."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi.responses import StreamingResponse

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    """One event: ``event: NAME`` (Anthropic names its events; OpenAI does not), then ``data: ...``."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def text_pieces(text: str, size: int = 48) -> Iterator[str]:
    """Content split into delta-sized pieces (the whole completion is known when streaming starts)."""
    for i in range(0, len(text), size):
        yield text[i : i + size]


def sse_response(events: Iterable[bytes], headers: dict[str, str]) -> StreamingResponse:
    async def body() -> Any:
        for event in events:
            yield event

    return StreamingResponse(body(), media_type="text/event-stream", headers={**SSE_HEADERS, **headers})
