"""Configuration of the recording proxy (the ``proxy`` section of the root config) and of a relay-mode
inference worker (the ``relay`` section, read by ``coderl proxy worker``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from coderl.section import Section


class ProxyConfig(Section):
    """``coderl proxy serve``: per-session OpenAI / Anthropic endpoints that record every call."""

    host: str = "127.0.0.1"
    """Address the proxy binds."""
    port: int = Field(8100, ge=0, le=65535)
    """TCP port of the proxy."""
    admin_token: str | None = None
    """Bearer token for /sessions; empty = a random one, printed at start."""
    db: Path | None = None
    """SQLite file of the durable record; empty = <user data dir>/coderl/proxy.sqlite (stable across restarts)."""
    db_synchronous: Literal["normal", "full"] = "normal"
    """SQLite synchronous mode; normal (WAL) survives a killed process, full also a power cut (fsync per call)."""
    session_ttl_s: float = Field(3600.0, gt=0)
    """Seconds a session may stay idle before it expires (agents then get 404; the record stays readable)."""
    max_body_mb: float = Field(16.0, gt=0)
    """Largest request body accepted, in MiB (bigger ones get 413)."""
    stream_keepalive_s: float | None = Field(5.0, gt=0)
    """A streamed reply that has sent nothing for this long sends a keep-alive (Anthropic's ``ping``
    event, an SSE comment elsewhere): a tool call is held back until it is whole, and agents drop a
    silent stream (Claude Code's idle watchdog). null = never."""
    public_url: str | None = None
    """Base URL handed out to agents; empty = http://<host>:<port>."""

    @field_validator("public_url")
    @classmethod
    def _absolute_public_url(cls, url: str | None) -> str | None:
        if url and not url.startswith(("http://", "https://")):
            raise ValueError(f"proxy.public_url: {url!r} is not an http:// or https:// URL (e.g. https://proxy.example:8100)")
        return url

    default_max_tokens: int = Field(1024, ge=1)
    """max_tokens of a request that sets none (Anthropic requires one; OpenAI does not)."""
    max_tokens_cap: int | None = Field(None, ge=1)
    """The most tokens any call may generate; a request asking more gets this many (empty = no cap but
    the engine's context). The remote agent loop sets it to rollout.max_tokens."""
    model_name: str = ""
    """Model name reported by /models and in responses; empty = the served checkpoint's name."""
    retry_after_s: int = Field(1, ge=0)
    """Retry-After seconds sent with 429 / 503 when the engine is overloaded or down."""
    mode: Literal["engine", "relay"] = "engine"
    """engine = serve the configured engine in-process; relay = no local engine: inference workers
    (`coderl proxy worker`) connect out to /ws/worker and the proxy dispatches calls to them."""
    worker_token: str | None = None
    """relay: shared secret workers present as 'Authorization: Bearer <token>' on /ws/worker (required)."""
    heartbeat_s: float = Field(5.0, gt=0)
    """relay: seconds between the proxy's pings to each worker (workers answer each with a pong)."""
    worker_timeout_s: float = Field(15.0, gt=0)
    """relay: a worker silent this long is lost; its requests in flight go to other workers (> heartbeat_s)."""
    dispatch_timeout_s: float = Field(30.0, ge=0)
    """relay: how long a call waits for a worker to connect when none is, before 503 with Retry-After."""
    redispatch_limit: int = Field(3, ge=0)
    """relay: times one call may move to another worker after losing its own, before it fails with 503."""
    max_sticky_sessions: int = Field(65536, ge=1)
    """relay: session -> worker entries kept (LRU), so each session's calls reuse one worker's prefix cache."""


class RelayWorkerConfig(Section):
    """``coderl proxy worker``: serve the configured engine to a relay-mode proxy over a WebSocket."""

    url: str = "ws://127.0.0.1:8100/ws/worker"
    """The proxy's worker endpoint, ws://HOST:PORT/ws/worker (wss:// behind TLS)."""
    token: str | None = None
    """The proxy's proxy.worker_token (required); sent as 'Authorization: Bearer <token>'."""
    name: str = Field("", max_length=128, pattern=r"^[A-Za-z0-9._:@-]*$")
    """This worker's name (letters, digits, . _ : @ -), unique among the proxy's workers; empty = <hostname>-<pid>."""
    capacity: int = Field(16, ge=1, le=100_000)
    """Requests this worker runs at once (more wait here); the proxy balances by in-flight / capacity."""
    backoff_base_s: float = Field(0.5, gt=0)
    """Reconnect backoff: the n-th retry waits uniform(0, min(backoff_cap_s, backoff_base_s * 2**n)) s."""
    backoff_cap_s: float = Field(30.0, gt=0)
    """Reconnect backoff: the longest wait between two connection attempts, in seconds."""
    connect_timeout_s: float = Field(10.0, gt=0)
    """Seconds one connection attempt (TCP, TLS, WebSocket handshake, welcome) may take."""
    drain_timeout_s: float = Field(30.0, ge=0)
    """On SIGTERM / SIGINT: seconds to finish requests in flight before leaving (the rest move to other workers)."""

    @field_validator("url")
    @classmethod
    def _ws_url(cls, url: str) -> str:
        if not url.startswith(("ws://", "wss://")):
            raise ValueError("relay.url must start with ws:// or wss://, e.g. ws://proxy-host:8100/ws/worker")
        return url
