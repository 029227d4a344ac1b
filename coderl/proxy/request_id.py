"""Every HTTP answer of the proxy carries a request id, as the APIs it stands in for do.

OpenAI's SDKs read ``x-request-id`` (``response._request_id``), Anthropic's read ``request-id``; both
headers carry the same ``req_<32 hex>``. The id is also in ``request.state.request_id`` for the app's
own logs, so a user can match what an agent reported to the proxy's log line. The id is always the
proxy's own: one a client sends in ``x-request-id`` is not echoed, and one the app set is replaced.
"""

from __future__ import annotations

import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADERS = (b"x-request-id", b"request-id")


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


class RequestId:
    """ASGI middleware: a fresh id per HTTP request, in ``scope["state"]`` and in the answer's headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = new_request_id()
        scope.setdefault("state", {})["request_id"] = rid

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in HEADERS]
                message = {**message, "headers": [*headers, *((name, rid.encode()) for name in HEADERS)]}
            await send(message)

        await self.app(scope, receive, send_with_id)


def request_id_of(scope: Scope) -> str:
    """The id :class:`RequestId` gave this request ('' outside it)."""
    return str(scope.get("state", {}).get("request_id", ""))
