"""Configuration of the recording proxy (the ``proxy`` section of the root config)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ProxyConfig(BaseModel):
    """``coderl proxy serve``: per-session OpenAI / Anthropic endpoints that record every call."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

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
    public_url: str | None = None
    """Base URL handed out to agents; empty = http://<host>:<port>."""
    default_max_tokens: int = Field(1024, ge=1)
    """max_tokens of a request that sets none (Anthropic requires one; OpenAI does not)."""
    model_name: str = ""
    """Model name reported by /models and in responses; empty = the served checkpoint's name."""
    retry_after_s: int = Field(1, ge=0)
    """Retry-After seconds sent with 429 / 503 when the engine is overloaded or down."""
