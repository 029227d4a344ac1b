"""``coderl bench proxy``: what the recording proxy costs an agent, against calling the engine directly
and against LiteLLM's proxy in front of the same engine.

Processes (each one uvicorn worker, all on loopback): two scripted engine servers
(:mod:`coderl.bench.proxy_engine`; one answers at once, one after ``--latency`` s), a ``coderl proxy
serve`` in front of each (``engine.type=http``, token ids over ``/v1/completions``) and, unless
``--no-litellm``, a LiteLLM proxy in front of each (installed on first use into its own virtualenv
under the coderl cache folder, so its pinned dependencies never touch this environment). The load
generator is this process (aiohttp, asyncio: one pooled session, no connection cap). It was httpx
until 2026-11-25, whose pool set the figure at high concurrency: calling the 1-s scripted engine
directly with 256 sessions, httpx made 49 calls/s where aiohttp made 225 (ideal 256), side by side on
a 2-core machine.

(a) Added latency: one session, sequential OpenAI chat calls, each with a different question (an
identical body would be answered from the proxy's record), streaming and not; p50 / p99 of the time
to the whole answer through a proxy minus the same percentile calling the engine's own chat route.
The coderl proxy is measured twice: on chat completions and on the Responses API (``/v1/responses``,
the same question as ``input``), both against the engine's chat route.
(b) Throughput: N sessions at once (1, 64, 256), each making ``--calls`` calls in turn, against the
engine that answers after ``--latency`` s; calls per second through a proxy divided by calls per
second calling the engine directly.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
from rich.console import Console

from coderl.bench.report import machine_info, percentile
from coderl.ports import free_port

LEVELS = (1, 64, 256)
ADMIN = "bench-admin-token"


def _spawn(stack: ExitStack, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a server process; its output goes to a temporary file (a pipe nobody reads could fill up)."""
    log = stack.enter_context(tempfile.TemporaryFile())
    proc = subprocess.Popen(argv, stdout=log, stderr=log, env={**os.environ, **(env or {})})
    proc.log = log  # type: ignore[attr-defined]

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()

    stack.callback(stop)
    return proc


async def _wait_ready(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as client:
        while True:
            if proc.poll() is not None:
                log = proc.log  # type: ignore[attr-defined]
                log.seek(0)
                err = log.read().decode(errors="replace")[-800:]
                raise RuntimeError(f"{what} exited with {proc.returncode}: {err}")
            try:
                async with client.get(url) as r:
                    if r.status < 500:
                        return
            except (TimeoutError, aiohttp.ClientError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not answer {url} within {timeout:g} s")
            await asyncio.sleep(0.3)


def litellm_executable(console: Console) -> Path:
    """LiteLLM's proxy CLI in a virtualenv of its own (created on first use)."""
    from platformdirs import user_cache_dir

    venv = Path(os.environ.get("CODERL_CACHE_DIR") or user_cache_dir("coderl")) / "bench-litellm-venv"
    exe = venv / "bin" / "litellm"
    if not exe.is_file():
        with console.status(f"installing litellm[proxy] into {venv} (once)"):
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run(
                [str(venv / "bin" / "pip"), "install", "-q", "litellm[proxy]"],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )  # fmt: skip
    return exe


class Target:
    """One way of calling the engine: its chat URL, and headers per session."""

    def __init__(
        self, name: str, base: str, sessions: list[tuple[str, str]] | None = None, responses: bool = False
    ) -> None:
        self.name = name
        self.base = base
        self.sessions = sessions  # (base_url, secret) per session for the coderl proxy
        self.responses = responses  # the coderl proxy's Responses API instead of chat completions

    def url_and_headers(self, i: int) -> tuple[str, dict[str, str]]:
        if self.sessions is None:
            return f"{self.base}/v1/chat/completions", {"Authorization": "Bearer sk-bench"}
        base, secret = self.sessions[i % len(self.sessions)]
        route = "responses" if self.responses else "chat/completions"
        return f"{base}/{route}", {"Authorization": f"Bearer {secret}"}

    def body(self, question: str, stream: bool) -> dict[str, Any]:
        if self.responses:
            return {"model": "coderl", "input": question, "max_output_tokens": 32, "stream": stream}
        return {"model": "coderl", "messages": [{"role": "user", "content": question}], "max_tokens": 32, "stream": stream}


async def _sessions(client: aiohttp.ClientSession, proxy: str, n: int) -> list[tuple[str, str]]:
    out = []
    for _ in range(n):
        async with client.post(
            f"{proxy}/sessions", headers={"Authorization": f"Bearer {ADMIN}"}, json={}
        ) as r:
            r.raise_for_status()
            body = await r.json()
        out.append((body["openai_base_url"], body["secret"]))
    return out


async def _call(client: aiohttp.ClientSession, target: Target, i: int, n: int, stream: bool) -> float:
    return (await _timed_call(client, target, i, n, stream))[0]


async def _timed_call(
    client: aiohttp.ClientSession, target: Target, i: int, n: int, stream: bool
) -> tuple[float, float]:
    """(seconds to the whole answer, seconds to the first chunk with content; the same when not streamed)."""
    url, headers = target.url_and_headers(i)
    body = target.body(f"Session {i}, question {n}: why does test_{n} fail?", stream)
    t0 = time.perf_counter()
    first = 0.0
    async with client.post(url, json=body, headers=headers) as r:
        if r.status != 200:
            raise RuntimeError(f"{target.name}: HTTP {r.status}: {(await r.read())[:300]!r}")
        if stream:
            async for raw in r.content:
                line = raw.decode().replace(" ", "")
                text = '"content":"' in line and '"content":""' not in line  # a chat chunk with text
                delta = '"type":"response.output_text.delta"' in line and '"delta":""' not in line  # Responses
                if not first and (text or delta):
                    first = time.perf_counter() - t0
        else:
            await r.read()
    total = time.perf_counter() - t0
    return total, first or total


async def _latency(
    client: aiohttp.ClientSession, target: Target, n: int, stream: bool
) -> list[tuple[float, float]]:
    for k in range(5):  # warm-up: connections, caches, first-call imports
        await _call(client, target, 0, -1 - k, stream)
    return [await _timed_call(client, target, 0, k, stream) for k in range(n)]


async def _throughput(
    client: aiohttp.ClientSession, target: Target, sessions: int, calls: int
) -> tuple[float, int]:
    """Successful calls per second, and how many calls failed (a dropped connection, a 5xx)."""
    failed = 0

    async def session(i: int) -> None:
        nonlocal failed
        for k in range(calls):
            try:
                await _call(client, target, i, k, False)
            except (TimeoutError, aiohttp.ClientError, RuntimeError):
                failed += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(session(i) for i in range(sessions)))
    return (sessions * calls - failed) / (time.perf_counter() - t0), failed


async def bench_proxy(
    quick: bool = False,
    latency_s: float = 1.0,
    calls: int = 4,
    litellm: bool = True,
    console: Console | None = None,
) -> dict[str, Any]:
    console = console or Console(stderr=True)
    n_latency = 40 if quick else 300
    levels = (1, 16) if quick else LEVELS
    py = sys.executable
    result: dict[str, Any] = {"machine": machine_info(), "latency_calls": n_latency, "levels": list(levels),
                              "engine_latency_s": latency_s, "calls_per_session": calls}  # fmt: skip
    with ExitStack() as stack:
        engines, proxies, lites = {}, {}, {}
        for kind, lat in (("instant", 0.0), ("slow", latency_s)):
            port = free_port()
            proc = _spawn(
                stack, [py, "-m", "coderl.bench.proxy_engine", "--port", str(port), "--latency", str(lat)]
            )
            engines[kind] = (f"http://127.0.0.1:{port}", proc)
        with console.status(
            "starting scripted engines, coderl proxies" + (" and LiteLLM" if litellm else "")
        ):
            for kind, (url, proc) in engines.items():
                await _wait_ready(f"{url}/health", proc, f"scripted engine ({kind})")
                port = free_port()
                db = (
                    Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="coderl-bench-proxy-")))
                    / "record.sqlite"
                )
                proxy = _spawn(stack, [
                    py, "-m", "coderl.cli.main", "proxy", "serve", f"proxy.port={port}", f"proxy.admin_token={ADMIN}",
                    f"proxy.db={db}", "engine.type=http", "engine.api=coderl", f"engine.urls=[{url}]",
                    "engine.max_retries=0", "run.log_level=warning",
                ])  # fmt: skip
                proxies[kind] = (f"http://127.0.0.1:{port}", proxy)
            for kind, (url, proc) in proxies.items():
                await _wait_ready(f"{url}/health", proc, f"coderl proxy ({kind})")
            if litellm:
                try:
                    exe = litellm_executable(console)
                    for kind, (url, _) in engines.items():
                        port = free_port()
                        proc = _spawn(
                            stack,
                            [str(exe), "--model", "openai/coderl", "--api_base", f"{url}/v1", "--port", str(port),
                             "--num_workers", "1"],
                            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENAI_API_KEY": "sk-bench",
                                 "LITELLM_MASTER_KEY": "sk-bench", "LITELLM_LOG": "ERROR"},
                        )  # fmt: skip
                        lites[kind] = (f"http://127.0.0.1:{port}", proc)
                    for kind, (url, proc) in lites.items():
                        await _wait_ready(f"{url}/health/liveliness", proc, f"LiteLLM ({kind})")
                except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
                    result["litellm"] = {"skipped": f"{type(exc).__name__}: {exc}"[:500]}
                    lites = {}
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=120)
        ) as client:
            targets: dict[str, dict[str, Target]] = {
                "direct": {k: Target("direct", u) for k, (u, _) in engines.items()},
                "coderl": {k: Target("coderl", u, await _sessions(client, u, max(levels))) for k, (u, _) in proxies.items()},
                "responses": {
                    k: Target("coderl-responses", u, await _sessions(client, u, max(levels)), responses=True)
                    for k, (u, _) in proxies.items()
                },
                **({"litellm": {k: Target("litellm", u) for k, (u, _) in lites.items()}} if lites else {}),
            }  # fmt: skip
            figures: dict[str, dict[str, Any]] = {name: {} for name in targets}
            for stream in (False, True):
                tag = "stream" if stream else "plain"
                for name, by_kind in targets.items():
                    console.print(f"latency ({tag}): {name}")
                    timed = await _latency(client, by_kind["instant"], n_latency, stream)
                    times = [t for t, _ in timed]
                    figures[name][f"p50_{tag}_ms"] = percentile(times, 50) * 1000
                    figures[name][f"p99_{tag}_ms"] = percentile(times, 99) * 1000
                    if stream:
                        figures[name]["p50_first_chunk_ms"] = percentile([f for _, f in timed], 50) * 1000
            for level in levels:
                for name, by_kind in targets.items():
                    console.print(f"throughput at {level} sessions: {name}")
                    rps, failed = await _throughput(client, by_kind["slow"], level, calls)
                    figures[name][f"rps_{level}"], figures[name][f"failed_{level}"] = rps, failed
    direct = figures["direct"]
    for name in ("coderl", "responses", "litellm"):
        if name not in figures:
            continue
        f = figures[name]
        summary = {
            "added_latency_p50_ms": f["p50_plain_ms"] - direct["p50_plain_ms"],
            "added_latency_p99_ms": f["p99_plain_ms"] - direct["p99_plain_ms"],
            "added_latency_p50_stream_ms": f["p50_stream_ms"] - direct["p50_stream_ms"],
            "added_latency_p99_stream_ms": f["p99_stream_ms"] - direct["p99_stream_ms"],
            "first_chunk_p50_ms": f["p50_first_chunk_ms"],
            **{f"throughput_ratio_{lv}": f[f"rps_{lv}"] / direct[f"rps_{lv}"] for lv in levels},
            "raw": f,
        }
        if name == "coderl":
            result.update(summary)
        else:
            result[name] = summary
    result["direct"] = direct
    return result


def _ratio(f: dict[str, Any], level: int, calls: int) -> str:
    failed = f["raw"].get(f"failed_{level}", 0)
    note = f" ({failed} of {level * calls} calls failed)" if failed else ""
    return f"{f[f'throughput_ratio_{level}']:.2f}{note}"


def to_markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    rows = [("coderl proxy, chat completions", r)]
    if "responses" in r:
        rows.append(("coderl proxy, Responses API", r["responses"]))
    lite = r.get("litellm") or {}
    if "added_latency_p50_ms" in lite:
        rows.append(("LiteLLM proxy", lite))
    lines = [
        "## Recording proxy (`coderl bench proxy`)",
        "",
        f"Command: `{r['command']}` — {m['cpu']}, {m['cores']} cores. All processes on this machine (one uvicorn "
        f"worker each): scripted engine servers, the proxies in front of them, and the load generator. Latency: "
        f"{r['latency_calls']} sequential calls of one session, engine answering at once. Throughput: N sessions "
        f"x {r['calls_per_session']} calls, engine answering after {r['engine_latency_s']:g} s.",
        "",
        "| | added p50 (ms) | added p99 (ms) | added p50, streaming | added p99, streaming | "
        + " | ".join(f"throughput ÷ direct at {lv}" for lv in r["levels"])
        + " |",
        "|---|---|---|---|---|" + "---|" * len(r["levels"]),
    ]
    for label, f in rows:
        lines.append(
            f"| {label} | {f['added_latency_p50_ms']:.2f} | {f['added_latency_p99_ms']:.2f} | "
            f"{f['added_latency_p50_stream_ms']:.2f} | {f['added_latency_p99_stream_ms']:.2f} | "
            + " | ".join(_ratio(f, lv, r["calls_per_session"]) for lv in r["levels"])
            + " |"
        )
    d = r["direct"]
    lines += [
        "",
        f"Direct: p50 {d['p50_plain_ms']:.2f} ms (streaming {d['p50_stream_ms']:.2f} ms, first content chunk "
        f"{d['p50_first_chunk_ms']:.2f} ms; through coderl {r['first_chunk_p50_ms']:.2f} ms: the engine answers "
        "at once here, so this is the proxy's own time to its first chunk); "
        + ", ".join(f"{d[f'rps_{lv}']:.1f} calls/s at {lv}" for lv in r["levels"])
        + ". "
        f"The engine-bound ideal is N / {r['engine_latency_s']:g} s calls/s (256 at 256 sessions): where direct falls "
        "short of it, the machine's cores, shared by every process here, are the limit, and the ratios measure "
        "how each proxy fares under that contention. "
        "Targets (coderl): p50 added latency under 2 ms; throughput ≥ 0.90 of direct at 256 sessions.",
    ]
    if "skipped" in lite:
        lines += ["", f"LiteLLM was not measured: {lite['skipped']}"]
    return "\n".join(lines)
