"""Backends the sandbox contract suite runs against, each skipped with its reason where unavailable."""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from coderl.errors import SandboxError
from coderl.sandbox.base import SandboxSpec
from coderl.sandbox.docker import docker_cli
from coderl.sandbox.image import BUILD_COMMAND, image_present, image_tag
from coderl.sandbox.server import create_sandbox_app
from tests.servers import serve

TOKEN = "client-token-a"
OTHER_TOKEN = "client-token-b"


@functools.lru_cache(maxsize=1)
def docker_skip_reason() -> str | None:
    """Why the docker tests cannot run here (no CLI, no daemon, no task image), or None."""
    try:
        cli = docker_cli()
    except SandboxError as exc:
        return str(exc)
    r = subprocess.run(
        [cli, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=20
    )
    if r.returncode != 0:
        return (
            f"no Docker daemon is reachable here ({(r.stderr or r.stdout).strip()[:120]}); "
            "as root: dockerd --bridge=none --iptables=false &"
        )
    if not image_present(image_tag(), cli):
        return f"the task image {image_tag()} is not on the daemon; build it with `{BUILD_COMMAND}` (root)"
    return None


@pytest.fixture(scope="session")
def sandbox_server() -> Iterator[str]:
    app = create_sandbox_app([TOKEN, OTHER_TOKEN], SandboxSpec(backend="bwrap"))
    with serve(app) as url:
        yield url


def spec_for(backend: str, server_url: str | None = None, **fields: object) -> SandboxSpec:
    if backend == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (bash scripts/setup.sh installs it)")
    if backend == "docker":
        reason = docker_skip_reason()
        if reason:
            pytest.skip(reason)
        fields = {"image": image_tag(), **fields}  # the task image built here, never a registry's
    if backend == "remote":
        assert server_url is not None
        return SandboxSpec(backend="remote", remote_url=server_url, remote_token=TOKEN, **fields)  # type: ignore[arg-type]
    return SandboxSpec(backend=backend, **fields)  # type: ignore[arg-type]
