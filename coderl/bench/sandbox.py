"""``coderl bench sandbox``: create -> exec ``true`` -> close latency and throughput per backend,
and grading time per bundled task (gold patch). Docker is measured where a daemon answers, on
``sandbox.image`` where given, else on coderl's task image (``coderl sandbox image build``)."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

from coderl.bench.report import machine_info, percentile
from coderl.ports import free_port
from coderl.progress import progress_bars
from coderl.sandbox import SandboxSpec, create_sandbox

CONCURRENCY = (1, 8, 32)


async def _cycle(spec: SandboxSpec) -> float:
    t0 = time.perf_counter()
    sb = await create_sandbox(spec)
    try:
        r = await sb.exec("true")
        if r.exit_code != 0:
            raise RuntimeError(f"'true' failed in the {spec.backend} sandbox: {r.stderr}")
    finally:
        await sb.close()
    return time.perf_counter() - t0


async def _backend(spec: SandboxSpec, n: int, per_worker: int) -> dict[str, Any]:
    await _cycle(spec)  # warm-up
    lat = [await _cycle(spec) for _ in range(n)]
    throughput: dict[str, float] = {}
    for c in CONCURRENCY:

        async def worker() -> None:
            for _ in range(per_worker):
                await _cycle(spec)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(c)))
        throughput[str(c)] = c * per_worker / (time.perf_counter() - t0)
    return {
        "create_exec_close_p50_ms": 1000 * percentile(lat, 50),
        "create_exec_close_p99_ms": 1000 * percentile(lat, 99),
        "throughput_per_s": throughput,
        "samples": n,
    }


async def bench_sandbox(
    base: SandboxSpec, quick: bool = False, console: Console | None = None
) -> dict[str, Any]:
    console = console or Console(stderr=True)
    n, per_worker = (20, 2) if quick else (200, 5)
    backends: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    with progress_bars(console, TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()) as progress:
        bar = progress.add_task("sandboxes", total=5)
        for name in ("bwrap", "process"):
            progress.update(bar, description=f"{name}: create/exec/close")
            backends[name] = await _backend(base.model_copy(update={"backend": name}), n, per_worker)
            progress.advance(bar)
        progress.update(bar, description="remote (bwrap behind a loopback server)")
        backends["remote"] = await _remote(base, n // 2, per_worker)
        progress.advance(bar)
        docker, reason = await _docker_spec(base)
        if docker is None:
            skipped["docker"] = reason
        else:
            progress.update(bar, description=f"docker ({docker.image}): create/exec/close")
            backends["docker"] = {**await _backend(docker, max(5, n // 20), 1), "image": docker.image}
        progress.advance(bar)
        progress.update(bar, description="grading bundled tasks (gold patches)")
        grading = await _grading(base, quick)
        progress.advance(bar)
    return {"backends": backends, "skipped": skipped, "grading": grading, "machine": machine_info()}


async def _docker_spec(base: SandboxSpec) -> tuple[SandboxSpec | None, str]:
    """The spec docker is measured with (``sandbox.image`` where given, else coderl's task image), or
    None and why docker cannot be measured here."""
    from coderl.sandbox.docker import docker_available
    from coderl.sandbox.image import BUILD_COMMAND, image_present, image_tag

    reason = await docker_available()
    if reason:
        return None, reason
    image = base.image or image_tag()
    if not await asyncio.to_thread(image_present, image):
        return (
            None,
            f"image {image} is not on the Docker daemon; build coderl's task image with `{BUILD_COMMAND}`",
        )
    return base.model_copy(update={"backend": "docker", "image": image}), ""


async def _remote(base: SandboxSpec, n: int, per_worker: int) -> dict[str, Any]:
    import uvicorn

    from coderl.sandbox.server import create_sandbox_app

    token = secrets.token_urlsafe(16)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_sandbox_app([token], base.model_copy(update={"backend": "bwrap"})),
            port=port,
            log_level="warning",
        )
    )
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110  (uvicorn exposes a flag, not an event)
        await asyncio.sleep(0.02)
    try:
        spec = base.model_copy(
            update={"backend": "remote", "remote_url": f"http://127.0.0.1:{port}", "remote_token": token}
        )
        return await _backend(spec, n, per_worker)
    finally:
        server.should_exit = True
        await task


async def _grading(base: SandboxSpec, quick: bool) -> dict[str, Any]:
    from coderl.tasks import grade, load_tasks

    tasks = load_tasks("bundled")
    if quick:
        tasks = tasks[:4]
    seconds: dict[str, float] = {}
    for task in tasks:
        result = await grade(task, task.gold_patch or "", base)
        seconds[task.id] = round(result.duration_s, 3)
    values = list(seconds.values())
    return {
        "tasks": len(values),
        "p50_s": percentile(values, 50),
        "max_s": max(values) if values else float("nan"),
        "per_task_s": seconds,
    }


def to_markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    rows = []
    for name, b in r["backends"].items():
        tp = b["throughput_per_s"]
        rows.append(
            f"| {name} | {b['create_exec_close_p50_ms']:.1f} | {b['create_exec_close_p99_ms']:.1f} | "
            + " | ".join(f"{tp[str(c)]:.0f}" for c in CONCURRENCY)
            + " |"
        )
    skipped = "".join(f"\n- {k}: skipped — {v}" for k, v in r["skipped"].items())
    if "docker" in r["backends"]:
        skipped += (
            f"\n- docker: image `{r['backends']['docker'].get('image', '?')}`, one container per sandbox"
        )
    g = r["grading"]
    return f"""## Sandboxes (`coderl bench sandbox`)

Command: `{r.get("command", "coderl bench sandbox")}` — {m["cpu"]}, {m["cores"]} cores.
Each cycle creates a sandbox with an empty workspace, runs `true` in it and closes it.

| backend | create+exec+close p50 (ms) | p99 (ms) | cycles/s, 1 concurrent | 8 | 32 |
|---|---|---|---|---|---|
{chr(10).join(rows)}
{skipped}

Target: bwrap p50 under 20 ms. Grading (gold patch, fresh sandbox, hidden tests, JUnit report) over
{g["tasks"]} bundled tasks: p50 {g["p50_s"]:.2f} s, slowest {g["max_s"]:.2f} s (target: every task under 5 s).
"""
