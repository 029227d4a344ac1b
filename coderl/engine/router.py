"""Several engine replicas behind one :class:`Engine`.

- A new session (or a request without one) goes to the live replica with the fewest requests in
  flight (ties: the one used least recently).
- A session keeps its replica while its sticky entry lives (an LRU of ``max_sessions`` entries), so
  the replica's prefix cache is reused turn after turn.
- A replica that fails with :class:`EngineUnavailableError` is taken out; the request is retried on
  another replica and the sessions that lived there move on their next turn. Taken-out replicas are
  probed every ``probe_interval_s`` and return when healthy.
- Weights: an update goes to every live replica; one that fails to take it is taken out, since it
  would serve the old policy under the new version. The router keeps the latest update of each kind
  (full weights, LoRA adapter) and replays them on a replica before the probe lets it back, so no
  replica that missed an update ever serves again.
- Versions: the router counts its own updates, and every completion's ``policy_version`` (and
  per-token versions) is given in that count, whatever each replica's own counter says (a replica
  that caught up with one replay has taken fewer updates than the others).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coderl.engine.base import Engine, TokenSink
from coderl.engine.params import SamplingParams
from coderl.engine.sticky import StickySessions
from coderl.errors import EngineUnavailableError
from coderl.types import Completion

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

Push = Callable[[int, Engine], Awaitable[int]]
"""One weight update for replica ``i`` (its index, the replica): returns the replica's new version."""

_KINDS = ("weights", "adapter")  # the order a catching-up replica replays them in


class Router(Engine):
    """Least-in-flight routing with sticky sessions and dead-replica removal."""

    name = "router"

    def __init__(
        self, replicas: list[Engine], max_sessions: int = 4096, probe_interval_s: float = 5.0
    ) -> None:
        if not replicas:
            raise ValueError("a router needs at least one replica")
        self.replicas = replicas
        self.max_sessions = max_sessions
        self.probe_interval_s = probe_interval_s
        self._in_flight = [0] * len(replicas)
        self._alive = [True] * len(replicas)
        self._last_used = [0] * len(replicas)
        self._clock = itertools.count(1)
        self._sticky: StickySessions[int] = StickySessions(max_sessions)
        self._probe: asyncio.Task[None] | None = None
        self.moved_sessions = 0
        self._version = 0  # weight updates through this router
        self._synced = [0] * len(replicas)  # the router version each replica serves
        self._offset = [0] * len(replicas)  # router version - the replica's own version
        self._pushes: dict[str, Push] = {}  # the latest update of each kind, replayed on a late replica

    async def start(self) -> None:
        results = await asyncio.gather(*(r.start() for r in self.replicas), return_exceptions=True)
        for i, res in enumerate(results):
            if isinstance(res, BaseException):
                log.warning("router: replica %s failed to start: %s", self.replicas[i].name, res)
                self._alive[i] = False
            else:
                self._offset[i] = self._synced[i] - self.replicas[i].policy_version
        if not any(self._alive):
            raise EngineUnavailableError(f"no replica started: {[str(r) for r in results]}")
        if self._probe is None:
            self._probe = asyncio.create_task(self._probe_loop())

    async def stop(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None
        await asyncio.gather(*(r.stop() for r in self.replicas), return_exceptions=True)

    @property
    def policy_version(self) -> int:
        return self._version

    def stats(self) -> dict[str, Any]:
        return {
            "in_flight": sum(self._in_flight),
            "replicas": [
                {"name": r.name, "alive": ok, "in_flight": n, "policy_version": v}
                for r, ok, n, v in zip(self.replicas, self._alive, self._in_flight, self._synced, strict=True)
            ],
            "sessions": len(self._sticky),
            "moved_sessions": self.moved_sessions,
            "policy_version": self.policy_version,
        }

    def replica_for(self, session_id: str | None) -> int:
        """The replica a request would go to now (sticky entry, else least in flight)."""
        pinned = self._sticky.get(session_id) if session_id is not None else None
        if pinned is not None and session_id is not None:
            if self._alive[pinned]:
                return pinned
            self._sticky.drop(session_id)
            self.moved_sessions += 1
        live = [i for i, ok in enumerate(self._alive) if ok]
        if not live:
            raise EngineUnavailableError(
                "every engine replica is down: " + ", ".join(r.name for r in self.replicas)
            )
        idx = min(live, key=lambda i: (self._in_flight[i], self._last_used[i]))
        if session_id is not None:
            self._sticky.pin(session_id, idx)
        return idx

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None = None
    ) -> Completion:
        return await self._dispatch(prompt_ids, params, session_id, None)

    async def generate_streaming(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        on_tokens: TokenSink,
        session_id: str | None = None,
    ) -> Completion:
        return await self._dispatch(prompt_ids, params, session_id, on_tokens)

    async def _dispatch(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None, sink: TokenSink | None
    ) -> Completion:
        """Serve on the session's replica (or the least busy); a replica that is unavailable is taken
        out and the request tried on another - unless it had already streamed tokens out."""
        last_error: Exception | None = None
        streamed = False

        def forward(ids: list[int], logprobs: list[float]) -> None:
            nonlocal streamed
            streamed = True
            assert sink is not None
            sink(ids, logprobs)

        for _ in range(len(self.replicas)):
            idx = self.replica_for(session_id)
            replica = self.replicas[idx]
            self._in_flight[idx] += 1
            self._last_used[idx] = next(self._clock)
            try:
                if sink is None:
                    completion = await replica.generate(prompt_ids, params, session_id=session_id)
                else:
                    completion = await replica.generate_streaming(
                        prompt_ids, params, forward, session_id=session_id
                    )
            except EngineUnavailableError as exc:
                last_error = exc
                self._take_out(idx, exc)
                if streamed:  # its tokens are out already: another replica would start over
                    raise
                continue
            finally:
                self._in_flight[idx] -= 1
            completion.replica = completion.replica or replica.name
            if offset := self._offset[idx]:
                completion.policy_version += offset
                completion.token_versions = [v + offset for v in completion.token_versions]
            return completion
        raise EngineUnavailableError(f"no replica could serve the request; last error: {last_error}")

    async def end_session(self, session_id: str) -> None:
        """Drop the session's sticky entry and tell its replica."""
        idx = self._sticky.drop(session_id)
        if idx is not None and self._alive[idx]:
            try:
                await self.replicas[idx].end_session(session_id)
            except EngineUnavailableError as exc:  # a replica that is gone holds nothing for it
                log.debug("ending session %s on %s: %s", session_id, self.replicas[idx].name, exc)

    async def update_weights(self, weights: Mapping[str, torch.Tensor] | str | Path) -> int:
        return await self.push("weights", lambda _, r: r.update_weights(weights))

    async def release_weights(self) -> bool:
        """Every live replica lets go of its weights; the next ``weights`` update brings them back."""
        live = [i for i, ok in enumerate(self._alive) if ok]
        results = await asyncio.gather(*(self.replicas[i].release_weights() for i in live), return_exceptions=True)
        for i, res in zip(live, results, strict=True):
            if isinstance(res, BaseException):  # it keeps its weights, or is gone: memory, not correctness
                log.warning("%s did not release its weights: %s", self.replicas[i].name, res)
        return any(res is True for res in results)

    async def load_lora_adapter(self, path: str | Path) -> int:
        return await self.push("adapter", lambda _, r: r.load_lora_adapter(path))

    async def unload_lora_adapter(self) -> int:
        return await self.push("adapter", lambda _, r: r.unload_lora_adapter())

    async def push(self, kind: str, update: Push) -> int:
        """Apply one weight update (``kind``: ``weights`` or ``adapter``) to every live replica; those
        that fail are taken out until a replay catches them up (module doc). The router's new version;
        raises only when no replica took it."""
        if kind not in _KINDS:
            raise ValueError(f"unknown weight update kind {kind!r}; valid: {', '.join(_KINDS)}")
        live = [i for i, ok in enumerate(self._alive) if ok]
        if not live:
            raise EngineUnavailableError("every engine replica is down: no replica can take the weights")
        results = await asyncio.gather(*(update(i, self.replicas[i]) for i in live), return_exceptions=True)
        if all(isinstance(r, BaseException) for r in results):
            failures = "; ".join(f"{self.replicas[i].name}: {r}" for i, r in zip(live, results, strict=True))
            first = results[0]
            raise EngineUnavailableError(f"no engine replica took the update: {failures}") from (
                first if isinstance(first, BaseException) else None
            )
        self._version += 1
        self._pushes[kind] = update
        for i, res in zip(live, results, strict=True):
            if isinstance(res, BaseException):
                self._take_out(i, res)
            else:
                self._synced[i] = self._version
                self._offset[i] = self._version - res
        return self._version

    async def _catch_up(self, idx: int) -> bool:
        """Replay the latest updates on a replica that missed some; whether it now serves them."""
        target = self._version
        replica = self.replicas[idx]
        version = replica.policy_version
        try:
            for kind in _KINDS:
                if (update := self._pushes.get(kind)) is not None:
                    version = await update(idx, replica)
        except Exception as exc:  # it stays out; the next probe tries again
            log.warning("router: replica %s could not catch up with the weights: %s", replica.name, exc)
            return False
        self._synced[idx] = target
        self._offset[idx] = target - version
        return target == self._version

    def _take_out(self, idx: int, exc: BaseException) -> None:
        if self._alive[idx]:
            log.warning("router: taking replica %s out: %s", self.replicas[idx].name, exc)
        self._alive[idx] = False
        self.moved_sessions += self._sticky.drop_where(lambda i: i == idx)

    async def _probe_loop(self) -> None:
        while True:
            await asyncio.sleep(self.probe_interval_s)
            for idx, replica in enumerate(self.replicas):
                if self._alive[idx] or not await replica.healthy():
                    continue
                if self._synced[idx] < self._version and not await self._catch_up(idx):
                    continue
                log.info("router: replica %s is back", replica.name)
                self._alive[idx] = True
