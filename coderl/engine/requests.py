"""What the embedded engine's callers hand its thread, and how the thread answers them.

A caller (any asyncio loop) appends a :class:`Request`, :class:`WeightUpdate` or :class:`EndSession` to
the scheduler's inbox (:mod:`coderl.engine.scheduler`); the engine thread completes the caller's future
with :func:`resolve`, on the caller's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from coderl.engine.base import TokenSink
from coderl.engine.draft import NGramDraft
from coderl.engine.kv_cache import SequenceKV
from coderl.engine.params import SamplingParams
from coderl.engine.stops import NameWatch, StopWatch
from coderl.types import Completion


@dataclass(eq=False)
class Request:
    rid: int
    prompt: list[int]
    params: SamplingParams
    session_id: str | None
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Completion]
    generator: torch.Generator
    stop_ids: frozenset[int]
    max_new: int
    stops: StopWatch | None
    names: NameWatch | None
    sink: TokenSink | None
    submitted: float
    kv: SequenceKV | None = None
    output: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    cached_tokens: int = 0
    first_token_at: float = 0.0
    policy_version: int = 0
    versions: list[int] = field(default_factory=list)
    """The policy version of each sampled token (an interrupting update changes it mid-request)."""
    cancelled: bool = False
    draft: NGramDraft | None = None
    """Prompt and output so far, indexed for draft tokens (``engine.speculate``); None: no drafts."""
    draft_len: int = 0
    """How many tokens the next draft may have: it grows while drafts are kept whole and shrinks to
    what was kept when one is not (0: skip a step, then try one token), so a request that has stopped
    copying costs the batch few verified rows (on a CPU every row of a step's matmuls costs)."""

    def pending(self) -> list[int]:
        """Tokens whose KV is not computed yet: the prompt's rest, or the last sampled token; after an
        interrupting update, the whole context again (prompt and the tokens sampled so far)."""
        assert self.kv is not None
        done = self.kv.length
        if done < len(self.prompt):
            return self.prompt[done:] + self.output
        return self.output[done - len(self.prompt) :]


@dataclass(eq=False)
class WeightUpdate:
    weights: Mapping[str, torch.Tensor] | str | Path | None
    """None: let go of the weights (:meth:`~coderl.engine.embedded.EmbeddedEngine.release_weights`)."""
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[int]


@dataclass(eq=False)
class EndSession:
    session_id: str


def retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a shielded request's outcome as seen once its caller is gone (cancelled, or interrupted by
    Ctrl-C), so the engine's stop does not log "Future exception was never retrieved" for each one."""
    if not future.cancelled():
        future.exception()


def resolve(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any = None,
    error: Exception | None = None,
) -> None:
    """Complete a future owned by another thread's event loop (ignoring ones already cancelled)."""

    def done() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    try:
        loop.call_soon_threadsafe(done)
    except RuntimeError:  # the caller's loop is closed; nobody is waiting any more
        pass


def stop_reason(req: Request, tok: int) -> tuple[str, int | None, str | None, bool] | None:
    """Whether the token just appended to ``req.output`` ends the request: (finish reason, stop token,
    stop string, departed: the turn left the expected tool name), or None to go on."""
    if tok in req.stop_ids:
        return "stop", tok, None, False
    if req.stops is not None and (hit := req.stops.check(req.output)) is not None:
        return "stop", None, hit, False
    if req.names is not None and req.names.check(req.output):
        return "stop", None, None, True
    if len(req.output) >= req.max_new:
        return "length", None, None, False
    return None
