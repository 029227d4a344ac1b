"""A scripted engine: deterministic replies after a fixed latency, for orchestration tests and benchmarks.

It isolates what is under test (an agent loop, the proxy, the router, the rollout runner, a
benchmark of the framework's own overhead) from model speed and sampling noise. It is an ``Engine``
like any other, so the engine contract suite runs against it too.

Replies are taken in order, over all calls or per session (``per_session=True``); each is

- a string: its token ids (``tokenizer.encode``) followed by the end-of-turn token;
- a list of token ids, returned as given;
- an exception, raised by ``generate`` (an engine failure);
- a callable ``(prompt_ids, params) -> token ids``.

When the script runs out the ``default`` reply answers. Every reply is cut to ``params.max_tokens``.
Log-probabilities are ``-0.01 * (position + 1)``: distinct per position, so a misaligned copy shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coderl.engine.base import Engine, TokenSink
from coderl.engine.params import SamplingParams
from coderl.engine.stops import NameWatch, StopWatch
from coderl.errors import EngineError, EngineUnavailableError
from coderl.types import Completion, FinishReason

Reply = str | Sequence[int] | BaseException | Callable[[list[int], SamplingParams], Sequence[int]]


def count_up(prompt_ids: list[int], params: SamplingParams) -> list[int]:
    """``max_tokens`` ids counting up from the prompt's length (needs no tokenizer)."""
    return [len(prompt_ids) + i for i in range(params.max_tokens)]


def scripted_logprobs(n: int) -> list[float]:
    """The log-probabilities a scripted completion of ``n`` tokens carries."""
    return [-0.01 * (i + 1) for i in range(n)]


@dataclass
class ScriptedCall:
    """One request the engine received."""

    prompt_ids: list[int]
    params: SamplingParams
    session_id: str | None


class ScriptedEngine(Engine):
    """Answers each call with the next scripted reply after ``latency_s``; records every call.

    Set ``dead = True`` to make every call fail with :class:`EngineUnavailableError` (a lost replica).
    """

    def __init__(
        self,
        replies: Sequence[Reply] = (),
        tokenizer: Any = None,
        latency_s: float = 0.0,
        per_session: bool = False,
        default: Reply = count_up,
        name: str = "scripted",
        version: int = 0,
        end_token: str = "<|im_end|>",
        token_delay_s: float = 0.0,
    ) -> None:
        self.name = name
        self.token_delay_s = token_delay_s
        """generate_streaming's pause before each id after the first (a slow engine's stream)."""
        self.replies = list(replies)
        self.tokenizer = tokenizer
        self.latency_s = latency_s
        self.per_session = per_session
        self.default = default
        self.version = version
        self.end_id: int | None = None
        if tokenizer is not None:
            end = tokenizer.convert_tokens_to_ids(end_token)
            self.end_id = int(end) if end is not None else None
        self.dead = False
        self.weights: Mapping[str, Any] | str | Path | None = None  # the last update_weights took
        self.calls: list[ScriptedCall] = []
        self.ended: list[str] = []  # sessions end_session was told of, in order
        self.running = 0
        self._per_session_calls: dict[str, int] = {}
        self._encoded: dict[str, list[int]] = {}

    # ------------------------------------------------------------------ the Engine contract
    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def healthy(self) -> bool:
        return not self.dead

    @property
    def policy_version(self) -> int:
        return self.version

    def stats(self) -> dict[str, Any]:
        return {"requests": len(self.calls), "in_flight": self.running}

    async def end_session(self, session_id: str) -> None:
        self.ended.append(session_id)

    async def update_weights(self, weights: Mapping[str, Any] | str | Path) -> int:
        if self.dead:
            raise EngineUnavailableError(f"engine {self.name} is not available")
        self.version += 1
        self.weights = weights
        return self.version

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None = None
    ) -> Completion:
        if self.dead:
            raise EngineUnavailableError(f"engine {self.name} is not available")
        reply = self._next(session_id)
        self.calls.append(ScriptedCall(list(prompt_ids), params, session_id))
        self.running += 1
        try:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
        finally:
            self.running -= 1
        ids = self._ids(reply, list(prompt_ids), params)[: params.max_tokens]
        stop_str = None
        departed = False
        if params.stop or (params.expect_name and self.tokenizer is not None):  # as an engine does
            if self.tokenizer is None:  # expect_name is only a saving: without a tokenizer, not checked
                raise EngineError("stop strings need the scripted engine's tokenizer to read its replies")
            tokenizer = self.tokenizer

            def decode(t: list[int]) -> str:
                return str(tokenizer.decode(t, skip_special_tokens=True))

            watch = StopWatch(decode, params.stop)
            names = NameWatch(decode, params.expect_name) if params.expect_name else None
            for n in range(1, len(ids) + 1):
                stop_str = watch.check(ids[:n])
                departed = stop_str is None and names is not None and names.check(ids[:n])
                if stop_str is not None or departed:
                    ids = ids[:n]
                    break
        ended = bool(ids) and self.end_id is not None and ids[-1] == self.end_id
        finish: FinishReason = (
            "length"
            if stop_str is None and not departed and not ended and len(ids) == params.max_tokens
            else "stop"
        )
        return Completion(
            ids,
            scripted_logprobs(len(ids)),
            finish,
            self.version,
            prompt_tokens=len(prompt_ids),
            replica=self.name,
            stop_str=stop_str,
            departed=departed,
        )

    async def generate_streaming(
        self, prompt_ids: list[int], params: SamplingParams, on_tokens: TokenSink, session_id: str | None = None
    ) -> Completion:
        """:meth:`generate`, then its ids handed over one at a time, yielding to the event loop between
        them, as an engine sampling them would."""
        completion = await self.generate(prompt_ids, params, session_id=session_id)
        for i, (tok, lp) in enumerate(zip(completion.token_ids, completion.logprobs, strict=True)):
            await asyncio.sleep(self.token_delay_s if i else 0)
            on_tokens([tok], [lp])
        await asyncio.sleep(0)
        return completion

    # ------------------------------------------------------------------ for tests
    @property
    def prompts(self) -> list[list[int]]:
        """The prompt of every call, in arrival order."""
        return [c.prompt_ids for c in self.calls]

    def _next(self, session_id: str | None) -> Reply:
        if self.per_session:
            key = session_id or ""
            n = self._per_session_calls.get(key, 0)
            self._per_session_calls[key] = n + 1
            if not self.replies:
                return self.default
            return self.replies[min(n, len(self.replies) - 1)]
        n = len(self.calls)
        return self.replies[n] if n < len(self.replies) else self.default

    def _ids(self, reply: Reply, prompt_ids: list[int], params: SamplingParams) -> list[int]:
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, str):
            if self.tokenizer is None or self.end_id is None:
                raise EngineError("a text reply needs the scripted engine's tokenizer (with an end token)")
            ids = self._encoded.get(reply)
            if ids is None:  # once per text: the engine this stands in for spends its CPU elsewhere
                ids = self._encoded[reply] = [*self.tokenizer.encode(reply, add_special_tokens=False), self.end_id]
            return list(ids)
        if callable(reply):
            return list(reply(prompt_ids, params))
        return list(reply)
