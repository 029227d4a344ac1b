"""Sandboxes: ``sb = await create_sandbox(SandboxSpec(...))``; ``await sb.exec("pytest -q", timeout=30)``."""

from __future__ import annotations

from coderl.sandbox.base import ExecResult, Sandbox, SandboxSpec

__all__ = ["ExecResult", "Sandbox", "SandboxSpec", "create_sandbox"]


async def create_sandbox(spec: SandboxSpec | None = None, *, warm: bool = False) -> Sandbox:
    """Create and start a sandbox of ``spec.backend``; close it with ``async with`` or ``close()``.
    ``warm``: it will run many commands; get ready for them while the workspace fills (bwrap starts
    its exec agent; a sandbox that runs one command is cheaper without)."""
    spec = spec or SandboxSpec()
    sandbox: Sandbox
    if spec.backend == "bwrap":
        from coderl.sandbox.bwrap import BwrapSandbox

        sandbox = BwrapSandbox(spec)
    elif spec.backend == "process":
        from coderl.sandbox.process import ProcessSandbox

        sandbox = ProcessSandbox(spec)
    elif spec.backend == "docker":
        from coderl.sandbox.docker import DockerSandbox

        sandbox = DockerSandbox(spec)
    else:
        from coderl.sandbox.remote import RemoteSandbox

        sandbox = RemoteSandbox(spec)
    try:
        await sandbox.start(warm=warm)
    except BaseException:
        await sandbox.close()
        raise
    return sandbox
