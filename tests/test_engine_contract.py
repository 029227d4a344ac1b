"""One suite for every ``Engine``: the embedded engine, the HTTP client in each dialect (against
``coderl engine serve``'s app on loopback), the router over HTTP replicas, the relay (a relay-mode
proxy with a worker connected over its WebSocket) and the scripted engine. Engines that run the real
model must also return exactly the model's log-probabilities.

Every server runs inside the test's event loop over the one shared embedded engine (borrowed, so no
second copy of the model is loaded)."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from typing import Any

import pytest

from coderl.chat import ChatFormat
from coderl.config import EngineConfig, ProxyConfig, RelayWorkerConfig
from coderl.engine import SamplingParams, create_engine
from coderl.engine.base import BorrowedEngine, Engine
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.params import ExpectName
from coderl.engine.scripted import ScriptedEngine
from coderl.engine.server import create_app as engine_app
from coderl.engine.stops import name_verdict
from coderl.loopback import serve_in_loop
from tests.conftest import hf_logprobs

pytestmark = pytest.mark.slow

MODEL_ENGINES = ["embedded", "http-coderl", "http-vllm", "http-sglang", "router", "relay"]
ENGINES = [*MODEL_ENGINES, "scripted"]
TOKEN = "contract-worker-token"


@contextlib.asynccontextmanager
async def built(kind: str, engine: EmbeddedEngine, tokenizer: Any) -> AsyncIterator[Engine]:
    """The engine of ``kind``, started, in front of the shared embedded engine where it needs a model."""
    if kind == "embedded":
        yield engine
    elif kind == "scripted":
        yield ScriptedEngine(["a scripted reply"], tokenizer)
    elif kind.startswith("http-") or kind == "router":
        apps = [engine_app(BorrowedEngine(engine), "SmolLM2-135M-Instruct", tokenizer) for _ in range(2)]
        async with serve_in_loop(apps[0]) as first, serve_in_loop(apps[1]) as second:
            api = "coderl" if kind == "router" else kind.removeprefix("http-")
            urls = [first, second] if kind == "router" else [first]
            client = create_engine(EngineConfig(type="http", urls=urls, api=api))  # type: ignore[arg-type]
            await client.start()
            try:
                yield client
            finally:
                await client.stop()
    elif kind == "relay":
        from coderl.proxy.app import create_app as proxy_app
        from coderl.proxy.relay import RelayEngine
        from coderl.proxy.relay_worker import RelayWorker

        cfg = ProxyConfig(mode="relay", worker_token=TOKEN, admin_token="contract-admin")
        relay = RelayEngine(cfg)
        async with serve_in_loop(proxy_app(cfg, relay, ChatFormat(tokenizer))) as base:
            url = base.replace("http://", "ws://") + "/ws/worker"
            worker = RelayWorker(BorrowedEngine(engine), RelayWorkerConfig(url=url, token=TOKEN, name="w1"))
            serving = asyncio.create_task(worker.run())
            try:
                while not relay.stats()["workers"]:
                    await asyncio.sleep(0.02)
                yield relay
            finally:
                worker.stop()
                await asyncio.wait_for(serving, timeout=30)
    else:
        raise AssertionError(kind)


@pytest.fixture(scope="module", params=ENGINES)
async def subject(
    request: pytest.FixtureRequest, engine: EmbeddedEngine, tokenizer: Any
) -> AsyncIterator[tuple[str, Engine]]:
    async with built(request.param, engine, tokenizer) as eng:
        yield request.param, eng


async def test_a_completion_is_ids_and_their_logprobs(
    subject: tuple[str, Engine], chat_prompts: list[list[int]]
) -> None:
    _, eng = subject
    c = await eng.generate(chat_prompts[1], SamplingParams(max_tokens=8, temperature=1.0, seed=1))
    assert 1 <= len(c.token_ids) <= 8 and len(c.logprobs) == len(c.token_ids)
    assert all(isinstance(t, int) for t in c.token_ids)
    assert all(math.isfinite(lp) and lp <= 1e-6 for lp in c.logprobs)
    assert c.finish_reason in ("stop", "length")
    assert (c.finish_reason == "length") == (len(c.token_ids) == 8 and c.stop_token_id is None)
    assert isinstance(c.policy_version, int) and c.policy_version == eng.policy_version


async def test_max_tokens_bounds_the_completion(
    subject: tuple[str, Engine], chat_prompts: list[list[int]]
) -> None:
    _, eng = subject
    c = await eng.generate(chat_prompts[2], SamplingParams(max_tokens=1))
    assert len(c.token_ids) == 1 and len(c.logprobs) == 1


async def test_a_stop_string_ends_generation_at_the_token_that_completes_it(
    subject: tuple[str, Engine], engine: EmbeddedEngine, tokenizer: Any, chat_prompts: list[list[int]]
) -> None:
    kind, eng = subject
    if kind == "scripted":  # the same reply to both calls (the shared one moves on to counting)
        eng = ScriptedEngine(["def square(x):\n    return x * x\n"] * 2, tokenizer)
    params = SamplingParams(max_tokens=24, temperature=0.0)
    full = (await eng.generate(chat_prompts[1], params)).token_ids
    assert len(full) >= 4, full

    def text(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=True))

    def straddling(n: int) -> str:  # the last character of token n-1's text and the first of token n's
        head, tail = text(full[: n - 1]), text(full[:n])
        return tail[len(head) - 1 : len(head) + 1] if len(tail) > len(head) >= 1 else ""

    k = next(
        n for n in range(2, len(full)) if len(straddling(n)) == 2 and straddling(n) not in text(full[: n - 1])
    )
    stop = straddling(k)
    generated = engine.stats()["generated_tokens"]
    c = await eng.generate(chat_prompts[1], params.model_copy(update={"stop": ["never-appears", stop]}))
    assert (c.finish_reason, c.stop_str, c.stop_token_id) == ("stop", stop, None)
    assert c.token_ids == full[:k] and len(c.logprobs) == k < 24  # ended there, the completing token kept
    if kind in MODEL_ENGINES:  # the engine stopped: it sampled no token past the stop
        assert engine.stats()["generated_tokens"] - generated == k


async def test_a_reply_whose_tool_name_goes_wrong_ends_at_that_token_where_the_engine_checks_names(
    subject: tuple[str, Engine], engine: EmbeddedEngine, tokenizer: Any, chat_prompts: list[list[int]]
) -> None:
    kind, eng = subject
    if kind == "scripted":
        eng = ScriptedEngine(["def square(x):\n    return x * x\n"] * 2, tokenizer)
    params = SamplingParams(max_tokens=16, temperature=0.0)
    full = (await eng.generate(chat_prompts[1], params)).token_ids
    expect = ExpectName(names=["zzz_tool"])
    texts = [str(tokenizer.decode(full[:n], skip_special_tokens=True)) for n in range(1, len(full) + 1)]
    k = next(n for n, t in enumerate(texts, start=1) if name_verdict(t, expect) == "departed")
    generated = engine.stats()["generated_tokens"]
    c = await eng.generate(chat_prompts[1], params.model_copy(update={"expect_name": expect}))
    if kind in ("embedded", "scripted", "relay"):  # engines that check names (the relay's worker is one)
        assert c.departed and c.finish_reason == "stop" and c.stop_str is None
        assert c.token_ids == full[:k] and len(c.logprobs) == k < 16  # the departing token kept
        if kind != "scripted":
            assert engine.stats()["generated_tokens"] - generated == k  # sampled nothing past it
    else:  # over HTTP the reply runs on: the caller's parser finds the same wrong name
        assert not c.departed and c.token_ids == full


async def test_streamed_ids_are_the_completion_in_order(
    subject: tuple[str, Engine], chat_prompts: list[list[int]]
) -> None:
    kind, eng = subject
    got: list[tuple[list[int], list[float]]] = []
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    c = await eng.generate_streaming(chat_prompts[1], params, lambda ids, lps: got.append((ids, lps)))
    assert [t for ids, _ in got for t in ids] == c.token_ids and len(c.token_ids) == 8
    assert [x for _, lps in got for x in lps] == pytest.approx(c.logprobs, abs=1e-6)
    if kind != "http-sglang":  # SGLang's client hands the ids over whole, when done
        assert len(got) > 1  # they came as they were sampled


async def test_a_seeded_request_repeats(subject: tuple[str, Engine], chat_prompts: list[list[int]]) -> None:
    _, eng = subject
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=7)
    first, again = [await eng.generate(chat_prompts[0], params) for _ in range(2)]
    assert first.token_ids == again.token_ids and first.logprobs == pytest.approx(again.logprobs, abs=1e-5)


async def test_a_session_continues_in_token_space(subject: tuple[str, Engine], tokenizer: Any) -> None:
    _, eng = subject
    chat = ChatFormat(tokenizer)
    prompt = chat.render([{"role": "user", "content": "Name a prime number."}])
    first = await eng.generate(prompt, SamplingParams(max_tokens=5, temperature=0), session_id="contract-s1")
    follow = (
        prompt + first.token_ids + chat.append(first.token_ids, [{"role": "user", "content": "Another."}])
    )
    second = await eng.generate(follow, SamplingParams(max_tokens=5, temperature=0), session_id="contract-s1")
    assert second.token_ids and len(second.logprobs) == len(second.token_ids)


async def test_concurrent_requests_all_complete(
    subject: tuple[str, Engine], chat_prompts: list[list[int]]
) -> None:
    _, eng = subject
    params = SamplingParams(max_tokens=4, temperature=1.0, seed=3)
    done = await asyncio.gather(*(eng.generate(p, params) for p in chat_prompts))
    assert [len(c.token_ids) for c in done] == [len(c.logprobs) for c in done] and all(
        c.token_ids for c in done
    )


async def test_a_cancelled_request_leaves_the_engine_serving(
    subject: tuple[str, Engine], chat_prompts: list[list[int]]
) -> None:
    _, eng = subject
    slow = asyncio.create_task(eng.generate(chat_prompts[2], SamplingParams(max_tokens=200, ignore_eos=True)))
    await asyncio.sleep(0.05)
    slow.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await slow
    c = await eng.generate(chat_prompts[0], SamplingParams(max_tokens=3))
    assert len(c.token_ids) >= 1
    assert await eng.healthy() and isinstance(eng.stats(), dict)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
async def test_model_engines_return_the_models_logprobs(
    subject: tuple[str, Engine], temperature: float, hf_model: Any, chat_prompts: list[list[int]]
) -> None:
    kind, eng = subject
    if kind not in MODEL_ENGINES:
        pytest.skip(f"{kind} runs no model")
    c = await eng.generate(chat_prompts[3], SamplingParams(max_tokens=12, temperature=temperature, seed=5))
    ref = hf_logprobs(hf_model, chat_prompts[3], c.token_ids, temperature)
    assert max(abs(a - b) for a, b in zip(c.logprobs, ref, strict=True)) < 1e-4
