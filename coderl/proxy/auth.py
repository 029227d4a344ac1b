"""Secrets: the admin token for /sessions, one secret per session for its agent, and (relay mode)
the worker token of /ws/worker.

Only a SHA-256 of each session secret is stored; comparisons are constant-time. An agent may present
its secret as ``Authorization: Bearer <secret>`` (OpenAI SDKs) or ``x-api-key: <secret>`` (Anthropic
SDKs), or both (either one being the secret is enough); a session's secret opens that session only.
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


def presented_secrets(request: HTTPConnection) -> list[str]:
    """The credentials a request carries: its bearer token and its x-api-key, those present. Either
    may open the door: a client can send both (an Anthropic SDK under a gateway's Authorization
    header), and the one that is not the secret is no reason to refuse the one that is."""
    auth = request.headers.get("authorization", "")
    given = [auth[7:].strip()] if auth[:7].lower() == "bearer " else []
    given.append(request.headers.get("x-api-key", "").strip())
    return [g for g in given if g]


def _matches(given: list[str], expected: str, hashed: bool) -> bool:
    """Whether any of ``given`` is ``expected`` (its SHA-256 when ``hashed``), comparing every one
    in constant time."""
    found = False
    for g in given:
        seen = hash_secret(g) if hashed else g
        found |= hmac.compare_digest(seen.encode(), expected.encode())
    return found


WRONG_SECRET = "missing or wrong session secret (Authorization: Bearer <secret> or x-api-key: <secret>)"


def secret_ok(request: Request, secret_hash: str | None) -> bool:
    """Whether the request carries the secret whose hash is ``secret_hash`` (None, an unknown session:
    never, after the same work, so the answer does not tell an unknown id from a wrong secret)."""
    expected = secret_hash if secret_hash is not None else hash_secret(new_secret())
    return _matches(presented_secrets(request), expected, hashed=True) and secret_hash is not None


def check_admin(request: Request, admin_token: str) -> None:
    if not _matches(presented_secrets(request), admin_token, hashed=False):
        raise ApiError(401, "missing or wrong admin token (Authorization: Bearer <admin token>)")


def worker_token_ok(connection: HTTPConnection, worker_token: str) -> bool:
    """Whether a /ws/worker handshake carries the worker token (as a bearer token or x-api-key)."""
    return _matches(presented_secrets(connection), worker_token, hashed=False)
