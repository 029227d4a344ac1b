"""The docker backend's pieces that need no daemon: the task image's recipe and tag, the finishing of
its root file system, the errors that say how to get a daemon, the safe extraction of what comes
out of a container, and who owns a container; and, against a real daemon, the removal of containers
whose process was killed. (Against a real daemon too: test_sandbox_contract, test_sandbox_containment
and test_eval_docker.)"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from coderl.cli.main import build_parser
from coderl.errors import SandboxError
from coderl.sandbox import create_sandbox
from coderl.sandbox.docker import DockerSandbox, _untar_safely, docker_cli
from coderl.sandbox.docker_sweep import _swept, owner_alive, owner_label, sweep_stale_containers
from coderl.sandbox.image import DEFAULT_RECIPE, REPOSITORY, _finish, build_image, image_tag
from tests.sandbox_backends import spec_for


def test_the_tag_is_the_digest_of_the_recipe() -> None:
    tag = image_tag()
    assert tag == image_tag() and tag.startswith(f"{REPOSITORY}:") and len(tag.split(":")[1]) == 16
    assert image_tag(replace(DEFAULT_RECIPE, packages=(*DEFAULT_RECIPE.packages, "curl"))) != tag
    assert image_tag(replace(DEFAULT_RECIPE, format=DEFAULT_RECIPE.format + 1)) != tag
    assert {"python3", "python3-pytest", "git", "patch"} <= set(DEFAULT_RECIPE.packages)


def test_finishing_links_python_and_empties_the_download_caches(tmp_path: Path) -> None:
    for tool in ("bin/bash", "usr/bin/timeout", "usr/bin/git", "usr/bin/patch", "usr/bin/python3"):
        (tmp_path / tool).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / tool).write_text("")
    (tmp_path / "var/cache/apt/archives/partial").mkdir(parents=True)
    (tmp_path / "var/cache/apt/archives/x.deb").write_text("deb")
    (tmp_path / "var/lib/apt/lists").mkdir(parents=True)
    _finish(tmp_path, DEFAULT_RECIPE)
    assert (tmp_path / "usr/bin/python").is_symlink()
    assert str((tmp_path / "usr/bin/python").readlink()) == "python3"
    assert list((tmp_path / "var/cache/apt/archives").iterdir()) == []
    (tmp_path / "usr/bin/git").unlink()
    with pytest.raises(SandboxError, match="usr/bin/git"):
        _finish(tmp_path, DEFAULT_RECIPE)


def test_no_daemon_is_an_error_that_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CODERL_DOCKER", str(fake))
    with pytest.raises(SandboxError, match=r"no Docker daemon answers .*dockerd --bridge=none"):
        build_image()


def test_the_build_command_parses() -> None:
    ns = build_parser().parse_args(["sandbox", "image", "build", "--tag", "mine:1"])
    assert ns.tag == "mine:1" and not ns.rebuild and ns.func


def _tar(*members: tuple[str, str, str]) -> bytes:
    """(name, kind, payload): kind file (payload = content), symlink (payload = target), fifo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload.encode()))
                continue
            info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.FIFOTYPE
            info.linkname = payload
            tf.addfile(info)
    return buf.getvalue()


def test_what_comes_out_of_a_container_stays_in_the_destination(tmp_path: Path) -> None:
    data = _tar(
        ("./ok.txt", "file", "ok"),
        ("./inside", "symlink", "ok.txt"),
        ("./etc", "symlink", "/etc"),
        ("./up", "symlink", "../../x"),
        ("../escape.txt", "file", "x"),
        ("./pipe", "fifo", ""),
    )
    dest = tmp_path / "dl"
    skipped = _untar_safely(data, dest, "out")
    assert sorted(skipped) == ["escape.txt", "out/etc", "out/pipe", "out/up"]
    assert sorted(p.name for p in dest.iterdir()) == ["inside", "ok.txt"]
    assert (dest / "inside").read_text() == "ok" and not (tmp_path / "escape.txt").exists()


def test_a_container_owner_is_alive_only_while_its_very_process_runs() -> None:
    """Gone only when provably so: this host, boot and pid namespace, and the pid ended or reused."""
    assert owner_alive(owner_label())
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = int(done.stdout)
    host, boot, namespace, pid, start = owner_label().split("/")
    assert not owner_alive(f"{host}/{boot}/{namespace}/{gone}/123")  # exited (or its pid reused: other start)
    assert not owner_alive(f"{host}/{boot}/{namespace}/{pid}/{int(start) + 1}")  # this pid, another start
    assert not owner_alive(f"{host}/another-boot/{namespace}/{gone}/123")  # made before the last boot
    assert owner_alive(f"another-host/{boot}/{namespace}/{gone}/123")  # another host's: not ours to judge
    assert owner_alive(f"{host}/{boot}/pid:[1]/{gone}/123")  # another pid namespace (a pod's container)
    assert owner_alive(f"{host}/{gone}/123")  # not a label of ours


_KEEP_ONE = """
import asyncio, sys
from coderl.sandbox import create_sandbox
from coderl.sandbox.base import SandboxSpec

async def main() -> None:
    sb = await create_sandbox(SandboxSpec(backend="docker", image=sys.argv[1]))
    print(sb.name, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


async def test_containers_of_a_killed_process_are_removed_by_the_next_one() -> None:
    """A run killed with SIGKILL leaves its containers running; the next process's first docker sandbox
    removes them, and leaves a live process's container alone."""
    spec = spec_for("docker")
    child = subprocess.Popen(
        [sys.executable, "-c", _KEEP_ONE, str(spec.image)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )  # fmt: skip
    assert child.stdout is not None
    orphan = child.stdout.readline().strip()
    child.send_signal(signal.SIGKILL)
    child.wait()
    cli = docker_cli()
    running = subprocess.run([cli, "inspect", "--format", "{{.State.Running}}", orphan], capture_output=True, text=True)
    assert running.stdout.strip() == "true"  # killed: nobody removed it
    _swept.discard(cli)  # as in a new process
    ours = await create_sandbox(spec)  # the first sandbox sweeps
    try:
        gone = subprocess.run([cli, "inspect", orphan], capture_output=True, text=True)
        assert gone.returncode != 0, f"{orphan} is still there"
        assert await sweep_stale_containers(cli) == 0  # once per process
        _swept.discard(cli)
        assert await sweep_stale_containers(cli) == 0  # ours is alive: kept
        assert (await ours.exec("echo ok")).stdout.strip() == "ok"
    finally:
        await ours.close()


async def test_a_start_cancelled_once_the_container_exists_leaves_no_container() -> None:
    """Ctrl-C while `docker run` is under way: the daemon makes the container whether or not the CLI
    is still there. The close that follows the cancelled start removes it (it was left running)."""
    spec, cli = spec_for("docker"), docker_cli()
    sb = DockerSandbox(spec)
    start = asyncio.ensure_future(sb.start())

    def listed() -> str:
        ps = [cli, "ps", "-aq", "--filter", f"name={sb.name}"]
        return subprocess.run(ps, capture_output=True, text=True).stdout.strip()

    while not listed():
        assert not start.done(), "started before it could be cancelled"
        await asyncio.sleep(0.01)
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start
    await sb.close()  # as create_sandbox does after a failed start
    assert not listed(), f"{sb.name} was left behind"
