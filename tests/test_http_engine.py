"""The engine HTTP server on loopback, driven by the HTTP client engine in each dialect."""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coderl.config import EngineConfig, ModelConfig
from coderl.engine import SamplingParams
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.http_client import HTTPEngine, parse_sglang_generate, parse_vllm_completions
from coderl.engine.router import Router
from coderl.engine.server import create_app
from coderl.errors import EngineError, EngineUnavailableError, PromptTooLongError
from tests.conftest import hf_logprobs
from tests.servers import free_port, serve

pytestmark = pytest.mark.slow
KEY = "test-key"
DATA = Path(__file__).parent / "data" / "upstream"


@pytest.fixture(scope="module")
def server(tokenizer: Any) -> Iterator[tuple[str, EmbeddedEngine]]:
    engine = EmbeddedEngine(EngineConfig(max_batch_size=8), ModelConfig())
    app = create_app(engine, "SmolLM2-135M-Instruct", tokenizer=tokenizer, api_key=KEY)
    with serve(app) as url:
        yield url, engine


def client(url: str, api: str = "coderl", key: str | None = KEY) -> HTTPEngine:
    return HTTPEngine(url, EngineConfig(type="http", urls=[url], api=api), api_key=key)  # type: ignore[arg-type]


@pytest.mark.parametrize("api", ["coderl", "vllm", "sglang"])
async def test_client_returns_exact_tokens_and_logprobs(
    server: tuple[str, EmbeddedEngine], api: str, hf_model: Any, chat_prompts: list[list[int]]
) -> None:
    url, _ = server
    eng = client(url, api)
    await eng.start()
    try:
        c = await eng.generate(chat_prompts[1], SamplingParams(max_tokens=20, temperature=0.8, seed=11))
        again = await eng.generate(chat_prompts[1], SamplingParams(max_tokens=20, temperature=0.8, seed=11))
    finally:
        await eng.stop()
    assert c.token_ids == again.token_ids and len(c.token_ids) > 0
    ref = hf_logprobs(hf_model, chat_prompts[1], c.token_ids, 0.8)
    assert max(abs(a - b) for a, b in zip(c.logprobs, ref, strict=True)) < 1e-4
    assert c.replica == url and c.finish_reason in ("stop", "length")


async def test_sessions_reuse_the_prefix_over_http(
    server: tuple[str, EmbeddedEngine], chat_prompts: list[list[int]]
) -> None:
    url, _ = server
    eng = client(url)
    await eng.start()
    params = SamplingParams(max_tokens=8, temperature=0)
    first = await eng.generate(chat_prompts[2], params, session_id="http-s")
    second = await eng.generate(
        chat_prompts[2] + first.token_ids + [198, 1, 4093, 198], params, session_id="http-s"
    )
    await eng.stop()
    assert second.cached_tokens >= len(chat_prompts[2])


async def test_ending_a_session_over_http_lets_the_server_drop_its_kv(
    server: tuple[str, EmbeddedEngine], chat_prompts: list[list[int]]
) -> None:
    url, engine = server
    eng = client(url)
    await eng.start()
    try:
        params = SamplingParams(max_tokens=2, temperature=0)
        for sid in ("end-a", "end-b"):
            await eng.generate(chat_prompts[0], params, session_id=sid)
        assert engine.has_session("end-a") and engine.has_session("end-b")
        await eng.end_session("end-a")  # the older one goes; the newest ended one would stay as a donor
        await eng.end_session("end-b")
        await eng.generate([1], params)  # the engine's inbox is drained in order
        assert not engine.has_session("end-a")
        await client(url, "vllm").end_session("end-b")  # other APIs keep nothing per session: a no-op
    finally:
        await eng.stop()
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as http:
        assert (await http.post("/end_session", json={})).status_code == 422  # the body is checked


async def test_wrong_key_is_refused(server: tuple[str, EmbeddedEngine]) -> None:
    url, _ = server
    eng = client(url, key="wrong")
    with pytest.raises(EngineError, match="401"):
        await eng.start()
    await eng.stop()
    async with httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/health")).status_code == 200  # health needs no key
        r = await http.post("/v1/completions", json={"prompt": [1, 2]})
        assert r.status_code == 401


@pytest.mark.parametrize("api", ["coderl", "vllm", "sglang"])
async def test_a_prompt_over_the_context_is_the_same_error_over_http(
    server: tuple[str, EmbeddedEngine], api: str
) -> None:
    url, engine = server
    eng = client(url, api)
    await eng.start()
    try:
        with pytest.raises(PromptTooLongError) as got:
            await eng.generate([1] * (engine.max_model_len + 5), SamplingParams(max_tokens=4))
    finally:
        await eng.stop()
    assert (got.value.prompt_tokens, got.value.model_limit) == (engine.max_model_len + 5, 8192)
    assert pickle.loads(pickle.dumps(got.value)).wire() == got.value.wire()  # as Ray would pass it on


def test_vllms_context_length_message_is_read_as_such() -> None:
    body = json.dumps({"error": {"message": "This model's maximum context length is 4096 tokens. However, "
                                 "your request has 5120 input tokens. Please reduce the length.", "code": 400}})  # fmt: skip
    err = PromptTooLongError.from_wire(body)
    assert err is not None and (err.prompt_tokens, err.max_model_len, err.model_limit) == (5120, 4096, 4096)
    assert PromptTooLongError.from_wire('{"error": {"message": "bad temperature"}}') is None


async def test_bad_bodies_are_4xx_not_5xx(server: tuple[str, EmbeddedEngine]) -> None:
    url, engine = server
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:
        for body in (
            {"prompt": []},
            {"prompt": "text"},
            {"prompt": [1], "temperature": -1},
            {"prompt": [1], "n": 3},
            {},
        ):
            r = await http.post("/v1/completions", json=body)
            assert 400 <= r.status_code < 500, (body, r.status_code)
        r = await http.post("/v1/completions", json={"prompt": [10**8]})
        assert r.status_code == 400 and "vocabulary" in r.json()["error"]["message"]
        r = await http.post("/generate", json={"input_ids": [1] * (engine.max_model_len + 5)})
        assert r.status_code == 400 and "max_model_len" in r.text
        r = await http.post("/update_weights_from_disk", json={"model_path": "/no/such/dir"})
        assert r.status_code == 400 and r.json()["success"] is False


async def test_weight_update_from_disk_bumps_version(
    server: tuple[str, EmbeddedEngine], tmp_path: Path, chat_prompts: list[list[int]]
) -> None:
    url, engine = server
    engine.runner.model.save_pretrained(tmp_path / "ckpt")  # same weights: outputs unchanged, version bumps
    eng = client(url)
    await eng.start()
    v0 = eng.policy_version
    before = await eng.generate(chat_prompts[0], SamplingParams(max_tokens=6, temperature=0))
    assert await eng.update_weights(tmp_path / "ckpt") == v0 + 1
    after = await eng.generate(chat_prompts[0], SamplingParams(max_tokens=6, temperature=0))
    await eng.stop()
    assert after.policy_version == v0 + 1 and after.token_ids == before.token_ids


async def test_client_cancel_aborts_on_the_server(
    server: tuple[str, EmbeddedEngine], chat_prompts: list[list[int]]
) -> None:
    url, engine = server
    eng = client(url)
    await eng.start()
    task = asyncio.create_task(
        eng.generate(chat_prompts[0], SamplingParams(max_tokens=2000, ignore_eos=True))
    )
    while engine.stats()["running"] == 0:
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eng.stop()
    for _ in range(100):
        if engine.stats()["running"] == 0:
            break
        await asyncio.sleep(0.05)
    assert engine.stats()["running"] == 0


async def test_router_skips_a_dead_server(
    server: tuple[str, EmbeddedEngine], chat_prompts: list[list[int]]
) -> None:
    url, _ = server
    dead = client(f"http://127.0.0.1:{free_port()}")
    router = Router([dead, client(url)])
    await router.start()  # the dead one fails to start and is taken out
    results = await asyncio.gather(
        *(router.generate(chat_prompts[0], SamplingParams(max_tokens=4)) for _ in range(4))
    )
    await router.stop()
    assert {r.replica for r in results} == {url}
    assert router.stats()["replicas"][0]["alive"] is False


async def test_unreachable_server_is_unavailable() -> None:
    eng = client(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(EngineUnavailableError):
        await eng.start()
    await eng.stop()


def test_recorded_upstream_bodies_parse() -> None:
    vllm = json.loads((DATA / "vllm_completions_token_ids.json").read_text())
    c = parse_vllm_completions(vllm, 3, 0)
    assert c.token_ids and len(c.logprobs) == len(c.token_ids)
    assert c.finish_reason in ("stop", "length")
    sgl = json.loads((DATA / "sglang_generate.json").read_text())
    s = parse_sglang_generate(sgl, 3, 0)
    assert s.token_ids == sgl["output_ids"]
    assert s.logprobs == [t[0] for t in sgl["meta_info"]["output_token_logprobs"]]
    # older vLLM: ids only as "token_id:N" strings
    legacy = json.loads(json.dumps(vllm))
    legacy["choices"][0].pop("token_ids", None)
    assert parse_vllm_completions(legacy, 3, 0).token_ids == c.token_ids


def test_malformed_upstream_bodies_are_engine_errors() -> None:
    with pytest.raises(EngineError, match="unexpected"):
        parse_vllm_completions({"choices": []}, 1, 0)
    with pytest.raises(EngineError, match="logprobs"):
        parse_vllm_completions(
            {"choices": [{"token_ids": [1, 2], "logprobs": {"token_logprobs": [0.1]}}]}, 1, 0
        )
    with pytest.raises(EngineError, match="unexpected"):
        parse_sglang_generate({"text": "x"}, 1, 0)
