"""The engine contract every backend implements (embedded, HTTP client, router)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from coderl.engine.params import SamplingParams
from coderl.errors import EngineError
from coderl.types import Completion

if TYPE_CHECKING:
    import torch

TokenSink = Callable[[list[int], list[float]], None]
"""Receives a completion's token ids and their logprobs as they are sampled (in order; together,
``token_ids`` and ``logprobs``)."""


class Engine(abc.ABC):
    """Token ids in, token ids + logprobs out.

    Lifecycle: construct (cheap), ``await start()`` (loads / connects), ``generate`` many times
    concurrently, ``await stop()``. Also usable as ``async with engine:``.
    """

    name: str = "engine"

    @abc.abstractmethod
    async def start(self) -> None:
        """Load the model or connect; idempotent."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Finish or abort outstanding work and release resources; idempotent."""

    @abc.abstractmethod
    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None = None
    ) -> Completion:
        """Sample one completion for ``prompt_ids``.

        ``session_id`` marks turns of one conversation: engines keep that session's KV cache so the next
        prompt that extends this one pays prefill only for its new tokens. Cancelling the awaiting task
        aborts this request without disturbing others.
        """

    async def generate_streaming(
        self, prompt_ids: list[int], params: SamplingParams, on_tokens: TokenSink, session_id: str | None = None
    ) -> Completion:
        """:meth:`generate`, handing the token ids (and logprobs) to ``on_tokens`` as they are sampled,
        before it returns. An engine that cannot stream hands them over at once when it is done."""
        completion = await self.generate(prompt_ids, params, session_id=session_id)
        if completion.token_ids:
            on_tokens(list(completion.token_ids), list(completion.logprobs))
        return completion

    async def end_session(self, session_id: str) -> None:
        """The session ``session_id`` sends no more turns: an engine may let go of what it keeps for it
        (its cached KV, its sticky replica). Engines that keep nothing per session ignore it."""
        return None

    @abc.abstractmethod
    async def update_weights(self, weights: Mapping[str, torch.Tensor] | str | Path) -> int:
        """Swap in new weights between requests; returns the new policy version."""

    async def release_weights(self) -> bool:
        """Let go of the weights until the next :meth:`update_weights` brings a full set (a phase that
        generates nothing, such as a supervised warm start, whose end replaces them anyway); requests
        meanwhile fail. Whether anything was let go: engines that cannot keep their weights (False)."""
        return False

    async def load_lora_adapter(self, path: str | Path) -> int:
        """Serve base + the LoRA adapter in the peft folder ``path`` (replacing any adapter loaded
        before); returns the new policy version. Engines without LoRA support raise EngineError."""
        raise EngineError(f"{self.name}: this engine cannot load LoRA adapters; sync full weights instead")

    async def unload_lora_adapter(self) -> int:
        """Serve the base weights again; returns the new policy version."""
        raise EngineError(f"{self.name}: this engine cannot load LoRA adapters")

    @property
    @abc.abstractmethod
    def policy_version(self) -> int:
        """Version of the weights now served (0 at start, +1 per update)."""

    @abc.abstractmethod
    def stats(self) -> dict[str, Any]:
        """Counters for health pages and benchmarks (in flight, queued, cache usage...)."""

    async def healthy(self) -> bool:
        """Whether the engine can serve requests now (the router probes replicas it took out)."""
        return True

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet finished."""
        return int(self.stats().get("in_flight", 0))

    async def __aenter__(self) -> Engine:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


class EngineView(Engine):
    """An engine in front of another that passes everything through; subclasses override what they
    change (a concurrency gate, a record of what was sampled, a borrowed lifecycle)."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.name = inner.name

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None = None
    ) -> Completion:
        return await self.inner.generate(prompt_ids, params, session_id=session_id)

    async def end_session(self, session_id: str) -> None:
        await self.inner.end_session(session_id)

    async def update_weights(self, weights: Mapping[str, torch.Tensor] | str | Path) -> int:
        return await self.inner.update_weights(weights)

    async def release_weights(self) -> bool:
        return await self.inner.release_weights()

    async def load_lora_adapter(self, path: str | Path) -> int:
        return await self.inner.load_lora_adapter(path)

    async def unload_lora_adapter(self) -> int:
        return await self.inner.unload_lora_adapter()

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    def stats(self) -> dict[str, Any]:
        return self.inner.stats()


class BorrowedEngine(EngineView):
    """An engine lent to a component that would start and stop it (a server app's lifespan, a relay
    worker): its owner keeps the lifecycle, so start and stop do nothing here."""

    async def generate_streaming(
        self, prompt_ids: list[int], params: SamplingParams, on_tokens: TokenSink, session_id: str | None = None
    ) -> Completion:
        return await self.inner.generate_streaming(prompt_ids, params, on_tokens, session_id=session_id)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
