"""Relay mode, proxy side: :class:`RelayEngine`, an :class:`Engine` whose replicas are remote workers.

Workers connect out to the proxy (:mod:`coderl.proxy.relay_api` carries the WebSocket; this module
never touches a socket: each worker is a :class:`WorkerLink` with an outbox of frames to send). The
proxy's service calls ``generate`` as on any engine; each call goes to one worker:

- a session keeps its worker while that worker stays connected (an LRU of ``max_sticky_sessions``
  entries, keyed by worker name, so a worker that reconnects finds its sessions again); a new session,
  or one whose worker is gone, goes to the connected worker with the lowest in-flight / capacity
  (ties: the one used least recently);
- a call whose worker disconnects, misses heartbeats or answers with a 5xx error is sent to another
  worker (at most ``redispatch_limit`` times). Each attempt has its own id, so a late answer from a
  lost worker matches nothing and is dropped: the proxy records only the completion it returns;
- with no worker connected a call waits up to ``dispatch_timeout_s`` for one, then fails with
  :class:`EngineUnavailableError` (the proxy answers 503 with Retry-After);
- cancelling a call sends ``cancel`` to its worker;
- ``generate_streaming`` asks the worker for ``tokens`` frames and hands them to the caller's sink as
  they arrive; once tokens are out, a lost worker fails the call (another worker would start over).

``update_weights(path)`` makes every connected worker load that checkpoint folder; a worker that
connects later with other weights loads the newest path before it gets any call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coderl.engine.base import Engine, TokenSink
from coderl.engine.params import SamplingParams
from coderl.engine.sticky import StickySessions
from coderl.errors import ConfigError, EngineError, EngineOverloadedError, EngineUnavailableError
from coderl.proxy.config import ProxyConfig
from coderl.proxy.relay_protocol import (
    CLOSE_BAD_MESSAGE,
    CLOSE_GOING_AWAY,
    CLOSE_NAME_TAKEN,
    CLOSE_REPLACED,
    CLOSE_TIMEOUT,
    PROTOCOL_VERSION,
    Cancel,
    Drain,
    Error,
    Generate,
    Hello,
    Ping,
    Pong,
    RelayProtocolError,
    Result,
    Tokens,
    Updated,
    UpdateWeights,
    Welcome,
    encode,
    parse_worker_message,
)
from coderl.types import Completion

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


class RelayRefused(Exception):
    """A worker's hello was refused; ``code`` and ``reason`` go into the WebSocket close frame."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class Lost:
    """The answer to a request whose worker went away before answering."""

    reason: str


Answer = Result | Error | Updated | Lost


@dataclass(eq=False)
class WorkerLink:
    """One connected worker, as the hub sees it."""

    id: str
    hello: Hello
    peer: str
    outbox: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    waiting: dict[str, asyncio.Future[Answer]] = field(default_factory=dict)
    """Requests sent to this worker and not answered yet (generate and update_weights), by id."""
    sinks: dict[str, TokenSink] = field(default_factory=dict)
    """Where the ``tokens`` frames of streamed requests go, by id."""
    connected_at: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.monotonic)
    last_used: int = 0
    served: int = 0
    policy_version: int = 0
    ready: bool = True
    """False while the worker loads the newest weights after connecting."""
    draining: bool = False
    rtt_s: float | None = None
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    close_code: int = 1000
    close_reason: str = ""

    @property
    def name(self) -> str:
        return self.hello.name

    @property
    def load(self) -> float:
        return len(self.waiting) / self.hello.capacity

    def send(self, message: Welcome | Generate | Cancel | Ping | UpdateWeights) -> None:
        if not self.gone.is_set():
            self.outbox.put_nowait(encode(message))

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "peer": self.peer,
            "model": self.hello.model,
            "capacity": self.hello.capacity,
            "in_flight": len(self.waiting),
            "served": self.served,
            "policy_version": self.policy_version,
            "ready": self.ready,
            "draining": self.draining,
            "connected_s": round(time.time() - self.connected_at, 3),
            "last_seen_s": round(time.monotonic() - self.last_seen, 3),
            "rtt_ms": None if self.rtt_s is None else round(self.rtt_s * 1000, 3),
        }


class RelayEngine(Engine):
    """An engine served by the workers connected to a relay-mode proxy (see the module docstring)."""

    name = "relay"

    def __init__(self, cfg: ProxyConfig, model: str = "") -> None:
        if not cfg.worker_token:
            raise ConfigError(
                "proxy.mode=relay needs proxy.worker_token, the secret workers present on /ws/worker "
                "(set it, e.g. CODERL_PROXY__WORKER_TOKEN=$(openssl rand -hex 24), and give workers the "
                "same value as relay.token)"
            )
        if cfg.worker_timeout_s <= cfg.heartbeat_s:
            raise ConfigError(
                f"proxy.worker_timeout_s ({cfg.worker_timeout_s:g}) must be longer than proxy.heartbeat_s "
                f"({cfg.heartbeat_s:g}), e.g. 3 x heartbeat_s, or every worker would be dropped between pings"
            )
        self.cfg = cfg
        self.worker_token: str = cfg.worker_token
        self.model = model
        self._hub_id = secrets.token_hex(4)
        self._links: dict[str, WorkerLink] = {}  # by worker name
        self._sticky: StickySessions[str] = StickySessions(cfg.max_sticky_sessions)  # -> worker name
        self._ids = itertools.count(1)
        self._clock = itertools.count(1)
        self._joined = asyncio.Event()
        self._weights: tuple[str, str] | None = None  # (path, tag) of the newest update_weights
        self._last_version = 0
        self._heartbeat: asyncio.Task[None] | None = None
        self._catch_up: set[asyncio.Task[None]] = set()
        self.counters = {
            "dispatched": 0,
            "redispatched": 0,
            "lost_workers": 0,
            "left_workers": 0,
            "moved_sessions": 0,
            "late_answers": 0,
        }

    # ------------------------------------------------------------------ engine contract
    async def start(self) -> None:
        if self._heartbeat is None:
            self._heartbeat = asyncio.create_task(self._heartbeat_loop())

    async def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
        for link in list(self._links.values()):
            self.drop(link, "the proxy is shutting down", CLOSE_GOING_AWAY, lost=False)

    @property
    def policy_version(self) -> int:
        versions = [link.policy_version for link in self._links.values()]
        return max(versions) if versions else self._last_version

    def stats(self) -> dict[str, Any]:
        links = list(self._links.values())
        return {
            "mode": "relay",
            "in_flight": sum(len(link.waiting) for link in links),
            "workers": [link.public() for link in links],
            "sessions": len(self._sticky),
            "policy_version": self.policy_version,
            **self.counters,
        }

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
        tried: set[str] = set()
        last = "no attempt yet"
        streamed: list[int] = []

        def forward(ids: list[int], logprobs: list[float]) -> None:
            streamed.extend(ids)
            assert sink is not None
            sink(ids, logprobs)

        for attempt in range(self.cfg.redispatch_limit + 1):
            link = await self._pick(session_id, tried, last)
            request_id = self._new_id()
            if sink is not None:
                link.sinks[request_id] = forward
            try:
                answer = await self._ask(
                    link,
                    request_id,
                    Generate(
                        id=request_id,
                        prompt_ids=prompt_ids,
                        params=params,
                        session_id=session_id,
                        stream=sink is not None,
                    ),
                )
            finally:
                link.sinks.pop(request_id, None)
            if isinstance(answer, Result):
                if streamed and streamed != answer.token_ids[: len(streamed)]:
                    self.drop(
                        link,
                        f"its result for {request_id} differs from the tokens it streamed",
                        CLOSE_BAD_MESSAGE,
                    )
                    raise EngineUnavailableError(
                        f"relay worker {link.name!r} answered other tokens than it streamed; it was dropped"
                    )
                link.served += 1
                link.policy_version = answer.policy_version
                self._last_version = max(self._last_version, answer.policy_version)
                return answer.completion(replica=link.name)
            if isinstance(answer, Error) and answer.status < 500:
                error = EngineOverloadedError if answer.status == 429 else EngineError
                raise error(f"relay worker {link.name!r}: {answer.message}")
            if isinstance(answer, Updated):  # a worker that mixes up its answers is not trusted again
                self.drop(link, f"answered the call {request_id} with 'updated'", CLOSE_BAD_MESSAGE)
                why = "answered with 'updated'"
            else:
                why = (
                    answer.reason if isinstance(answer, Lost) else f"error {answer.status}: {answer.message}"
                )
            last = f"worker {link.name!r}: {why}"
            if streamed:  # its tokens are out already: another worker would start over
                raise EngineUnavailableError(
                    f"the call lost its worker after streaming {len(streamed)} tokens; {last}"
                )
            tried.add(link.id)
            if attempt < self.cfg.redispatch_limit:
                self.counters["redispatched"] += 1
                log.info("relay: re-dispatching a call of session %s (%s)", session_id, last)
        raise EngineUnavailableError(
            f"the call lost its worker {self.cfg.redispatch_limit + 1} times (proxy.redispatch_limit="
            f"{self.cfg.redispatch_limit}); last: {last}"
        )

    async def update_weights(self, weights: Mapping[str, torch.Tensor] | str | Path) -> int:
        if not isinstance(weights, (str, Path)):
            raise EngineError(
                "relay workers load weights from disk: save the state dict as a checkpoint folder that every "
                "worker can read and pass its path"
            )
        path, tag = str(weights), f"{self._hub_id}:{next(self._ids)}"
        links = [link for link in self._links.values() if link.ready]
        if not links:
            log.warning("relay: no worker connected; workers that connect will load %s first", path)
            self._weights = (path, tag)
            return self.policy_version
        results = await asyncio.gather(
            *(self._load_weights(link, path, tag) for link in links), return_exceptions=True
        )
        versions = [r for r in results if isinstance(r, int)]
        if not versions:  # nobody could load it: keep serving (and catching up to) the previous weights
            failed = "; ".join(f"{link.name}: {r}" for link, r in zip(links, results, strict=True))
            raise EngineError(f"no relay worker loaded {path}: {failed}")
        self._weights = (path, tag)
        for link, r in zip(links, results, strict=True):
            if isinstance(r, BaseException):  # stale weights must not serve; it loads them on reconnect
                self.drop(link, f"could not load {path}: {r}")
        return max(versions)

    # ------------------------------------------------------------------ the transport's side
    def connect(self, hello: Hello, peer: str) -> WorkerLink:
        """Register a worker whose hello was read; its outbox starts with the welcome."""
        if hello.protocol != PROTOCOL_VERSION:
            raise RelayRefused(
                CLOSE_BAD_MESSAGE,
                f"protocol {hello.protocol} is not supported; this proxy speaks {PROTOCOL_VERSION}",
            )
        old = self._links.get(hello.name)
        if old is not None:
            if old.hello.instance != hello.instance:
                raise RelayRefused(
                    CLOSE_NAME_TAKEN,
                    f"a worker named {hello.name!r} is already connected from {old.peer}; give each worker "
                    "its own relay.name",
                )
            self.drop(old, "the same worker connected again", CLOSE_REPLACED)
        if self.model and hello.model and hello.model != self.model:
            log.warning(
                "relay: worker %s serves %r but the proxy renders for %r", hello.name, hello.model, self.model
            )
        link = WorkerLink(id=f"w{next(self._ids)}-{secrets.token_hex(3)}", hello=hello, peer=peer)
        link.policy_version = hello.policy_version
        link.send(
            Welcome(
                worker_id=link.id,
                heartbeat_s=self.cfg.heartbeat_s,
                worker_timeout_s=self.cfg.worker_timeout_s,
            )
        )
        self._links[hello.name] = link
        log.info("relay: worker %s connected from %s (capacity %d)", hello.name, peer, hello.capacity)
        if self._weights is not None and hello.weights_tag != self._weights[1]:
            link.ready = False
            task = asyncio.create_task(self._catch_up_weights(link, *self._weights))
            self._catch_up.add(task)
            task.add_done_callback(self._catch_up.discard)
        else:
            self._wake()
        return link

    def receive(self, link: WorkerLink, frame: str | bytes) -> None:
        """Handle one frame from a worker; raises RelayProtocolError for a malformed one."""
        message = parse_worker_message(frame)
        link.last_seen = time.monotonic()
        if isinstance(message, Pong):
            link.rtt_s = max(0.0, time.monotonic() - message.t)
        elif isinstance(message, Drain):
            link.draining = True
            log.info("relay: worker %s is draining", link.name)
        elif isinstance(message, Hello):
            raise RelayProtocolError(f"worker {link.name!r} sent a second hello")
        elif isinstance(message, Tokens):
            sink = link.sinks.get(message.id)
            future = link.waiting.get(message.id)
            if future is None or future.done():  # cancelled, or re-dispatched after a timeout
                self.counters["late_answers"] += 1
            elif sink is None:
                raise RelayProtocolError(
                    f"worker {link.name!r} streamed tokens of {message.id}, which is not streamed"
                )
            else:
                sink(list(message.token_ids), list(message.logprobs))
        else:
            future = link.waiting.get(message.id)
            if future is None or future.done():  # cancelled, or re-dispatched after a timeout
                self.counters["late_answers"] += 1
                log.debug(
                    "relay: dropping an answer for %s from %s: nobody waits for it", message.id, link.name
                )
                return
            future.set_result(message)

    def drop(self, link: WorkerLink, reason: str, code: int = 1000, lost: bool = True) -> None:
        """Forget a worker (idempotent): its waiting requests resolve to :class:`Lost`."""
        if link.gone.is_set():
            return
        link.gone.set()
        link.close_code, link.close_reason = code, reason
        if self._links.get(link.name) is link:
            del self._links[link.name]
        unexpected = lost and not (link.draining and not link.waiting)
        self.counters["lost_workers" if unexpected else "left_workers"] += 1
        log.log(
            logging.WARNING if unexpected else logging.INFO,
            "relay: worker %s %s: %s (%d requests in flight)",
            link.name,
            "lost" if unexpected else "left",
            reason,
            len(link.waiting),
        )
        for future in link.waiting.values():
            if not future.done():
                future.set_result(Lost(reason))

    # ------------------------------------------------------------------ internals
    def _new_id(self) -> str:
        return f"r{next(self._ids)}"

    def _wake(self) -> None:
        self._joined.set()
        self._joined = asyncio.Event()

    def _live(self) -> list[WorkerLink]:
        return [link for link in self._links.values() if link.ready and not link.draining]

    async def _pick(self, session_id: str | None, tried: set[str], last: str) -> WorkerLink:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.cfg.dispatch_timeout_s
        while not self._live():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise EngineUnavailableError(
                    f"no relay worker connected within proxy.dispatch_timeout_s={self.cfg.dispatch_timeout_s:g} s; "
                    "start one with 'coderl proxy worker relay.url=ws://<proxy>/ws/worker relay.token=...'"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._joined.wait(), remaining)
        candidates = [link for link in self._live() if link.id not in tried]
        if not candidates:
            raise EngineUnavailableError(f"every connected relay worker failed this call; last: {last}")
        link = self._sticky_link(session_id, candidates)
        link.last_used = next(self._clock)
        return link

    async def end_session(self, session_id: str) -> None:
        """Forget the session's worker (its next call, if any, goes to the least busy one)."""
        self._sticky.drop(session_id)

    def _sticky_link(self, session_id: str | None, candidates: list[WorkerLink]) -> WorkerLink:
        name = self._sticky.get(session_id) if session_id is not None else None
        if name is not None:
            for link in candidates:
                if link.name == name:
                    return link
            self.counters["moved_sessions"] += 1
        link = min(candidates, key=lambda c: (c.load, c.last_used))
        if session_id is not None:
            self._sticky.pin(session_id, link.name)
        return link

    async def _ask(self, link: WorkerLink, request_id: str, message: Generate | UpdateWeights) -> Answer:
        """Send one request to ``link`` and wait for its answer (or its loss)."""
        if link.gone.is_set():
            return Lost(link.close_reason)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        link.waiting[request_id] = future
        link.send(message)
        if isinstance(message, Generate):
            self.counters["dispatched"] += 1
        try:
            return await future
        except asyncio.CancelledError:
            if future.cancelled():  # no answer came: the worker may stop working on it
                link.send(Cancel(id=request_id))
            raise
        finally:
            link.waiting.pop(request_id, None)

    async def _load_weights(self, link: WorkerLink, path: str, tag: str) -> int:
        request_id = self._new_id()
        answer = await self._ask(link, request_id, UpdateWeights(id=request_id, path=path, tag=tag))
        if isinstance(answer, Updated):
            link.policy_version = answer.policy_version
            self._last_version = max(self._last_version, answer.policy_version)
            return answer.policy_version
        if isinstance(answer, Lost):
            raise EngineUnavailableError(
                f"worker {link.name!r} left during the weight update: {answer.reason}"
            )
        why = answer.message if isinstance(answer, Error) else f"it answered with {answer.type!r}"
        raise EngineError(f"worker {link.name!r} could not load {path}: {why}")

    async def _catch_up_weights(self, link: WorkerLink, path: str, tag: str) -> None:
        log.info("relay: worker %s loads the newest weights %s before serving", link.name, path)
        try:
            await self._load_weights(link, path, tag)
        except EngineError as exc:
            self.drop(link, f"could not load the newest weights: {exc}")
            return
        link.ready = True
        self._wake()

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.heartbeat_s)
            now = time.monotonic()
            for link in list(self._links.values()):
                silent = now - link.last_seen
                if silent > self.cfg.worker_timeout_s:
                    self.drop(
                        link,
                        f"no message for {silent:.1f} s (proxy.worker_timeout_s={self.cfg.worker_timeout_s:g})",
                        CLOSE_TIMEOUT,
                    )
                else:
                    link.send(Ping(t=now))
