"""Secrets: the admin token for /sessions, one secret per session for its agent, and (relay mode)
the worker token of /ws/worker.

Only a SHA-256 of each session secret is stored; comparisons are constant-time. An agent may present
its secret as ``Authorization: Bearer <secret>`` (OpenAI SDKs) or ``x-api-key: <secret>`` (Anthropic
SDKs); a session's secret opens that session only.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from starlette.requests import HTTPConnection, Request

from coderl.proxy.errors import ApiError


def new_session_id() -> str:
    return "s" + secrets.token_hex(12)


def new_secret() -> str:
    return "sk-coderl-" + secrets.token_urlsafe(24)


def new_admin_token() -> str:
    return "adm-" + secrets.token_urlsafe(24)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def presented_secret(request: HTTPConnection) -> str:
    """The credential a request carries: a bearer token, else x-api-key, else ''."""
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key", "").strip()


WRONG_SECRET = "missing or wrong session secret (Authorization: Bearer <secret> or x-api-key: <secret>)"


def secret_ok(request: Request, secret_hash: str | None) -> bool:
    """Whether the request carries the secret whose hash is ``secret_hash`` (None, an unknown session:
    never, after the same work, so the answer does not tell an unknown id from a wrong secret)."""
    given = presented_secret(request)
    expected = secret_hash if secret_hash is not None else hash_secret(new_secret())
    return bool(given) and hmac.compare_digest(hash_secret(given), expected) and secret_hash is not None


def check_admin(request: Request, admin_token: str) -> None:
    given = presented_secret(request)
    if not given or not hmac.compare_digest(given.encode(), admin_token.encode()):
        raise ApiError(401, "missing or wrong admin token (Authorization: Bearer <admin token>)")


def worker_token_ok(connection: HTTPConnection, worker_token: str) -> bool:
    """Whether a /ws/worker handshake carries the worker token (as a bearer token or x-api-key)."""
    given = presented_secret(connection)
    return bool(given) and hmac.compare_digest(given.encode(), worker_token.encode())
