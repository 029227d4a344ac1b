"""The HTTP client engine and servers that close kept-alive connections: a raw HTTP/1.1 server on
loopback that answers the first request of each connection and can drop the connection as the next
one arrives (what a server does when its idle timeout and a new request cross)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coderl.config import EngineConfig
from coderl.engine import SamplingParams
from coderl.engine.http_client import KEEPALIVE_S, HTTPEngine
from coderl.errors import EngineUnavailableError

UPSTREAM = Path(__file__).parent / "data" / "upstream"
SGLANG = json.loads((UPSTREAM / "sglang_generate.json").read_text())
VLLM = json.loads((UPSTREAM / "vllm_completions_token_ids.json").read_text())
ANSWERS = {  # path -> (content type, body); /v1/completions: vLLM's stream, one chunk
    "/generate": ("application/json", json.dumps(SGLANG)),
    "/health": ("application/json", "{}"),
    "/v1/completions": ("text/event-stream", f"data: {json.dumps(VLLM)}\n\ndata: [DONE]\n\n"),
}


class Server:
    """Answers ``ANSWERS`` with keep-alive; ``drop_second``: a connection's second request is read and
    the connection closed without an answer; ``drop_all``: every request is."""

    def __init__(self, drop_second: bool = False, drop_all: bool = False) -> None:
        self.drop_second = drop_second
        self.drop_all = drop_all
        self.connections = 0
        self.answered: list[str] = []
        self.dropped = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                path = lines[0].split(" ")[1]
                length = next(
                    (int(x.split(":")[1]) for x in lines if x.lower().startswith("content-length:")), 0
                )
                await reader.readexactly(length)
                if self.drop_all or (self.drop_second and served >= 1):
                    self.dropped += 1
                    break
                kind, text = ANSWERS[path]
                body = text.encode()
                writer.write(
                    f"HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                self.answered.append(path)
                served += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[object]:
    servers: list[asyncio.Server] = []

    async def start(handler: Server) -> str:
        srv = await asyncio.start_server(handler.handle, "127.0.0.1", 0)
        servers.append(srv)
        return f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"

    yield start
    for srv in servers:
        srv.close()
        await srv.wait_closed()


def engine(url: str, api: str = "sglang") -> HTTPEngine:
    cfg = EngineConfig(type="http", urls=[url], api=api, served_model="m")
    return HTTPEngine(url, cfg)


async def generate(eng: HTTPEngine) -> list[int]:
    """One model call: SGLang's whole answer, or vLLM's stream (token ids handed over as they come)."""
    if eng.api == "sglang":
        return (await eng.generate([1, 2, 3], SamplingParams(max_tokens=8))).token_ids
    seen: list[int] = []
    done = await eng.generate_streaming(
        [1, 2, 3], SamplingParams(max_tokens=8), lambda ids, _: seen.extend(ids)
    )
    assert seen == done.token_ids
    return done.token_ids


@pytest.mark.parametrize("api", ["sglang", "vllm"])
async def test_a_request_the_server_drops_on_a_kept_alive_connection_is_sent_again(serve, api: str) -> None:  # type: ignore[no-untyped-def]
    server = Server(drop_second=True)
    eng = engine(await serve(server), api)
    await eng.start()
    first = await generate(eng)
    second = await generate(eng)  # a POST, which aiohttp itself never sends twice
    await eng.stop()
    assert server.dropped == 1  # the second went out on the kept-alive connection and was dropped,
    assert len(server.answered) == 2  # then was answered on a fresh one
    assert first == second == SGLANG["output_ids"] == VLLM["choices"][0]["token_ids"]


@pytest.mark.parametrize("api", ["sglang", "vllm"])
async def test_a_server_that_drops_every_request_is_unavailable(serve, api: str) -> None:  # type: ignore[no-untyped-def]
    server = Server(drop_all=True)
    eng = engine(await serve(server), api)
    await eng.start()
    with pytest.raises(EngineUnavailableError, match="ServerDisconnectedError"):
        await generate(eng)
    await eng.stop()
    assert server.dropped == 2  # sent once more, not forever


async def test_an_idle_connection_is_closed_before_the_servers_idle_timeout(serve) -> None:  # type: ignore[no-untyped-def]
    assert KEEPALIVE_S < 5.0  # uvicorn's default idle timeout (coderl's server, vLLM, SGLang)
    server = Server()
    eng = engine(await serve(server))
    await eng.start()
    await generate(eng)
    await generate(eng)
    assert server.connections == 1  # one kept-alive connection for both
    await asyncio.sleep(KEEPALIVE_S + 1.0)
    assert await eng.healthy()
    await eng.stop()
    assert server.connections == 2  # the idle one was not reused


async def test_a_weight_update_is_never_sent_twice(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server = Server(drop_all=True)  # as if the server loaded the weights, then the connection dropped
    eng = engine(await serve(server))
    await eng.start()
    with pytest.raises(EngineUnavailableError, match="/update_weights_from_disk: ServerDisconnectedError"):
        await eng.update_weights(tmp_path)
    await eng.stop()
    assert server.dropped == 1  # a second load would have counted as another policy version
