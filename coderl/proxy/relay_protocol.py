"""The relay wire protocol: JSON text frames between a relay-mode proxy and its inference workers.

A worker opens ``/ws/worker`` with ``Authorization: Bearer <proxy.worker_token>`` and speaks first:

    worker -> proxy   hello {protocol, name, instance, capacity, model, policy_version, weights_tag}
    proxy  -> worker  welcome {worker_id, heartbeat_s, worker_timeout_s}
    proxy  -> worker  generate {id, prompt_ids, params, session_id, stream}
    worker -> proxy   tokens {id, token_ids, logprobs}   (only when stream: the tokens sampled since the last)
    worker -> proxy   result {id, token_ids, logprobs, finish_reason, policy_version, ...} | error {id, status, message}
    proxy  -> worker  cancel {id}                       (the caller went away; no answer expected)
    proxy  -> worker  ping {t}  ->  worker -> proxy  pong {t}      (every proxy.heartbeat_s)
    proxy  -> worker  update_weights {id, path, tag}  ->  updated {id, policy_version} | error {id, ...}
    worker -> proxy   drain {}                          (leaving: send no new work; in-flight may finish)

Every frame is validated here; a frame that does not parse raises :class:`RelayProtocolError`, and the
side that received it drops the connection (the proxy never crashes on a worker's frame). Each side
treats any frame from the other as a sign of life; a side silent for ``worker_timeout_s`` is lost.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from coderl.engine.params import SamplingParams
from coderl.errors import ProxyError
from coderl.types import Completion

M = TypeVar("M")

PROTOCOL_VERSION = 2
"""2: streamed generation (``generate.stream`` and ``tokens`` frames)."""
MAX_FRAME_BYTES = 64 * 2**20
"""Largest frame either side accepts (a long prompt's ids are a few hundred KiB of JSON)."""

# WebSocket close codes (4000-4999 are for applications).
CLOSE_BAD_MESSAGE = 4400
CLOSE_TIMEOUT = 4408
CLOSE_NAME_TAKEN = 4409
CLOSE_REPLACED = 4410
CLOSE_GOING_AWAY = 1001


class RelayProtocolError(ProxyError, ValueError):
    """A relay frame was not valid JSON or not a valid message; the message says what was wrong."""


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Hello(_Frame):
    type: Literal["hello"] = "hello"
    protocol: int = PROTOCOL_VERSION
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@-]+$")
    instance: str = Field(min_length=1, max_length=64)
    """Random per worker process: tells a reconnect of the same process from a second worker of that name."""
    capacity: int = Field(ge=1, le=100_000)
    model: str = Field("", max_length=512)
    policy_version: int = Field(0, ge=0)
    weights_tag: str | None = Field(None, max_length=128)
    """Tag of the last weights the proxy made this worker load (None: its start-up weights)."""


class Welcome(_Frame):
    type: Literal["welcome"] = "welcome"
    worker_id: str
    heartbeat_s: float = Field(gt=0)
    worker_timeout_s: float = Field(gt=0)


class Generate(_Frame):
    type: Literal["generate"] = "generate"
    id: str = Field(min_length=1, max_length=64)
    prompt_ids: list[int] = Field(min_length=1)
    params: SamplingParams
    session_id: str | None = None
    stream: bool = False
    """Send ``tokens`` frames as the engine samples, before the ``result`` (which still holds them all)."""


def _same_length(token_ids: list[int], logprobs: list[float]) -> None:
    if len(token_ids) != len(logprobs):
        raise ValueError(
            f"{len(token_ids)} token_ids but {len(logprobs)} logprobs; each token needs its logprob"
        )


class Tokens(_Frame):
    """Tokens of a streamed ``generate`` sampled since the previous ``tokens`` frame, in order."""

    type: Literal["tokens"] = "tokens"
    id: str = Field(min_length=1, max_length=64)
    token_ids: list[int] = Field(min_length=1)
    logprobs: list[float]

    @model_validator(mode="after")
    def _aligned(self) -> Tokens:
        _same_length(self.token_ids, self.logprobs)
        return self


class Result(_Frame):
    type: Literal["result"] = "result"
    id: str = Field(min_length=1, max_length=64)
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "length", "abort"]
    policy_version: int = Field(ge=0)
    prompt_tokens: int = Field(0, ge=0)
    cached_tokens: int = Field(0, ge=0)
    ttft_s: float = 0.0
    latency_s: float = 0.0
    stop_token_id: int | None = None
    stop_str: str | None = None
    departed: bool = False

    @model_validator(mode="after")
    def _aligned(self) -> Result:
        _same_length(self.token_ids, self.logprobs)
        return self

    @classmethod
    def of(cls, request_id: str, c: Completion) -> Result:
        return cls(
            id=request_id,
            token_ids=c.token_ids,
            logprobs=c.logprobs,
            finish_reason=c.finish_reason,
            policy_version=c.policy_version,
            prompt_tokens=c.prompt_tokens,
            cached_tokens=c.cached_tokens,
            ttft_s=c.ttft_s,
            latency_s=c.latency_s,
            stop_token_id=c.stop_token_id,
            stop_str=c.stop_str,
            departed=c.departed,
        )

    def completion(self, replica: str) -> Completion:
        return Completion(
            token_ids=list(self.token_ids),
            logprobs=list(self.logprobs),
            finish_reason=self.finish_reason,
            policy_version=self.policy_version,
            prompt_tokens=self.prompt_tokens,
            cached_tokens=self.cached_tokens,
            ttft_s=self.ttft_s,
            latency_s=self.latency_s,
            stop_token_id=self.stop_token_id,
            stop_str=self.stop_str,
            departed=self.departed,
            replica=replica,
        )


class Error(_Frame):
    """A request failed on the worker; ``status`` as HTTP: 400 refused, 429 overloaded, 5xx the worker's fault."""

    type: Literal["error"] = "error"
    id: str = Field(min_length=1, max_length=64)
    status: int = Field(ge=400, le=599)
    message: str = Field(max_length=4000)


class Cancel(_Frame):
    type: Literal["cancel"] = "cancel"
    id: str


class Ping(_Frame):
    type: Literal["ping"] = "ping"
    t: float


class Pong(_Frame):
    type: Literal["pong"] = "pong"
    t: float


class UpdateWeights(_Frame):
    type: Literal["update_weights"] = "update_weights"
    id: str
    path: str = Field(min_length=1)
    tag: str


class Updated(_Frame):
    type: Literal["updated"] = "updated"
    id: str = Field(min_length=1, max_length=64)
    policy_version: int = Field(ge=0)


class Drain(_Frame):
    type: Literal["drain"] = "drain"


WorkerMessage = Annotated[
    Hello | Tokens | Result | Error | Pong | Updated | Drain, Field(discriminator="type")
]
ProxyMessage = Annotated[Welcome | Generate | Cancel | Ping | UpdateWeights, Field(discriminator="type")]
_FROM_WORKER: TypeAdapter[Hello | Tokens | Result | Error | Pong | Updated | Drain] = TypeAdapter(
    WorkerMessage
)
_FROM_PROXY: TypeAdapter[Welcome | Generate | Cancel | Ping | UpdateWeights] = TypeAdapter(ProxyMessage)


def close_reason(text: str) -> str:
    """``text`` cut to fit a WebSocket close frame (at most 123 bytes of UTF-8)."""
    return text.encode()[:120].decode(errors="ignore")


def encode(message: _Frame) -> str:
    """The text frame of one message."""
    return message.model_dump_json()


def parse_worker_message(frame: str | bytes) -> Hello | Tokens | Result | Error | Pong | Updated | Drain:
    """One frame a worker sent, validated (:class:`RelayProtocolError` if it is not a valid message)."""
    return _parse(_FROM_WORKER, frame, "worker")


def parse_proxy_message(frame: str | bytes) -> Welcome | Generate | Cancel | Ping | UpdateWeights:
    """One frame the proxy sent, validated (:class:`RelayProtocolError` if it is not a valid message)."""
    return _parse(_FROM_PROXY, frame, "proxy")


def _parse(adapter: TypeAdapter[M], frame: str | bytes, sender: str) -> M:
    if isinstance(frame, bytes):
        raise RelayProtocolError(
            f"a binary frame ({len(frame)} bytes) from the {sender}; relay frames are JSON text"
        )
    try:
        return adapter.validate_json(frame)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'frame'}: {e['msg']}" for e in exc.errors()[:3]
        )
        raise RelayProtocolError(f"invalid frame from the {sender} ({problems}): {frame[:200]!r}") from None
