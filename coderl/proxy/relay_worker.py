"""Relay mode, worker side: serve an :class:`Engine` to a relay-mode proxy over an outgoing WebSocket.

The worker connects out to ``relay.url`` (so a GPU box behind NAT or a firewall can serve a proxy that
runs in a cluster), says hello, then answers the proxy's frames (:mod:`coderl.proxy.relay_protocol`):
``generate`` runs concurrently, at most ``relay.capacity`` at a time (more wait here); ``cancel``
aborts one; ``ping`` is answered with ``pong``; ``update_weights`` loads a checkpoint folder.

When the connection drops, or the proxy is silent for longer than the ``worker_timeout_s`` its welcome
named, the worker aborts what it was running (the proxy re-dispatches those calls) and reconnects with
exponential backoff and full jitter: the n-th retry in a row waits ``uniform(0, min(cap, base * 2**n))``
seconds; a connection that got as far as the proxy's welcome resets n. A refused token stops the
worker (retrying cannot fix it). :func:`serve_worker` adds the process's life: start the engine, serve,
and on SIGTERM / SIGINT drain (tell the proxy, finish what runs, up to ``relay.drain_timeout_s``) and
stop; a second signal stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import secrets
import signal
import socket
import time
from collections.abc import Awaitable, Callable

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from coderl import __version__
from coderl.engine.base import Engine
from coderl.errors import ConfigError, EngineError, EngineOverloadedError, EngineUnavailableError, ProxyError
from coderl.proxy.config import RelayWorkerConfig
from coderl.proxy.relay_protocol import (
    CLOSE_BAD_MESSAGE,
    CLOSE_GOING_AWAY,
    CLOSE_TIMEOUT,
    MAX_FRAME_BYTES,
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
    close_reason,
    encode,
    parse_proxy_message,
)
from coderl.types import Completion

log = logging.getLogger(__name__)

Send = Callable[[Tokens | Result | Error | Pong | Updated | Drain], Awaitable[None]]


class RelayAuthError(ProxyError, PermissionError):
    """The proxy refused this worker's connection (wrong token, or not a relay-mode /ws/worker)."""


def backoff_bound(attempt: int, base_s: float, cap_s: float) -> float:
    """The longest wait before retry ``attempt`` (0-based): ``min(cap_s, base_s * 2**attempt)``."""
    return min(cap_s, base_s * 2.0 ** min(attempt, 64))


def backoff_delay(attempt: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Full jitter: a uniform draw in [0, backoff_bound], so restarted workers do not reconnect in step."""
    return rng.uniform(0.0, backoff_bound(attempt, base_s, cap_s))


def default_worker_name() -> str:
    """``<hostname>-<pid>``, in the characters a worker name may hold."""
    return re.sub(r"[^A-Za-z0-9._:@-]", "-", socket.gethostname())[:100] + f"-{os.getpid()}"


class RelayWorker:
    """One engine, served to the proxy at ``cfg.url`` until :meth:`stop` (see the module docstring)."""

    def __init__(
        self, engine: Engine, cfg: RelayWorkerConfig, model: str = "", rng: random.Random | None = None
    ) -> None:
        if not cfg.token:
            raise ConfigError(
                "relay.token is empty; set it to the proxy's proxy.worker_token (e.g. CODERL_RELAY__TOKEN=...)"
            )
        self.engine = engine
        self.cfg = cfg
        self.token: str = cfg.token
        self.model = model
        self.name = cfg.name or default_worker_name()
        self.instance = secrets.token_hex(8)
        self.rng = rng or random.Random()
        self.stopping = asyncio.Event()
        self.connections = 0
        self.served = 0
        self._slots = asyncio.Semaphore(cfg.capacity)
        self._weights_tag: str | None = None

    def stop(self) -> None:
        """Drain and leave: the current connection finishes its requests, then run() returns."""
        self.stopping.set()

    async def run(self) -> None:
        """Connect, serve and reconnect until :meth:`stop`; raises :class:`RelayAuthError` if refused."""
        attempt = 0
        while not self.stopping.is_set():
            welcomed, why = await self._connect_once()
            if self.stopping.is_set():
                break
            if welcomed:
                attempt = 0
            bound = backoff_bound(attempt, self.cfg.backoff_base_s, self.cfg.backoff_cap_s)
            delay = backoff_delay(attempt, self.cfg.backoff_base_s, self.cfg.backoff_cap_s, self.rng)
            attempt += 1
            log.warning(
                "relay worker %s: %s; retry %d in %.3f s (backoff bound %.3f s)",
                self.name,
                why,
                attempt,
                delay,
                bound,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), delay)
        log.info("relay worker %s: stopped", self.name)

    async def _connect_once(self) -> tuple[bool, str]:
        """One connection, served until it ends: (whether the proxy welcomed us, why it ended)."""
        welcomed = False
        try:
            async with connect(
                self.cfg.url,
                additional_headers={"Authorization": f"Bearer {self.token}"},
                user_agent_header=f"coderl-relay-worker/{__version__}",
                open_timeout=self.cfg.connect_timeout_s,
                ping_interval=None,  # the relay protocol has its own heartbeats
                close_timeout=2,
                max_size=MAX_FRAME_BYTES,
            ) as ws:
                welcome = await self._handshake(ws)
                welcomed = True
                self.connections += 1
                return True, await self._serve(ws, welcome)
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status in (401, 403):
                raise RelayAuthError(
                    f"the proxy at {self.cfg.url} refused this worker (HTTP {status}): relay.token must equal the "
                    "proxy's proxy.worker_token, the proxy must run with proxy.mode=relay, and relay.url must end "
                    "in /ws/worker"
                ) from None
            return False, f"the proxy answered HTTP {status}"
        except InvalidURI as exc:
            raise ConfigError(f"relay.url {self.cfg.url!r} is not a valid WebSocket URL: {exc}") from None
        except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed, RelayProtocolError) as exc:
            return welcomed, f"{'connection lost' if welcomed else 'cannot connect'}: {_describe(exc)}"

    async def _handshake(self, ws: ClientConnection) -> Welcome:
        hello = Hello(
            name=self.name,
            instance=self.instance,
            capacity=self.cfg.capacity,
            model=self.model,
            policy_version=self.engine.policy_version,
            weights_tag=self._weights_tag,
        )
        await ws.send(encode(hello))
        frame = await asyncio.wait_for(ws.recv(), self.cfg.connect_timeout_s)
        welcome = parse_proxy_message(frame)
        if not isinstance(welcome, Welcome):
            raise RelayProtocolError(f"the proxy's first frame must be a welcome, not {welcome.type!r}")
        log.info(
            "relay worker %s: connected to %s (worker id %s)", self.name, self.cfg.url, welcome.worker_id
        )
        return welcome

    async def _serve(self, ws: ClientConnection, welcome: Welcome) -> str:
        """Answer the proxy's frames until the connection ends, the proxy falls silent or we stop."""
        tasks: dict[str, asyncio.Task[None]] = {}
        lock = asyncio.Lock()
        last_seen = time.monotonic()

        async def send(message: Tokens | Result | Error | Pong | Updated | Drain) -> None:
            async with lock:
                await ws.send(encode(message))

        async def read() -> str:
            nonlocal last_seen
            async for frame in ws:
                last_seen = time.monotonic()
                message = parse_proxy_message(frame)
                if isinstance(message, Generate):
                    tasks[message.id] = asyncio.create_task(self._generate(message, send, tasks))
                elif isinstance(message, Cancel):
                    task = tasks.pop(message.id, None)
                    if task is not None:
                        task.cancel()
                elif isinstance(message, Ping):
                    await send(Pong(t=message.t))
                elif isinstance(message, UpdateWeights):
                    tasks[message.id] = asyncio.create_task(self._update(message, send, tasks))
                else:
                    raise RelayProtocolError(f"unexpected {message.type!r} frame after the welcome")
            return f"the proxy closed the connection (code {ws.close_code}: {ws.close_reason or 'no reason'})"

        async def watchdog() -> str:
            while True:
                await asyncio.sleep(min(1.0, welcome.worker_timeout_s / 4))
                silent = time.monotonic() - last_seen
                if silent > welcome.worker_timeout_s:
                    return f"no message from the proxy for {silent:.1f} s"

        async def drain() -> str:
            await self.stopping.wait()
            await send(Drain())
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.cfg.drain_timeout_s
            while tasks and loop.time() < deadline:
                await asyncio.wait(list(tasks.values()), timeout=deadline - loop.time())
            left = f"; {len(tasks)} requests left to other workers" if tasks else ""
            return f"stopping after a drain{left}"

        jobs = [asyncio.create_task(job()) for job in (read, watchdog, drain)]
        try:
            done, _ = await asyncio.wait(jobs, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*jobs, *tasks.values()]:
                task.cancel()
            await asyncio.gather(*jobs, *tasks.values(), return_exceptions=True)
        finished = next(job for job in jobs if job in done)  # the reader's reason first: it is the cause
        exc = finished.exception()
        if exc is not None:
            code = CLOSE_BAD_MESSAGE if isinstance(exc, RelayProtocolError) else 1011
            why = f"connection lost: {_describe(exc)}" if code == 1011 else f"bad frame from the proxy: {exc}"
        else:
            why = finished.result()
            code = CLOSE_TIMEOUT if finished is jobs[1] else CLOSE_GOING_AWAY if finished is jobs[2] else 1000
        with contextlib.suppress(Exception):
            await ws.close(code, close_reason(why))
        return why

    async def _generate(self, message: Generate, send: Send, tasks: dict[str, asyncio.Task[None]]) -> None:
        try:
            async with self._slots:
                if message.stream:
                    completion = await self._stream(message, send)
                else:
                    completion = await self.engine.generate(
                        message.prompt_ids, message.params, message.session_id
                    )
            reply: Result | Error = Result.of(message.id, completion)
            self.served += 1
        except Exception as exc:
            reply = _error_reply(message.id, exc)
        finally:
            tasks.pop(message.id, None)
        with contextlib.suppress(Exception):  # the connection is gone: the proxy re-dispatches the call
            await send(reply)

    async def _stream(self, message: Generate, send: Send) -> Completion:
        """Generate, sending the tokens sampled so far as one ``tokens`` frame whenever the connection is
        free (so a slow link gets fewer, larger frames), all of them before the result."""
        pending: tuple[list[int], list[float]] = ([], [])
        ready = asyncio.Event()
        done = False

        def collect(ids: list[int], logprobs: list[float]) -> None:
            pending[0].extend(ids)
            pending[1].extend(logprobs)
            ready.set()

        async def pump() -> None:
            while True:
                await ready.wait()
                ready.clear()
                if pending[0]:
                    ids, logprobs = pending[0][:], pending[1][:]
                    del pending[0][:], pending[1][:]
                    await send(Tokens(id=message.id, token_ids=ids, logprobs=logprobs))
                if done:
                    return

        sender = asyncio.create_task(pump())
        try:
            completion = await self.engine.generate_streaming(
                message.prompt_ids, message.params, collect, message.session_id
            )
            done = True
            ready.set()
            await sender  # every streamed token is sent before the result
        finally:
            sender.cancel()
        return completion

    async def _update(self, message: UpdateWeights, send: Send, tasks: dict[str, asyncio.Task[None]]) -> None:
        try:
            version = await self.engine.update_weights(message.path)
            self._weights_tag = message.tag
            reply: Updated | Error = Updated(id=message.id, policy_version=version)
            log.info("relay worker %s: loaded %s (policy version %d)", self.name, message.path, version)
        except Exception as exc:
            reply = _error_reply(message.id, exc)
        finally:
            tasks.pop(message.id, None)
        with contextlib.suppress(Exception):
            await send(reply)


def _error_reply(request_id: str, exc: Exception) -> Error:
    """The error frame for a failed request: the status tells the proxy whether to try another worker."""
    if isinstance(exc, EngineOverloadedError):
        status = 429
    elif isinstance(exc, EngineUnavailableError):
        status = 503
    elif isinstance(exc, EngineError):
        status = 400
    else:
        log.exception("relay worker: request %s failed", request_id, exc_info=exc)
        status = 500
    return Error(id=request_id, status=status, message=f"{type(exc).__name__}: {exc}"[:4000])


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionClosed):
        frame = exc.rcvd
        if frame is None:
            return "the connection dropped"
        return f"closed by the proxy (code {frame.code}: {frame.reason or 'no reason'})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def serve_worker(engine: Engine, cfg: RelayWorkerConfig, model: str = "") -> None:
    """The worker process: start ``engine``, serve it to the proxy until SIGTERM / SIGINT, stop it."""
    worker = RelayWorker(engine, cfg, model)
    loop = asyncio.get_running_loop()
    await engine.start()
    running = asyncio.create_task(worker.run())

    def on_signal(signum: int) -> None:
        if worker.stopping.is_set():
            log.warning("relay worker %s: second %s, leaving now", worker.name, signal.Signals(signum).name)
            running.cancel()
            return
        log.warning(
            "relay worker %s: %s, draining (up to relay.drain_timeout_s=%g s; signal again to leave now)",
            worker.name,
            signal.Signals(signum).name,
            cfg.drain_timeout_s,
        )
        worker.stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await running
    except asyncio.CancelledError:
        if not worker.stopping.is_set():
            raise
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await engine.stop()
