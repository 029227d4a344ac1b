"""Relay mode end to end on loopback: a relay-mode proxy, inference workers as real processes that
connect out to it, agents calling the proxy's OpenAI endpoint. Workers are killed (-9), stopped
(SIGSTOP), restarted and started before the proxy; every call must still complete, exactly once.

Scripted workers (``tests.relay_worker_scripted``, the worker code of ``coderl proxy worker`` over a
fixed-latency scripted engine) answer "served by NAME", so each completion says which worker served
it; one test serves the real default model through ``coderl proxy worker`` and checks its logprobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from coderl.chat import ChatFormat
from coderl.checkpoint import DEFAULT_MODEL_NAME
from coderl.proxy.app import create_app
from coderl.proxy.config import ProxyConfig, RelayWorkerConfig
from coderl.proxy.relay import RelayEngine
from coderl.proxy.relay_protocol import (
    CLOSE_BAD_MESSAGE,
    CLOSE_NAME_TAKEN,
    Hello,
    encode,
    parse_proxy_message,
)
from coderl.proxy.relay_worker import RelayAuthError, RelayWorker
from tests.conftest import hf_logprobs
from tests.proxy_fakes import scripted
from tests.servers import free_port, serve, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "wt-relay-test-0123456789"
ADMIN = "adm-relay-test"
ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}


# ---------------------------------------------------------------------------- helpers


def start_worker(base: str, name: str, logs: Path, *extra: str) -> subprocess.Popen[bytes]:
    """A scripted worker process connecting to the proxy at ``base`` (http://...)."""
    log = (logs / f"{name}.log").open("ab")
    url = base.replace("http://", "ws://") + "/ws/worker"
    cmd = [sys.executable, "-m", "tests.relay_worker_scripted", url, TOKEN, name, *extra]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def workers(base: str) -> dict[str, Any]:
    r = httpx.get(f"{base}/workers", headers=ADMIN_H, timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json())


def wait_workers(base: str, names: set[str], logs: Path, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        stats = workers(base)
        if {w["name"] for w in stats["workers"] if w["ready"]} == names:
            return stats
        assert time.monotonic() < deadline, f"workers {names} did not connect:\n{read_logs(logs)}"
        time.sleep(0.1)


def health(base: str) -> dict[str, Any]:
    return dict(httpx.get(f"{base}/health", timeout=10).json())


def read_logs(logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(logs.glob("*.log")))


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
    proc.wait(timeout=30)


@contextlib.contextmanager
def relay_proxy(tokenizer: Any, db: Path, port: int | None = None, **cfg: Any) -> Iterator[str]:
    """A relay-mode proxy app on loopback in this process (the workers are separate processes)."""
    config = ProxyConfig(mode="relay", worker_token=TOKEN, admin_token=ADMIN, db=db, **cfg)
    engine = RelayEngine(config, model=DEFAULT_MODEL_NAME)
    app = create_app(config, engine, ChatFormat(tokenizer), model_name="smol")
    with serve(app, port=port) as base:
        yield base


@dataclass
class Agent:
    """One proxy session whose calls form one conversation; ``served`` = the worker of each call."""

    base: str
    turns: int
    session: str = ""
    served: list[str] = field(default_factory=list)

    async def run(self, client: httpx.AsyncClient, done: list[int]) -> None:
        s = (await client.post(f"{self.base}/sessions", headers=ADMIN_H)).json()
        self.session = s["id"]
        url, headers = (
            f"{self.base}/s/{s['id']}/v1/chat/completions",
            {"Authorization": f"Bearer {s['secret']}"},
        )
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
        for turn in range(self.turns):
            r = await client.post(url, json={"messages": messages, "max_tokens": 16}, headers=headers)
            assert r.status_code == 200, r.text
            content = r.json()["choices"][0]["message"]["content"]
            self.served.append(content.removeprefix("served by "))
            messages += [
                {"role": "assistant", "content": content},
                {"role": "user", "content": f"Go on ({turn})."},
            ]
            done[0] += 1

    def record(self) -> dict[str, Any]:
        r = httpx.get(f"{self.base}/sessions/{self.session}", headers=ADMIN_H, timeout=30)
        return dict(r.json())


async def run_agents(agents: list[Agent], during: Any = None) -> None:
    """Run every agent concurrently; ``during(done)`` runs beside them (to kill or stop a worker)."""
    done = [0]
    async with httpx.AsyncClient(timeout=60) as client:
        jobs = [agent.run(client, done) for agent in agents]
        await asyncio.gather(*jobs, *([during(done)] if during else []))


async def after_calls(done: list[int], n: int) -> None:
    while done[0] < n:
        await asyncio.sleep(0.02)


def assert_recorded_once(agents: list[Agent]) -> None:
    for agent in agents:
        rec = agent.record()
        assert rec["stats"]["calls"] == agent.turns, (agent.session, rec["stats"])  # no call twice
        assert rec["stats"]["trajectories"] == 1, rec["stats"]


# ---------------------------------------------------------------------------- a proxy (process) + 3 workers


@dataclass
class Cluster:
    base: str
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]]

    def restart(self, name: str) -> None:
        stop(self.procs[name])
        self.procs[name] = start_worker(self.base, name, self.logs, "--latency", "0.3")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """`coderl proxy serve proxy.mode=relay` as a process, with three scripted workers w1, w2, w3."""
    logs = tmp_path_factory.mktemp("relay-logs")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "coderl", "proxy", "serve", "proxy.mode=relay", f"proxy.port={port}"]
    cmd += [f"proxy.db={logs / 'proxy.sqlite'}", f"proxy.admin_token={ADMIN}", f"proxy.worker_token={TOKEN}"]
    cmd += ["proxy.heartbeat_s=0.5", "proxy.worker_timeout_s=2", "run.log_level=info"]
    proxy = subprocess.Popen(cmd, cwd=ROOT, stdout=(logs / "proxy.log").open("wb"), stderr=subprocess.STDOUT)
    procs = {name: start_worker(base, name, logs, "--latency", "0.3") for name in ("w1", "w2", "w3")}
    try:
        wait_healthy(f"{base}/health", proxy)
        wait_workers(base, {"w1", "w2", "w3"}, logs)
        yield Cluster(base, logs, procs)
    finally:
        for proc in [*procs.values(), proxy]:
            stop(proc)


async def test_sessions_stick_to_one_worker_and_load_spreads(cluster: Cluster) -> None:
    agents = [Agent(cluster.base, turns=3) for _ in range(24)]
    await run_agents(agents)
    assert all(len(set(a.served)) == 1 for a in agents), [a.served for a in agents]
    per_worker = {w: sum(a.served[0] == w for a in agents) for w in ("w1", "w2", "w3")}
    assert min(per_worker.values()) >= 4, per_worker  # 8 each when perfectly even
    assert_recorded_once(agents)
    stats = workers(cluster.base)
    assert {w["name"]: w["served"] for w in stats["workers"]} == {w: 3 * n for w, n in per_worker.items()}
    assert stats["redispatched"] == 0 and stats["lost_workers"] == 0


async def test_kill_9_a_worker_mid_load_then_restart_it(cluster: Cluster) -> None:
    before = workers(cluster.base)
    agents = [Agent(cluster.base, turns=6) for _ in range(30)]

    async def kill_w2(done: list[int]) -> None:
        await after_calls(done, 45)
        cluster.procs["w2"].send_signal(signal.SIGKILL)

    await run_agents(agents, kill_w2)  # every call completes although w2 died under load
    assert_recorded_once(agents)
    after = workers(cluster.base)
    assert {w["name"] for w in after["workers"]} == {"w1", "w3"}
    assert after["lost_workers"] == before["lost_workers"] + 1
    assert after["redispatched"] > before["redispatched"], after  # w2's calls in flight moved
    moved = [a.served for a in agents if a.served[0] == "w2"]
    assert moved, "no session was on w2"
    for served in moved:  # w2's sessions moved to one survivor each and stayed there
        k = served.index(next(w for w in served if w != "w2"))
        assert set(served[k:]) in ({"w1"}, {"w3"}), served
    for a in agents:
        if a.served[0] != "w2":
            assert len(set(a.served)) == 1, a.served

    cluster.restart("w2")
    wait_workers(cluster.base, {"w1", "w2", "w3"}, cluster.logs)
    fresh = [Agent(cluster.base, turns=2) for _ in range(6)]
    await run_agents(fresh)
    assert sum(a.served[0] == "w2" for a in fresh) >= 1, [a.served for a in fresh]  # takes new load
    assert_recorded_once(fresh)


async def test_a_stopped_worker_is_lost_after_the_heartbeat_timeout(cluster: Cluster) -> None:
    before = workers(cluster.base)
    agents = [Agent(cluster.base, turns=4) for _ in range(12)]
    w1 = cluster.procs["w1"]
    t0 = time.monotonic()

    async def freeze_w1(done: list[int]) -> None:
        await after_calls(done, 14)
        w1.send_signal(signal.SIGSTOP)  # alive to TCP, silent to the proxy

    await run_agents(agents, freeze_w1)
    assert time.monotonic() - t0 >= 2.0  # the stuck calls waited for proxy.worker_timeout_s
    assert_recorded_once(agents)
    after = workers(cluster.base)
    assert {w["name"] for w in after["workers"]} == {"w2", "w3"}
    assert after["lost_workers"] == before["lost_workers"] + 1
    assert after["redispatched"] > before["redispatched"]
    proxy_log = (cluster.logs / "proxy.log").read_text()
    assert "worker w1 lost: no message for" in proxy_log

    w1.send_signal(signal.SIGCONT)  # it finds its connection closed and reconnects
    wait_workers(cluster.base, {"w1", "w2", "w3"}, cluster.logs)
    w1_log = (cluster.logs / "w1.log").read_text()  # it saw the proxy's close, or the silence itself
    assert re.search(r"relay worker w1: (connection lost: .*4408|no message from the proxy)", w1_log), w1_log


# ---------------------------------------------------------------------------- one proxy in this process


async def test_worker_token_and_hello_are_checked(tokenizer: Any, tmp_path: Path) -> None:
    with relay_proxy(tokenizer, tmp_path / "p.db") as base:
        url = base.replace("http", "ws") + "/ws/worker"
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            with pytest.raises(InvalidStatus) as refused:
                async with connect(url, additional_headers=headers):
                    pass
            assert refused.value.response.status_code == 403
        assert workers(base)["workers"] == []

        auth = {"Authorization": f"Bearer {TOKEN}"}
        hello = Hello(name="raw", instance="i1", capacity=2, model="smol")
        async with connect(url, additional_headers=auth) as ws:
            await ws.send(encode(hello))
            welcome = parse_proxy_message(await ws.recv())
            assert welcome.type == "welcome"
            assert [w["name"] for w in workers(base)["workers"]] == ["raw"]
            async with connect(url, additional_headers=auth) as twin:  # same name, other process
                await twin.send(encode(Hello(name="raw", instance="i2", capacity=2)))
                with pytest.raises(ConnectionClosed) as closed:
                    await twin.recv()
                assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_NAME_TAKEN
            await ws.send('{"type": "result", "id": "r1", "token_ids": [1]}')  # malformed
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    await ws.recv()  # pings may come first
            assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_BAD_MESSAGE
        async with connect(url, additional_headers=auth) as ws:
            await ws.send('{"type": "pong", "t": 0}')  # not a hello
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd is not None and "must be a hello" in closed.value.rcvd.reason
        assert workers(base)["workers"] == []
        assert health(base)["workers"] == 0  # the proxy lives on


async def test_a_worker_with_a_wrong_token_stops_with_a_clear_error(tokenizer: Any, tmp_path: Path) -> None:
    with relay_proxy(tokenizer, tmp_path / "p.db") as base:
        url = base.replace("http", "ws") + "/ws/worker"
        worker = RelayWorker(scripted(tokenizer), RelayWorkerConfig(url=url, token="not-the-token"))
        with pytest.raises(RelayAuthError, match=r"relay\.token must equal the proxy's proxy\.worker_token"):
            await asyncio.wait_for(worker.run(), 30)  # no retry: retrying cannot fix a wrong token
        assert worker.connections == 0 and workers(base)["workers"] == []


def test_no_worker_answers_503_with_retry_after(tokenizer: Any, tmp_path: Path) -> None:
    with relay_proxy(tokenizer, tmp_path / "p.db", dispatch_timeout_s=0.5, retry_after_s=2) as base:
        s = httpx.post(f"{base}/sessions", headers=ADMIN_H).json()
        t0 = time.monotonic()
        r = httpx.post(
            f"{s['openai_base_url']}/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {s['secret']}"},
            timeout=30,
        )
        assert time.monotonic() - t0 >= 0.5
        assert r.status_code == 503 and r.headers["retry-after"] == "2"
        assert r.json()["error"]["code"] == "engine_unavailable"
        assert "no relay worker connected" in r.json()["error"]["message"]
        assert httpx.get(f"{base}/sessions/{s['id']}", headers=ADMIN_H).json()["calls"] == []


def test_a_worker_started_before_the_proxy_backs_off_then_connects(tokenizer: Any, tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_worker(base, "early", tmp_path, "--backoff-base", "0.1", "--backoff-cap", "0.8")
    log = tmp_path / "early.log"
    retry = re.compile(r"cannot connect: .*; retry (\d+) in ([\d.]+) s \(backoff bound ([\d.]+) s\)")
    try:
        deadline = time.monotonic() + 60
        while len(retry.findall(log.read_text())) < 6:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        with relay_proxy(tokenizer, tmp_path / "p.db", port=port) as proxy_base:
            wait_workers(proxy_base, {"early"}, tmp_path, timeout_s=10)
            s = httpx.post(f"{proxy_base}/sessions", headers=ADMIN_H).json()
            r = httpx.post(
                f"{s['openai_base_url']}/chat/completions",
                json={"messages": [{"role": "user", "content": "hi"}]},
                headers={"Authorization": f"Bearer {s['secret']}"},
                timeout=30,
            )
            assert r.json()["choices"][0]["message"]["content"] == "served by early"
    finally:
        stop(proc)
    before_connect = log.read_text().split("connected to ws://")[0]
    attempts = [(int(n), float(d), float(b)) for n, d, b in retry.findall(before_connect)]
    assert [n for n, _, _ in attempts] == list(range(1, len(attempts) + 1))
    assert [b for _, _, b in attempts[:5]] == [0.1, 0.2, 0.4, 0.8, 0.8]  # doubles up to the cap
    assert all(0 <= d <= b for _, d, b in attempts)
    # jittered: the waits are spread over their bounds (logged to 1 ms, so two may print alike)
    assert len({round(d / b, 3) for _, d, b in attempts}) >= len(attempts) - 2
    assert sum(d < 0.9 * b for _, d, b in attempts) >= 1  # not pinned to the bound
    assert "connected to ws://" in log.read_text()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_proxy_stops_at_once_with_a_call_in_flight(tmp_path: Path, sig: signal.Signals) -> None:
    """`coderl proxy serve` ends the calls in flight when it is told to stop (their clients get a 503 to
    retry), rather than waiting for their generations: here the worker would answer in 120 s."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "coderl", "proxy", "serve", "proxy.mode=relay", f"proxy.port={port}"]
    cmd += [
        f"proxy.db={tmp_path / 'proxy.sqlite'}",
        f"proxy.admin_token={ADMIN}",
        f"proxy.worker_token={TOKEN}",
    ]
    log = tmp_path / "proxy.log"
    proxy = subprocess.Popen(
        [*cmd, "run.log_level=info"], cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    worker = start_worker(base, "slow", tmp_path, "--latency", "120")
    answers: list[httpx.Response] = []
    try:
        wait_healthy(f"{base}/health", proxy)
        wait_workers(base, {"slow"}, tmp_path)
        s = httpx.post(f"{base}/sessions", headers=ADMIN_H).json()
        ask = {
            "url": f"{s['openai_base_url']}/chat/completions",
            "headers": {"Authorization": f"Bearer {s['secret']}"},
        }
        caller = threading.Thread(
            target=lambda: answers.append(
                httpx.post(**ask, json={"messages": [{"role": "user", "content": "hi"}]}, timeout=180)
            )
        )
        caller.start()
        deadline = time.monotonic() + 30
        while workers(base)["in_flight"] == 0:
            assert time.monotonic() < deadline, read_logs(tmp_path)
            time.sleep(0.1)
        proxy.send_signal(sig)
        proxy.wait(timeout=20)  # not the 120 s the call would take
        caller.join(timeout=20)
    finally:
        stop(worker)
        stop(proxy)
    (answer,) = answers
    assert answer.status_code == 503 and answer.headers["retry-after"], answer.text
    assert "shutting down" in answer.json()["error"]["message"]
    assert "never retrieved" not in log.read_text() and " ERROR " not in log.read_text(), log.read_text()


# ---------------------------------------------------------------------------- the real model


def readme_relay_commands() -> list[str]:
    """The command lines of the README's relay-mode block (comments out, continuations joined)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Relay mode", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", "")
    return [line.split("   #")[0] for line in block.splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.slow
def test_the_readme_relay_commands_serve_the_real_model(
    hf_model: Any, checkpoint: Path, tmp_path: Path
) -> None:
    export, serve_line, worker_export, worker_line, http_worker_line, curl_line = readme_relay_commands()
    assert serve_line.startswith("coderl proxy serve proxy.mode=relay") and "proxy-host:8100" in worker_line
    assert "engine.type=http engine.api=vllm" in http_worker_line  # needs a vLLM server: not run here
    tokens = subprocess.run(  # the README's export line makes both tokens
        ["bash", "-c", f"{export}; echo $CODERL_PROXY__ADMIN_TOKEN $CODERL_PROXY__WORKER_TOKEN"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert len(tokens) == 2 and all(re.fullmatch(r"[0-9a-f]{48}", t) for t in tokens), tokens
    admin_h = {"Authorization": f"Bearer {tokens[0]}"}
    env = {**os.environ, "CODERL_PROXY__ADMIN_TOKEN": tokens[0], "CODERL_PROXY__WORKER_TOKEN": tokens[1]}
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    def readme_line(line: str) -> str:  # the README's host, port, record and GPU moved to this machine
        line = line.replace("proxy-host:8100", f"127.0.0.1:{port}").replace(
            "/data/proxy.sqlite", str(tmp_path / "p.db")
        )
        return line.replace(
            "model.device=cuda", "model.device=cpu"
        ) + f" proxy.port={port}" * line.startswith("coderl proxy serve")

    proxy = subprocess.Popen(
        ["bash", "-c", f"exec {readme_line(serve_line)} run.log_level=warning"],
        cwd=ROOT, stdout=(tmp_path / "proxy.log").open("wb"), stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    worker_env = {**os.environ, "CODERL_RELAY__TOKEN": tokens[1]}
    assert worker_export == "export CODERL_RELAY__TOKEN=<the proxy's worker token>"
    log = (tmp_path / "real.log").open("wb")
    proc = subprocess.Popen(
        ["bash", "-c", f"exec {readme_line(worker_line)} run.log_level=info"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=worker_env,
    )  # fmt: skip
    try:
        wait_healthy(f"{base}/health", proxy)
        deadline = time.monotonic() + 120
        while not httpx.get(f"{base}/workers", headers=admin_h, timeout=10).json()["workers"]:
            assert proc.poll() is None and time.monotonic() < deadline, read_logs(tmp_path)
            time.sleep(0.3)
        curl = subprocess.run(["bash", "-c", readme_line(curl_line)], env=env, capture_output=True, text=True)
        (listed,) = json.loads(curl.stdout)["workers"]  # the README's curl, with the README's admin token
        assert (
            listed["name"] == "gpu-1"
            and listed["capacity"] == 32
            and listed["model"] == "SmolLM2-135M-Instruct"
        )
        s = httpx.post(f"{base}/sessions", headers=admin_h).json()
        client = openai.OpenAI(base_url=s["openai_base_url"], api_key=s["secret"], max_retries=0)
        reply = client.chat.completions.create(
            model="smol",
            messages=[{"role": "user", "content": "Say hi."}],
            max_tokens=6,
            seed=3,
            logprobs=True,
        )
        rec = httpx.get(f"{base}/sessions/{s['id']}", headers=admin_h).json()
        (call,) = rec["calls"]
        assert reply.choices[0].logprobs is not None and reply.choices[0].logprobs.content is not None
        assert [t.logprob for t in reply.choices[0].logprobs.content] == pytest.approx(call["logprobs"])
        ref = hf_logprobs(hf_model, call["prompt_ids"], call["completion_ids"])
        assert sum(abs(a - b) for a, b in zip(ref, call["logprobs"], strict=True)) / len(ref) < 1e-3
        stream = client.chat.completions.create(  # streamed through the relay, token by token
            model="smol", messages=[{"role": "user", "content": "Say hi."}], max_tokens=6, seed=3, stream=True
        )
        pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
        assert len(pieces) > 1 and "".join(pieces) == reply.choices[0].message.content

        # weight sync through the relay: the worker reloads a checkpoint folder (the same weights)
        update = f"{base}/workers/update_weights"
        assert httpx.post(update, json={"path": str(checkpoint)}).status_code == 401  # admin only
        bad = httpx.post(update, json={"path": str(tmp_path / "none")}, headers=admin_h, timeout=60)
        assert bad.status_code == 400 and "no safetensors weights" in bad.json()["error"]["message"]
        good = httpx.post(update, json={"path": str(checkpoint)}, headers=admin_h, timeout=120)
        assert good.json() == {"policy_version": 1, "workers": 1}, good.text
        client.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": "Again."}], max_tokens=2, seed=3
        )
        calls = httpx.get(f"{base}/sessions/{s['id']}", headers=admin_h).json()["calls"]
        assert [c["policy_version"] for c in calls] == [0, 0, 1]

        proc.send_signal(signal.SIGTERM)  # drains and leaves cleanly
        assert proc.wait(timeout=60) == 0, (tmp_path / "real.log").read_text()
        after = httpx.get(f"{base}/workers", headers=admin_h, timeout=10).json()
        assert after["workers"] == [] and after["left_workers"] == 1 and after["lost_workers"] == 0
    finally:
        stop(proc)
        stop(proxy)
