"""``coderl sandbox serve``: sandboxes on this host for clients elsewhere (the ``remote`` backend).

Every request needs ``Authorization: Bearer <token>``; each token is one client, and a client sees
only the sandboxes it created (others' ids answer 404). The server decides the backend (bwrap by
default); a client chooses the limits and the workspace. A sandbox no request has used for
``idle_s`` seconds (and none is using) is closed: its client died without a DELETE. A later request
for it answers 404 saying so. A server told to stop (SIGTERM, Ctrl-C) first ends the commands
requests are waiting for (:class:`SandboxServer`): they are killed at once and their requests answer
503, instead of the server waiting for a command that may run for minutes.

  POST   /sandboxes                     body: SandboxSpec fields -> {"id": ...}
  POST   /sandboxes/{id}/exec           {"cmd", "timeout", "env", "cwd"} -> ExecResult
  GET    /sandboxes/{id}/file?path=P    file bytes
  PUT    /sandboxes/{id}/file?path=P    body: file bytes
  POST   /sandboxes/{id}/upload?path=P  body: tar.gz of a folder
  GET    /sandboxes/{id}/download?path=P  tar.gz (links leaving the workspace are left out)
  DELETE /sandboxes/{id}
  GET    /health
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import logging
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from coderl.errors import SandboxError
from coderl.sandbox.archive import pack, unpack
from coderl.sandbox.base import Sandbox, SandboxSpec
from coderl.serving import SHUTDOWN_GRACE_S

MAX_BODY = 256 << 20
STOPPING = "the sandbox server is shutting down: the sandbox was closed"
"""What a request hears when the server's stop ended its command or closed its sandbox (a 503)."""

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Held:
    """A served sandbox: whose it is, and when a request last used it (``busy`` are under way)."""

    owner: str
    sandbox: Sandbox
    used: float = dataclasses.field(default_factory=time.monotonic)
    busy: int = 0

    @contextlib.contextmanager
    def use(self) -> Iterator[Sandbox]:
        self.busy += 1
        self.used = time.monotonic()
        try:
            yield self.sandbox
        finally:
            self.busy -= 1
            self.used = time.monotonic()


class ExecRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cmd: str | list[str]
    timeout: float | None = Field(None, gt=0, le=24 * 3600)
    env: dict[str, str] | None = None
    cwd: str | None = None


def create_sandbox_app(
    tokens: list[str],
    backend_spec: SandboxSpec | None = None,
    max_sandboxes: int = 256,
    idle_s: float | None = 3600.0,
) -> FastAPI:
    """The server app; ``tokens`` are the accepted client tokens (at least one); ``idle_s``: close a
    sandbox no request has used for that long (None: never)."""
    if not tokens:
        raise SandboxError("the sandbox server needs at least one client token")
    if any(not t.strip() for t in tokens):
        raise SandboxError("the sandbox server's client tokens must not be empty: one would let in requests that carry none")
    if idle_s is not None and idle_s <= 0:
        raise SandboxError(f"the sandbox server's idle limit must be positive seconds or None, not {idle_s}")
    base = backend_spec or SandboxSpec()
    if base.backend == "remote":
        raise SandboxError("a sandbox server cannot use the remote backend itself; use bwrap or docker")
    digests = {hashlib.sha256(t.encode()).hexdigest() for t in tokens}
    owned: dict[str, _Held] = {}
    expired: dict[str, float] = {}  # id -> the idle seconds it was closed after (the latest 1,024)
    reaping: set[Sandbox] = set()  # being closed by the reaper
    stopping: list[bool] = []  # set once the server stops: requests then answer 503
    running: set[asyncio.Future[Any]] = set()  # the commands requests are waiting for

    async def stop_commands() -> None:
        stopping.append(True)
        if running:
            log.warning("the server is stopping: ending %d command(s) still running", len(running))
            for job in running:
                job.cancel()  # kills the command's process group
            await asyncio.wait(set(running), timeout=SHUTDOWN_GRACE_S)  # then uvicorn's own grace

    def refuse_if_stopping() -> None:
        if stopping:
            raise HTTPException(503, STOPPING, {"Retry-After": "5"})

    async def reap(limit: float) -> None:
        while True:
            await asyncio.sleep(min(limit / 2, 30.0))
            now = time.monotonic()
            for sid, held in list(owned.items()):
                if held.busy or now - held.used < limit or owned.get(sid) is not held:
                    continue
                del owned[sid]
                expired[sid] = now - held.used
                while len(expired) > 1024:
                    del expired[next(iter(expired))]
                log.warning("sandbox %s: no request for %.1f s (its client is gone?): closed", sid, now - held.used)
                reaping.add(held.sandbox)  # a shutdown meanwhile waits for this close (it is out of owned)
                try:
                    await held.sandbox.close()
                except Exception:  # one sandbox's failure must not stop the reaper
                    log.exception("sandbox %s: closing it after its idle limit failed", sid)
                finally:
                    reaping.discard(held.sandbox)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        reaper = asyncio.create_task(reap(idle_s)) if idle_s is not None else None
        try:
            yield
        finally:
            if reaper is not None:
                reaper.cancel()
                await asyncio.wait([reaper])
            for sandbox in [*reaping, *(held.sandbox for held in owned.values())]:
                await sandbox.close()  # idempotent: one the reaper was closing is waited for
            owned.clear()

    app = FastAPI(title="coderl sandbox server", lifespan=lifespan)
    app.state.stop_commands = stop_commands

    def client(request: Request) -> str:
        auth = request.headers.get("authorization", "")
        token = auth[7:] if auth.lower().startswith("bearer ") else ""
        digest = hashlib.sha256(token.encode()).hexdigest()
        if not any(hmac.compare_digest(digest, d) for d in digests):
            raise HTTPException(401, "missing or unknown bearer token")
        return digest

    def held_by(sid: str, who: str) -> _Held:
        held = owned.get(sid)
        if held is None or not hmac.compare_digest(held.owner, who):
            if sid in expired and held is None:
                raise HTTPException(
                    404, f"no sandbox {sid!r}: the server closed it after {expired[sid]:.1f} s without a request "
                    f"(its idle limit, server.sandbox_idle_s, is {idle_s:g} s)",
                )  # fmt: skip
            raise HTTPException(404, f"no sandbox {sid!r}")
        return held

    @app.exception_handler(SandboxError)
    async def _sandbox_error(_: Request, exc: SandboxError) -> JSONResponse:
        if stopping:  # the sandbox was closed under the request
            return JSONResponse({"detail": STOPPING}, 503)
        return JSONResponse({"detail": str(exc)}, 400)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "backend": base.backend, "sandboxes": len(owned), "idle_s": idle_s}

    @app.post("/sandboxes")
    async def create(body: dict[str, Any], who: str = Depends(client)) -> dict[str, str]:
        if sum(1 for held in owned.values() if held.owner == who) >= max_sandboxes:
            raise HTTPException(429, f"this client already has {max_sandboxes} sandboxes; close some")
        fields = {
            k: v for k, v in body.items() if k not in ("backend", "workspace", "remote_url", "remote_token")
        }
        try:
            spec = SandboxSpec.model_validate({**base.model_dump(exclude={"workspace"}), **fields})
        except Exception as exc:
            raise HTTPException(422, f"invalid sandbox spec: {exc}") from None
        from coderl.sandbox import create_sandbox

        sb = await create_sandbox(spec)
        owned[sb.id] = _Held(who, sb)
        return {"id": sb.id}

    @app.post("/sandboxes/{sid}/exec")
    async def exec_(sid: str, body: ExecRequest, who: str = Depends(client)) -> dict[str, Any]:
        refuse_if_stopping()
        with held_by(sid, who).use() as sb:
            job = asyncio.ensure_future(sb.exec(body.cmd, timeout=body.timeout, env=body.env, cwd=body.cwd))
            running.add(job)
            try:
                result = await job
            except asyncio.CancelledError:
                this = asyncio.current_task()
                if stopping and this is not None and not this.cancelling():
                    refuse_if_stopping()  # the shutdown ended the command, not its client
                raise
            finally:
                running.discard(job)
        return dataclasses.asdict(result)

    @app.get("/sandboxes/{sid}/file")
    async def read(sid: str, path: str, who: str = Depends(client)) -> Response:
        with held_by(sid, who).use() as sb:
            return Response(await sb.read_file(path), media_type="application/octet-stream")

    @app.put("/sandboxes/{sid}/file")
    async def write(sid: str, path: str, request: Request, who: str = Depends(client)) -> dict[str, bool]:
        with held_by(sid, who).use() as sb:
            await sb.write_file(path, await _body(request))
        return {"ok": True}

    @app.post("/sandboxes/{sid}/upload")
    async def upload(
        sid: str, request: Request, path: str = ".", who: str = Depends(client)
    ) -> dict[str, bool]:
        with held_by(sid, who).use() as sb:
            data = await _body(request)
            with tempfile.TemporaryDirectory() as tmp:
                unpack(data, Path(tmp))
                await sb.upload(tmp, path)
        return {"ok": True}

    @app.get("/sandboxes/{sid}/download")
    async def download(sid: str, path: str = ".", who: str = Depends(client)) -> Response:
        with held_by(sid, who).use() as sb, tempfile.TemporaryDirectory() as tmp:
            skipped = await sb.download(path, tmp)
            data = pack(Path(tmp))
        return Response(data, media_type="application/gzip", headers={"x-coderl-skipped": str(len(skipped))})

    @app.delete("/sandboxes/{sid}")
    async def delete(sid: str, who: str = Depends(client)) -> dict[str, bool]:
        held = held_by(sid, who)
        owned.pop(sid, None)
        await held.sandbox.close()
        return {"ok": True}

    return app


async def _body(request: Request) -> bytes:
    size = int(request.headers.get("content-length") or 0)
    if size > MAX_BODY:
        raise HTTPException(413, f"body of {size} bytes is over the {MAX_BODY}-byte limit")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY:
            raise HTTPException(413, f"body is over the {MAX_BODY}-byte limit")
    return bytes(data)


class SandboxServer(uvicorn.Server):
    """uvicorn's server whose shutdown first ends the commands requests are waiting for (module doc)."""

    def __init__(self, config: uvicorn.Config, stop_commands: Callable[[], Awaitable[None]]) -> None:
        super().__init__(config)
        self.stop_commands = stop_commands

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.stop_commands()
        await super().shutdown(sockets)
