"""HTTP errors of the proxy, written in the error format of the API the caller speaks.

OpenAI: ``{"error": {"message", "type", "param", "code"}}``; Anthropic:
``{"type": "error", "error": {"type", "message"}}``. The status is kept as the upstream gave it
(429 / 503 with Retry-After for an overloaded or missing engine), so the SDKs' retry logic behaves.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from fastapi.responses import JSONResponse

from coderl.errors import ProxyError

Dialect = Literal["openai", "anthropic"]

# status -> (OpenAI type, OpenAI code, Anthropic type)
_KINDS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "invalid_request_error"),
    401: ("authentication_error", "invalid_api_key", "authentication_error"),
    403: ("permission_error", None, "permission_error"),
    404: ("not_found_error", "not_found", "not_found_error"),
    405: ("invalid_request_error", "method_not_allowed", "invalid_request_error"),
    409: ("invalid_request_error", "idempotency_key_reused", "invalid_request_error"),
    410: ("invalid_request_error", "session_closed", "not_found_error"),
    413: ("invalid_request_error", "request_too_large", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_exceeded", "rate_limit_error"),
    499: ("invalid_request_error", "client_closed_request", "invalid_request_error"),
    500: ("server_error", None, "api_error"),
    503: ("server_error", "engine_unavailable", "overloaded_error"),
}

_ANTHROPIC_PATH = re.compile(r"^(/s/[^/]+)?/v1/messages(/|$)")


class ApiError(ProxyError):
    """An error answered to the client with ``status`` in its API's format."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.headers = headers or {}
        self.code = code
        """OpenAI's machine-readable ``code`` where the API names one (``previous_response_not_found``);
        None = the status's usual code."""


def dialect_of(path: str) -> Dialect:
    """Anthropic Messages routes answer in Anthropic's format, everything else in OpenAI's."""
    return "anthropic" if _ANTHROPIC_PATH.match(path) else "openai"


def error_body(
    dialect: Dialect, status: int, message: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    kind = _KINDS.get(status) or (_KINDS[500] if status >= 500 else _KINDS[400])
    if dialect == "anthropic":
        return {"type": "error", "error": {"type": kind[2], "message": message}}
    return {"error": {"message": message, "type": kind[0], "param": param, "code": code or kind[1]}}


def error_response(
    dialect: Dialect,
    status: int,
    message: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    code: str | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(dialect, status, message, param, code), status, headers=headers)


def validation_message(errors: list[Any]) -> tuple[str, str | None]:
    """A readable message (and the first offending parameter) from pydantic / FastAPI errors."""
    for err in errors:
        if err.get("type") == "json_invalid":  # no field to name: the body did not parse at all
            loc = err.get("loc", ())
            where = f" at character {loc[-1]}" if loc and isinstance(loc[-1], int) else ""
            reason = (err.get("ctx") or {}).get("error", "JSON decode error")
            return f"the request body is not valid JSON ({reason}{where}); send one JSON object", None
        if tuple(err.get("loc", ())) == ("body",) and err.get("type") in ("model_attributes_type", "dict_type"):
            return "the request body must be one JSON object (Content-Type: application/json)", None
    parts, param = [], None
    for err in errors[:5]:
        loc = [str(x) for x in err.get("loc", ()) if x not in ("body", "path", "query", "header")]
        where = ".".join(loc) or "body"
        param = param or (where if loc else None)
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "invalid request: " + "; ".join(parts) + more, param
