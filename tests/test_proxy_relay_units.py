"""Relay mode without sockets: the wire protocol's validation, the reconnect backoff schedule, and the
proxy-side hub (:class:`RelayEngine`) driven by in-process fake workers that read its outboxes."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from coderl.engine.params import SamplingParams
from coderl.errors import ConfigError, EngineError, EngineOverloadedError, EngineUnavailableError
from coderl.proxy.app import create_app
from coderl.proxy.config import ProxyConfig, RelayWorkerConfig
from coderl.proxy.relay import RelayEngine, RelayRefused, WorkerLink
from coderl.proxy.relay_protocol import (
    CLOSE_NAME_TAKEN,
    CLOSE_REPLACED,
    CLOSE_TIMEOUT,
    Error,
    Generate,
    Hello,
    Pong,
    RelayProtocolError,
    Result,
    Tokens,
    Updated,
    encode,
    parse_proxy_message,
    parse_worker_message,
)
from coderl.proxy.relay_worker import backoff_bound, backoff_delay

P = SamplingParams(max_tokens=4)

# ---------------------------------------------------------------------------- protocol


def test_valid_frames_round_trip() -> None:
    hello = Hello(name="gpu-1", instance="abc", capacity=8, model="m", policy_version=2)
    assert parse_worker_message(encode(hello)) == hello
    result = Result(id="r1", token_ids=[5, 6], logprobs=[-0.5, -1.0], finish_reason="stop", policy_version=3)
    assert parse_worker_message(encode(result)) == result
    assert result.completion("gpu-1").replica == "gpu-1"
    generate = Generate(id="r2", prompt_ids=[1, 2], params=P, session_id="s1", stream=True)
    assert parse_proxy_message(encode(generate)) == generate
    tokens = Tokens(id="r2", token_ids=[7], logprobs=[-0.25])
    assert parse_worker_message(encode(tokens)) == tokens


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        ("not json", "Invalid JSON"),
        (b'{"type": "pong", "t": 1}', "binary frame"),
        ("[1, 2]", "object"),
        ('{"type": "launch_missiles"}', "launch_missiles"),
        ('{"t": 1.0}', "type"),
        ('{"type": "hello", "name": "w1", "capacity": 2}', "instance"),
        ('{"type": "hello", "name": "w 1", "instance": "i", "capacity": 2}', "name"),
        ('{"type": "hello", "name": "w1", "instance": "i", "capacity": 0}', "capacity"),
        ('{"type": "pong", "t": 1.0, "extra": true}', "extra"),
        (
            '{"type": "result", "id": "r", "token_ids": [1, 2], "logprobs": [-1.0], "finish_reason": "stop", '
            '"policy_version": 0}',
            "2 token_ids but 1 logprobs",
        ),
        (
            '{"type": "result", "id": "r", "token_ids": [], "logprobs": [], "finish_reason": "tired", '
            '"policy_version": 0}',
            "finish_reason",
        ),
        (
            '{"type": "result", "id": "r", "token_ids": ["x"], "logprobs": [0], "finish_reason": "stop", '
            '"policy_version": 0}',
            "token_ids",
        ),
        ('{"type": "error", "id": "r", "status": 200, "message": "fine"}', "status"),
        ('{"type": "tokens", "id": "r", "token_ids": [], "logprobs": []}', "token_ids"),
        ('{"type": "tokens", "id": "r", "token_ids": [1], "logprobs": []}', "1 token_ids but 0 logprobs"),
        ('{"type": "generate", "id": "r", "prompt_ids": [1], "params": {}}', "generate"),  # proxy-only type
    ],
)
def test_malformed_worker_frames_are_rejected_with_the_reason(frame: str | bytes, expected: str) -> None:
    with pytest.raises(RelayProtocolError) as err:
        parse_worker_message(frame)
    assert expected in str(err.value)


def test_malformed_proxy_frames_are_rejected() -> None:
    for frame in (
        '{"type": "generate", "id": "r", "prompt_ids": [], "params": {}}',
        '{"type": "result"}',
        "{",
    ):
        with pytest.raises(RelayProtocolError):
            parse_proxy_message(frame)


# ---------------------------------------------------------------------------- backoff


def test_backoff_bound_doubles_up_to_the_cap() -> None:
    assert [backoff_bound(n, 0.5, 4.0) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff_bound(10_000, 0.5, 30.0) == 30.0  # no overflow after a long outage


def test_backoff_delay_has_full_jitter() -> None:
    delays = [backoff_delay(n, 0.5, 4.0, random.Random(7)) for n in range(6)]
    assert delays == [backoff_delay(n, 0.5, 4.0, random.Random(7)) for n in range(6)]  # seeded
    for n, d in enumerate(delays):
        assert 0.0 <= d <= backoff_bound(n, 0.5, 4.0)
    rng = random.Random(1)
    many = [backoff_delay(3, 0.5, 4.0, rng) for _ in range(500)]
    assert min(many) < 0.5 and max(many) > 3.5  # spread over [0, 4], not pinned to the bound
    assert abs(sum(many) / len(many) - 2.0) < 0.25  # uniform: mean = bound / 2


def test_worker_config_rejects_an_http_url() -> None:
    with pytest.raises(ValueError, match="ws://"):
        RelayWorkerConfig(url="http://proxy:8100/ws/worker")


# ---------------------------------------------------------------------------- the hub


def relay_cfg(**kw: Any) -> ProxyConfig:
    base: dict[str, Any] = {
        "mode": "relay",
        "worker_token": "wt",
        "heartbeat_s": 0.05,
        "worker_timeout_s": 0.5,
        "dispatch_timeout_s": 0.3,
    }
    return ProxyConfig(**(base | kw))


Behaviour = Callable[["FakeWorker", Any], Any]


WORKER_TASKS: list[asyncio.Task[None]] = []  # cancelled when their hub closes, never left to the GC


class FakeWorker:
    """Reads one link's outbox like a worker would: answers pings; ``behaviour`` decides the rest
    (default: answer each generate at once with the worker's name encoded as token ids)."""

    def __init__(self, engine: RelayEngine, name: str, capacity: int = 4, instance: str | None = None,
                 weights_tag: str | None = None) -> None:  # fmt: skip
        self.engine = engine
        self.link: WorkerLink = engine.connect(
            Hello(name=name, instance=instance or name, capacity=capacity, weights_tag=weights_tag), "test"
        )
        self.frames: list[Any] = []
        self.held: list[Generate] = []
        self.hold = False
        self.answer_pings = True
        self.update_fails = False
        self.token = int(name[-1])
        self.task = asyncio.create_task(self._run())
        WORKER_TASKS.append(self.task)

    def reply(self, message: Any) -> None:
        self.engine.receive(self.link, encode(message))

    def result(self, request: Generate) -> Result:
        return Result(
            id=request.id, token_ids=[self.token], logprobs=[-0.1], finish_reason="stop", policy_version=0
        )

    async def _run(self) -> None:
        while True:
            message = parse_proxy_message(await self.link.outbox.get())
            self.frames.append(message)
            if message.type == "ping" and self.answer_pings:
                self.reply(Pong(t=message.t))
            elif message.type == "generate":
                if self.hold:
                    self.held.append(message)
                else:
                    self.reply(self.result(message))
            elif message.type == "update_weights" and self.update_fails:
                self.reply(Error(id=message.id, status=400, message=f"no weights at {message.path}"))
            elif message.type == "update_weights":
                self.reply(Updated(id=message.id, policy_version=7))

    def sent(self, kind: str) -> list[Any]:
        return [f for f in self.frames if f.type == kind]


@contextlib.asynccontextmanager
async def hub(**kw: Any) -> AsyncIterator[RelayEngine]:
    engine = RelayEngine(relay_cfg(**kw))
    await engine.start()
    try:
        yield engine
    finally:
        await engine.stop()
        tasks = WORKER_TASKS[:]
        WORKER_TASKS.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def until(condition: Callable[[], bool], timeout_s: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def test_relay_config_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"proxy\.worker_token"):
        RelayEngine(ProxyConfig(mode="relay"))
    with pytest.raises(ConfigError, match=r"proxy\.mode=engine does not fit the engine 'relay'"):
        create_app(ProxyConfig(db=tmp_path / "p.db"), RelayEngine(relay_cfg()), None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"proxy\.worker_timeout_s"):
        RelayEngine(relay_cfg(heartbeat_s=5, worker_timeout_s=5))


async def test_sessions_stick_and_new_sessions_spread() -> None:
    async with hub() as engine:
        workers = [FakeWorker(engine, f"w{i}") for i in (1, 2, 3)]
        served: dict[str, set[int]] = {}
        for turn in range(3):
            for s in range(9):
                c = await engine.generate([1, 2, turn], P, session_id=f"s{s}")
                served.setdefault(f"s{s}", set()).add(c.token_ids[0])
                assert c.replica == f"w{c.token_ids[0]}"
        assert all(len(w) == 1 for w in served.values())  # each session on one worker
        per_worker = [sum(1 for w in served.values() if w == {i}) for i in (1, 2, 3)]
        assert per_worker == [3, 3, 3]  # new sessions go round the idle workers
        assert engine.stats()["dispatched"] == 27 and engine.stats()["sessions"] == 9
        for w in workers:
            w.task.cancel()


async def test_least_in_flight_relative_to_capacity() -> None:
    async with hub() as engine:
        big, small = FakeWorker(engine, "w1", capacity=8), FakeWorker(engine, "w2", capacity=2)
        big.hold = small.hold = True
        calls = [asyncio.create_task(engine.generate([1], P)) for _ in range(10)]
        await until(lambda: len(big.held) + len(small.held) == 10)
        assert (len(big.held), len(small.held)) == (8, 2)
        for w in (big, small):
            for g in w.held:
                w.reply(w.result(g))
        await asyncio.gather(*calls)


async def test_a_lost_worker_s_calls_move_and_its_late_answer_is_dropped() -> None:
    async with hub() as engine:
        lost, _ = FakeWorker(engine, "w1"), FakeWorker(engine, "w2")
        assert (await engine.generate([1], P, session_id="keep")).replica == "w1"  # ties: first connected
        lost.hold = True
        calls = [asyncio.create_task(engine.generate([1, i], P, session_id=f"s{i}")) for i in range(6)]
        await until(lambda: engine.stats()["dispatched"] == 7)
        held = len(lost.held)
        assert held >= 2
        engine.drop(lost.link, "test: connection dropped")
        completions = await asyncio.gather(*calls)
        assert [c.replica for c in completions] == ["w2"] * 6  # every call finished, on the survivor
        lost.reply(lost.result(lost.held[0]))  # the lost worker answers late: nobody waits for it
        assert (await engine.generate([1, 2], P, session_id="keep")).replica == "w2"
        stats = engine.stats()
        assert stats["redispatched"] == held and stats["lost_workers"] == 1 and stats["late_answers"] == 1
        assert stats["moved_sessions"] == 1 + held  # "keep" and the sessions that were on w1
        assert [w["name"] for w in stats["workers"]] == ["w2"] and stats["workers"][0]["served"] == 7


async def test_streamed_tokens_reach_the_sink_and_a_worker_lost_after_streaming_fails_the_call() -> None:
    async with hub() as engine:
        w1, w2 = FakeWorker(engine, "w1"), FakeWorker(engine, "w2")
        w1.hold = w2.hold = True
        got: list[tuple[list[int], list[float]]] = []
        call = asyncio.create_task(engine.generate_streaming([1], P, lambda i, lp: got.append((i, lp)), "s"))
        await until(lambda: len(w1.held) == 1)
        (request,) = w1.held
        assert request.stream
        w1.reply(Tokens(id=request.id, token_ids=[5, 6], logprobs=[-0.5, -0.6]))
        w1.reply(Tokens(id=request.id, token_ids=[7], logprobs=[-0.7]))
        await until(lambda: len(got) == 2)  # handed on as they arrived, before the result
        assert got == [([5, 6], [-0.5, -0.6]), ([7], [-0.7])] and not call.done()
        w1.reply(Result(id=request.id, token_ids=[5, 6, 7], logprobs=[-0.5, -0.6, -0.7], finish_reason="stop",
                        policy_version=0))  # fmt: skip
        assert (await call).token_ids == [5, 6, 7]

        call = asyncio.create_task(engine.generate_streaming([1], P, lambda i, lp: got.append((i, lp)), "s"))
        await until(lambda: len(w1.held) == 2)
        w1.reply(Tokens(id=w1.held[1].id, token_ids=[8], logprobs=[-0.8]))
        await until(lambda: len(got) == 3)
        engine.drop(w1.link, "test: connection dropped")
        with pytest.raises(EngineUnavailableError, match="after streaming 1 tokens"):
            await call  # the client has seen a token: another worker would start over
        assert w2.held == [] and engine.stats()["redispatched"] == 0

        plain = asyncio.create_task(engine.generate([1], P, "t"))
        await until(lambda: len(w2.held) == 1)
        assert not w2.held[0].stream
        with pytest.raises(RelayProtocolError, match="which is not streamed"):
            w2.reply(Tokens(id=w2.held[0].id, token_ids=[1], logprobs=[-1.0]))
        w2.reply(w2.result(w2.held[0]))
        await plain
        for w in (w1, w2):
            w.task.cancel()


async def test_a_result_that_contradicts_the_streamed_tokens_drops_the_worker() -> None:
    async with hub() as engine:
        w1 = FakeWorker(engine, "w1")
        w1.hold = True
        call = asyncio.create_task(engine.generate_streaming([1], P, lambda i, lp: None))
        await until(lambda: len(w1.held) == 1)
        w1.reply(Tokens(id=w1.held[0].id, token_ids=[5], logprobs=[-0.5]))
        w1.reply(
            Result(id=w1.held[0].id, token_ids=[6], logprobs=[-0.5], finish_reason="stop", policy_version=0)
        )
        with pytest.raises(EngineUnavailableError, match="other tokens than it streamed"):
            await call
        assert engine.stats()["workers"] == [] and engine.stats()["lost_workers"] == 1
        w1.task.cancel()


async def test_no_worker_waits_then_fails_unavailable_and_a_joining_worker_serves() -> None:
    async with hub(dispatch_timeout_s=0.2) as engine:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(EngineUnavailableError, match="dispatch_timeout_s"):
            await engine.generate([1], P)
        assert loop.time() - t0 >= 0.19
        waiting = asyncio.create_task(engine.generate([1], P))
        await asyncio.sleep(0.05)
        FakeWorker(engine, "w1")
        assert (await waiting).token_ids == [1]


async def test_cancelling_a_call_sends_cancel_to_its_worker() -> None:
    async with hub() as engine:
        w = FakeWorker(engine, "w1")
        w.hold = True
        call = asyncio.create_task(engine.generate([1], P))
        await until(lambda: len(w.held) == 1)
        call.cancel()
        await until(lambda: len(w.sent("cancel")) == 1)
        assert w.sent("cancel")[0].id == w.held[0].id
        assert engine.stats()["in_flight"] == 0


async def test_worker_errors_by_status() -> None:
    async with hub() as engine:
        w1, w2 = FakeWorker(engine, "w1"), FakeWorker(engine, "w2")
        w1.hold = w2.hold = True
        for status, error in ((400, EngineError), (429, EngineOverloadedError)):
            call = asyncio.create_task(engine.generate([1], P, session_id="s"))
            await until(lambda: len(w1.held) + len(w2.held) == 1)
            w = w1 if w1.held else w2
            w.reply(Error(id=w.held.pop().id, status=status, message="nope"))
            with pytest.raises(error, match="nope"):
                await call
        call = asyncio.create_task(engine.generate([1], P))  # 503 on one worker: the other one serves
        await until(lambda: len(w1.held) + len(w2.held) == 1)
        first, other = (w1, w2) if w1.held else (w2, w1)
        first.reply(Error(id=first.held.pop().id, status=503, message="backend down"))
        await until(lambda: len(other.held) == 1)
        other.reply(other.result(other.held.pop()))
        assert (await call).replica == other.link.name
        other.task.cancel()
        engine.drop(other.link, "test")
        call = asyncio.create_task(engine.generate([1], P))  # 5xx on the only worker: 503 at once
        await until(lambda: len(first.held) == 1)
        first.reply(Error(id=first.held.pop().id, status=500, message="bug"))
        with pytest.raises(EngineUnavailableError, match="every connected relay worker failed"):
            await call


async def test_redispatch_limit() -> None:
    async with hub(redispatch_limit=1) as engine:
        workers = [FakeWorker(engine, f"w{i}") for i in (1, 2, 3)]
        for w in workers:
            w.hold = True
        call = asyncio.create_task(engine.generate([1], P))
        for _ in range(2):
            await until(lambda: any(w.held and not w.link.gone.is_set() for w in workers))
            victim = next(w for w in workers if w.held and not w.link.gone.is_set())
            engine.drop(victim.link, "test")
        with pytest.raises(EngineUnavailableError, match="redispatch_limit=1"):
            await call


async def test_sticky_map_is_bounded() -> None:
    async with hub(max_sticky_sessions=4) as engine:
        FakeWorker(engine, "w1")
        for s in range(10):
            await engine.generate([1], P, session_id=f"s{s}")
        assert engine.stats()["sessions"] == 4


async def test_silent_worker_is_lost_after_the_timeout_and_its_calls_move() -> None:
    async with hub(heartbeat_s=0.05, worker_timeout_s=0.3) as engine:
        silent, healthy = FakeWorker(engine, "w1"), FakeWorker(engine, "w2")
        silent.hold, silent.answer_pings = True, False
        healthy.hold = True
        calls = [asyncio.create_task(engine.generate([1], P)) for _ in range(2)]
        await until(lambda: len(silent.held) == 1 and len(healthy.held) == 1)
        healthy.hold = False
        healthy.reply(healthy.result(healthy.held.pop()))
        completions = await asyncio.gather(*calls)  # the silent one's call moves after ~0.3 s
        assert [c.replica for c in completions] == ["w2", "w2"]
        assert silent.link.gone.is_set() and silent.link.close_code == CLOSE_TIMEOUT
        assert healthy.sent("ping") and not healthy.link.gone.is_set()


async def test_worker_names_are_unique_and_a_reconnect_replaces_its_old_link() -> None:
    async with hub() as engine:
        first = FakeWorker(engine, "w1", instance="i1")
        with pytest.raises(RelayRefused) as refused:
            FakeWorker(engine, "w1", instance="i2")
        assert refused.value.code == CLOSE_NAME_TAKEN and "relay.name" in refused.value.reason
        first.hold = True
        call = asyncio.create_task(engine.generate([1], P))
        await until(lambda: len(first.held) == 1)
        again = FakeWorker(engine, "w1", instance="i1")  # the same process, reconnected
        assert first.link.gone.is_set() and first.link.close_code == CLOSE_REPLACED
        assert (await call).token_ids == [1] and again.link.served == 1
        assert engine.stats()["redispatched"] == 1


async def test_update_weights_reaches_every_worker_and_late_joiners_catch_up() -> None:
    async with hub() as engine:
        with pytest.raises(EngineError, match="checkpoint folder"):
            await engine.update_weights({"w": None})  # type: ignore[dict-item]
        w1, w2 = FakeWorker(engine, "w1"), FakeWorker(engine, "w2")
        assert await engine.update_weights("/ckpt/step-1") == 7
        assert [f.path for f in w1.sent("update_weights")] == ["/ckpt/step-1"]
        assert len(w2.sent("update_weights")) == 1 and engine.policy_version == 7
        tag = w1.sent("update_weights")[0].tag
        late = FakeWorker(engine, "w3")
        await until(lambda: late.link.ready)
        assert [f.path for f in late.sent("update_weights")] == ["/ckpt/step-1"]
        back = FakeWorker(engine, "w4", weights_tag=tag)  # already has these weights
        assert back.link.ready and not back.sent("update_weights")


async def test_a_failed_weight_update_never_leaves_stale_weights_serving() -> None:
    async with hub() as engine:
        w1, w2 = FakeWorker(engine, "w1"), FakeWorker(engine, "w2")
        w1.update_fails = w2.update_fails = True
        with pytest.raises(EngineError, match="no relay worker loaded /bad"):
            await engine.update_weights("/bad")
        assert not w1.link.gone.is_set() and not w2.link.gone.is_set()  # both keep the old weights
        assert not FakeWorker(engine, "w3").sent("update_weights")  # and so does a newcomer
        w1.update_fails = False
        assert await engine.update_weights("/good") == 7
        assert w2.link.gone.is_set() and "could not load /good" in w2.link.close_reason
        assert sorted(w["name"] for w in engine.stats()["workers"]) == ["w1", "w3"]


async def test_a_malformed_frame_is_an_error_for_the_transport_not_a_crash() -> None:
    async with hub() as engine:
        w = FakeWorker(engine, "w1")
        with pytest.raises(RelayProtocolError):
            engine.receive(w.link, '{"type": "result", "id": "x"}')
        with pytest.raises(RelayProtocolError, match="second hello"):
            engine.receive(w.link, encode(Hello(name="w1", instance="w1", capacity=1)))
        assert (await engine.generate([1], P)).token_ids == [1]  # the hub itself is fine


def test_worker_command_needs_a_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from coderl.cli.main import main

    monkeypatch.delenv("CODERL_RELAY__TOKEN", raising=False)
    assert main(["proxy", "worker", "relay.url=ws://127.0.0.1:9/ws/worker"]) == 2
    assert "relay.token is empty" in capsys.readouterr().err
    assert main(["proxy", "worker", "relay.url=http://127.0.0.1:9/ws/worker", "relay.token=t"]) == 2
    assert "relay.url" in capsys.readouterr().err
