"""The proxy's OpenAPI document as it really behaves: its auth schemes, and the errors it answers.

FastAPI's generated schema knows neither: it declares no security and a 422 for bad input, where the
proxy answers 400 (in the caller's API format) and 401 without the right token. :func:`document`
rewrites the generated schema once: security schemes (the admin token; a session's secret as a bearer
token or ``x-api-key``), each route's requirement, and its error responses.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

_OPENAI_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
_ANTHROPIC_ERROR = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}
_SCHEMES = {
    "adminToken": {"type": "http", "scheme": "bearer", "description": "proxy.admin_token"},
    "sessionSecret": {"type": "http", "scheme": "bearer", "description": "the session's secret"},
    "sessionApiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
        "description": "the session's secret",
    },
}
_WHY = {
    400: "bad input: the message names the field",
    401: "missing or wrong token (an unknown session reads the same)",
    404: "no such session, call record or model",
    409: "an Idempotency-Key reused for a different request",
    410: "the session is complete",
    413: "body over proxy.max_body_mb",
    429: "the engine is overloaded (Retry-After)",
    503: "the engine is unavailable (Retry-After)",
}


def _errors(statuses: list[int], schema: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{schema}"}
    return {
        str(s): {"description": _WHY[s], "content": {"application/json": {"schema": ref}}} for s in statuses
    }


def document(app: FastAPI) -> None:
    """Make ``app.openapi()`` declare the proxy's auth schemes and real error responses."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = generate()
        components = spec.setdefault("components", {})
        components.setdefault("securitySchemes", {}).update(_SCHEMES)
        schemas = components.setdefault("schemas", {})
        schemas.update({"OpenAIError": _OPENAI_ERROR, "AnthropicError": _ANTHROPIC_ERROR})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        for path, ops in spec.get("paths", {}).items():
            for method, op in ops.items():
                responses = op.setdefault("responses", {})
                responses.pop("422", None)
                if path == "/health":
                    continue
                calls_model = path.startswith("/s/") and method == "post" and "count_tokens" not in path
                if path.startswith("/s/"):
                    op["security"] = [{"sessionSecret": []}, {"sessionApiKey": []}]
                    statuses = [400, 401, 404, 410, 413] + ([409, 429, 503] if calls_model else [])
                else:
                    op["security"] = [{"adminToken": []}]
                    statuses = [400, 401, 404, 413] if "{" in path or method == "post" else [400, 401]
                dialect = "AnthropicError" if "/v1/messages" in path else "OpenAIError"
                responses.update(_errors(statuses, dialect))
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
