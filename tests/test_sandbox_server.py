"""`coderl sandbox serve`'s own guarantees, over real HTTP on loopback with bwrap behind it: who may
use which sandbox, the per-client limit, the specs it refuses, the idle limit that closes the
sandboxes of a client that died without closing them, and a stop (SIGTERM) that does not wait for a
long command."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from coderl.errors import SandboxError
from coderl.sandbox import SandboxSpec, create_sandbox
from coderl.sandbox.hostsetup import state_dir, unmount
from coderl.sandbox.server import create_sandbox_app
from tests.servers import free_port, serve

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

A, B = "token-of-a", "token-of-b"


def _client(url: str, token: str) -> SandboxSpec:
    return SandboxSpec(backend="remote", remote_url=url, remote_token=token)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_client_sees_only_its_own_sandboxes_and_needs_a_known_token() -> None:
    with serve(create_sandbox_app([A, B], SandboxSpec(backend="bwrap"))) as url:
        async with await create_sandbox(_client(url, A)) as mine:
            await mine.write_file("secret.txt", "a's\n")
            async with httpx.AsyncClient(base_url=url) as http:
                for method, path in [
                    ("POST", f"/sandboxes/{mine.id}/exec"),
                    ("GET", f"/sandboxes/{mine.id}/file?path=secret.txt"),
                    ("DELETE", f"/sandboxes/{mine.id}"),
                ]:
                    body = {"cmd": "cat secret.txt"} if method == "POST" else None
                    other = await http.request(method, path, json=body, headers=_bearer(B))
                    assert other.status_code == 404 and mine.id in other.json()["detail"], (method, path)
                    for headers in ({}, _bearer("not-a-token"), {"Authorization": A}):
                        refused = await http.request(method, path, json=body, headers=headers)
                        assert refused.status_code == 401, (method, path, headers)
                assert (await http.get("/health")).json()["sandboxes"] == 1
            assert (await mine.exec("cat secret.txt")).stdout == "a's\n"  # B's DELETE removed nothing


async def test_the_per_client_limit_and_the_specs_it_refuses() -> None:
    with pytest.raises(SandboxError, match="remote backend itself"):
        create_sandbox_app([A], SandboxSpec(backend="remote", remote_url="http://x", remote_token="t"))
    with pytest.raises(SandboxError, match="at least one client token"):
        create_sandbox_app([])
    with pytest.raises(SandboxError, match="must not be empty"):
        create_sandbox_app([A, ""])  # "" would let in a request with no token at all
    with pytest.raises(SandboxError, match=r"idle limit .* not 0"):
        create_sandbox_app([A], idle_s=0)
    with serve(create_sandbox_app([A, B], SandboxSpec(backend="bwrap"), max_sandboxes=1)) as url:
        async with await create_sandbox(_client(url, A)):
            with pytest.raises(SandboxError, match=r"429 .* already has 1 sandboxes"):
                await create_sandbox(_client(url, A))
            async with await create_sandbox(_client(url, B)) as theirs:  # the limit is per client
                assert (await theirs.exec("echo b")).stdout == "b\n"
        async with httpx.AsyncClient(base_url=url, headers=_bearer(A)) as http:
            bad = await http.post("/sandboxes", json={"timeout_s": -1})
            assert bad.status_code == 422 and "timeout_s" in bad.json()["detail"]


async def test_a_sandbox_no_request_uses_is_closed_after_the_idle_limit_and_a_running_one_is_not() -> None:
    with serve(create_sandbox_app([A], SandboxSpec(backend="bwrap"), idle_s=0.6)) as url:
        idle = await create_sandbox(_client(url, A))
        busy = await create_sandbox(_client(url, A))
        workspace, busy_workspace = (state_dir() / "ws" / sb.id for sb in (idle, busy))
        assert workspace.exists()
        long = await busy.exec("sleep 2; echo done")  # three idle limits inside one request
        assert long.ok and long.stdout == "done\n" and busy_workspace.exists()
        deadline = time.monotonic() + 10
        while workspace.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not workspace.exists()
        said = r"404 .*closed it after [0-9.]+ s without a request \(its idle limit, server.sandbox_idle_s, is 0.6 s"
        with pytest.raises(SandboxError, match=said):
            await idle.exec("true")
        await busy.close()
        assert not busy_workspace.exists()
        await idle.close()  # the server has already closed it: the client's close says nothing


def test_sigterm_ends_a_running_command_at_once_and_the_server_exits_143() -> None:
    """`coderl sandbox serve` told to stop while a client waits on `sleep 60`: the command is killed,
    the client gets a 503 saying why, the server exits 143 within seconds (it used to wait for the
    command: 40 s for a `sleep 40`, past a container platform's 30 s grace) and leaves no workspace."""
    boxes, port = Path(tempfile.mkdtemp(prefix="coderl-serve-test-")), free_port()  # as /tmp's, traversable
    env = {**os.environ, "CODERL_SANDBOX_DIR": str(boxes)}
    argv = [sys.executable, "-m", "coderl", "sandbox", "serve", f"server.tokens=[{A}]", f"server.port={port}"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        sid = httpx.post(f"{url}/sandboxes", json={}, headers=_bearer(A), timeout=30).json()["id"]
        answer: list[httpx.Response] = []
        cmd = {"cmd": "sleep 60", "timeout": 120}
        waiter = threading.Thread(
            target=lambda: answer.append(httpx.post(f"{url}/sandboxes/{sid}/exec", json=cmd, headers=_bearer(A), timeout=120))
        )
        waiter.start()
        time.sleep(1.0)  # the command is running
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        took = time.monotonic() - sent
        waiter.join(timeout=30)
        out = proc.stdout.read() if proc.stdout else ""
    finally:
        proc.kill()
        proc.wait()
        for line in Path("/proc/mounts").read_text().splitlines():
            if str(boxes) in line:
                unmount(Path(line.split()[1]))
        left = list((boxes / "ws").iterdir()) if (boxes / "ws").is_dir() else []
        shutil.rmtree(boxes, ignore_errors=True)
    assert answer and answer[0].status_code == 503, (answer[0].text if answer else None, out[-800:])
    assert code == 143 and took < 10, (code, took, out[-2000:])
    assert answer and answer[0].status_code == 503 and "shutting down" in answer[0].text, out[-2000:]
    assert "Traceback" not in out and not left, out[-2000:]
