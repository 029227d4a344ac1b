"""Run an ASGI app on a real loopback port in a background thread (for client tests)."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import uvicorn

from coderl.ports import free_port


@contextlib.contextmanager
def serve(
    app: Any,
    timeout_s: float = 120.0,
    port: int | None = None,
    make_server: Callable[[uvicorn.Config], uvicorn.Server] = uvicorn.Server,
) -> Iterator[str]:
    port = port or free_port()
    server = make_server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def wait_healthy(url: str, proc: subprocess.Popen[Any], timeout_s: float = 120.0) -> None:
    """Poll ``url`` until it answers 200; fail at once if the server process exits."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else "server exited"
        assert time.monotonic() < deadline, f"{url} did not come up in {timeout_s:g} s"
        time.sleep(0.3)
