"""The ``remote`` backend: a sandbox on a ``coderl sandbox serve`` host, over HTTP (see server.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import httpx

from coderl.errors import SandboxError
from coderl.sandbox.archive import pack, unpack
from coderl.sandbox.base import ExecResult, Sandbox, SandboxSpec


class RemoteSandbox(Sandbox):
    def __init__(self, spec: SandboxSpec) -> None:
        if not spec.remote_url or not spec.remote_token:
            raise SandboxError("sandbox.backend=remote needs sandbox.remote_url and sandbox.remote_token")
        self.spec = spec
        self._client = httpx.AsyncClient(
            base_url=spec.remote_url.rstrip("/"),
            headers={"Authorization": f"Bearer {spec.remote_token}"},
            timeout=httpx.Timeout(spec.timeout_s + 60, connect=10),
        )

    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if self._closed:
            raise SandboxError(f"remote sandbox {self.id or '?'} is closed")
        return await self._send(method, path, **kwargs)

    async def _send(self, method: str, path: str, missing_ok: bool = False, **kwargs: Any) -> httpx.Response:
        """The request; SandboxError for a transport failure or an error status (a 404 returns with
        ``missing_ok``)."""
        try:
            r = await self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise SandboxError(f"sandbox server {self.spec.remote_url}: {type(exc).__name__}: {exc}") from exc
        if r.status_code >= 400 and not (missing_ok and r.status_code == 404):
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            raise SandboxError(f"sandbox server answered {r.status_code} to {method} {path}: {detail}")
        return r

    async def start(self, warm: bool = False) -> None:
        body = self.spec.model_dump(
            mode="json", exclude={"workspace", "remote_url", "remote_token", "backend"}
        )
        self.id = (await self._call("POST", "/sandboxes", json=body)).json()["id"]
        if self.spec.workspace is not None:
            await self.upload(self.spec.workspace, ".")

    async def exec(
        self,
        cmd: str | list[str],
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        body = {"cmd": cmd, "timeout": timeout, "env": env, "cwd": cwd}
        limit = (timeout or self.spec.timeout_s) + 60
        data = (await self._call("POST", f"/sandboxes/{self.id}/exec", json=body, timeout=limit)).json()
        return ExecResult(**data)

    async def read_file(self, path: str) -> bytes:
        return (await self._call("GET", f"/sandboxes/{self.id}/file", params={"path": path})).content

    async def write_file(self, path: str, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        await self._call("PUT", f"/sandboxes/{self.id}/file", params={"path": path}, content=raw)

    async def upload(self, local_dir: str | Path, path: str = ".") -> None:
        source = Path(local_dir)
        if source.is_dir():
            data = pack(source)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                if source.is_file():
                    unpack_or_copy(source, Path(tmp))
                else:
                    raise SandboxError(f"upload source {str(source)!r} does not exist")
                data = pack(Path(tmp))
        await self._call("POST", f"/sandboxes/{self.id}/upload", params={"path": path}, content=data)

    async def download(self, path: str, local_dir: str | Path) -> list[str]:
        r = await self._call("GET", f"/sandboxes/{self.id}/download", params={"path": path})
        unpack(r.content, Path(local_dir))
        return (
            [f"<{r.headers.get('x-coderl-skipped', '0')} entries left out by the server>"]
            if r.headers.get("x-coderl-skipped", "0") != "0"
            else []
        )

    async def _close(self) -> None:
        try:
            if self.id:  # the server made it: it goes there too (a cancelled close() still sends this)
                # 404: the server has closed it already (its idle limit, or the server restarted)
                await self._send("DELETE", f"/sandboxes/{self.id}", missing_ok=True)
        finally:
            await self._client.aclose()


def unpack_or_copy(source: Path, dest: Path) -> None:
    """An archive is unpacked into ``dest``; any other file is copied into it."""
    from coderl.sandbox.hostfs import _is_archive, extract_archive

    if _is_archive(source):
        extract_archive(source, dest)
    else:
        (dest / source.name).write_bytes(source.read_bytes())
