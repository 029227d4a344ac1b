"""One contract suite, run against every sandbox backend."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coderl.errors import SandboxError
from coderl.sandbox import create_sandbox
from coderl.sandbox.base import Sandbox
from coderl.sandbox.docker import DockerSandbox, docker_cli
from coderl.sandbox.hostsetup import state_dir
from coderl.sandbox.local import LocalSandbox
from coderl.sandbox.pool import SandboxPool
from coderl.sandbox.remote import RemoteSandbox
from tests.sandbox_backends import sandbox_server, spec_for  # noqa: F401  (fixture)

BACKENDS = ["bwrap", "process", "remote", "docker"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_spec(backend: str, request: pytest.FixtureRequest) -> Any:
    url = request.getfixturevalue("sandbox_server") if backend == "remote" else None
    return lambda **fields: spec_for(backend, url, **fields)


async def test_exec_returns_output_exit_code_and_duration(make_spec: Any) -> None:
    async with await create_sandbox(make_spec()) as sb:
        r = await sb.exec("echo out; echo err >&2; exit 3")
        assert (r.exit_code, r.stdout, r.stderr, r.timed_out, r.truncated) == (
            3,
            "out\n",
            "err\n",
            False,
            False,
        )
        assert r.duration_s > 0
        ok = await sb.exec(["python", "-c", "print(6 * 7)"])
        assert ok.ok and ok.stdout.strip() == "42"


async def test_quick_commands_report_their_own_exit_code(make_spec: Any) -> None:
    # coreutils close stdout/stderr before they exit: a runner that takes end-of-output for the end
    # of the command (and kills what is left) reported spurious -9s for `ls` and `grep`.
    async with await create_sandbox(make_spec()) as sb:
        await sb.write_file("f.txt", "needle\n")
        codes = [(await sb.exec("ls -la && grep -n needle f.txt")).exit_code for _ in range(25)]
        codes += [(await sb.exec("grep -c absent f.txt")).exit_code for _ in range(5)]
        assert codes == [0] * 25 + [1] * 5


async def test_warm_then_exec_and_warm_then_close(make_spec: Any) -> None:
    async with await create_sandbox(make_spec()) as sb:
        await sb.warm()
        await sb.warm()  # idempotent
        first = await sb.exec("echo $((6 * 7))")
        assert first.ok and first.stdout == "42\n"
    sb2 = await create_sandbox(make_spec())
    await sb2.warm()
    await sb2.close()  # closing while the warm-up may still run must neither hang nor leak
    with pytest.raises(SandboxError):
        await sb2.exec("true")
    async with await create_sandbox(make_spec(), warm=True) as sb3:  # warmed while it fills
        assert (await sb3.exec(["echo", "warm"])).stdout == "warm\n"
    await (await create_sandbox(make_spec(), warm=True)).close()


async def test_commands_start_with_default_signal_handling_and_a_failed_start_is_127(make_spec: Any) -> None:
    # Python ignores SIGPIPE and SIGXFSZ; a command must not inherit that: `yes | head` ends quietly
    async with await create_sandbox(make_spec()) as sb:
        await sb.warm()
        for _ in range(2):  # the first command (perhaps a one-shot start) and one through a warm agent
            r = await sb.exec("yes | head -c 6; echo; grep -E 'SigIgn' /proc/self/status")
            assert r.exit_code == 0 and r.stdout.startswith("y\ny\ny\n") and r.stderr == ""
            ignored = int(r.stdout.split()[-1], 16)
            assert not ignored & (1 << 12) and not ignored & (1 << 24)  # SIGPIPE (13), SIGXFSZ (25): default
        missing = await sb.exec(["/no/such/program"])
        assert missing.exit_code == 127 and "/no/such/program" in missing.stderr


async def test_env_and_cwd(make_spec: Any) -> None:
    async with await create_sandbox(make_spec(env={"FROM_SPEC": "a"})) as sb:
        await sb.write_file("sub/dir/f.txt", "x")
        r = await sb.exec("echo $FROM_SPEC $FROM_CALL; pwd", env={"FROM_CALL": "b"}, cwd="sub/dir")
        assert r.stdout.splitlines()[0] == "a b"
        assert r.stdout.splitlines()[1].endswith("/sub/dir")


async def test_timeout_kills_and_reports(make_spec: Any) -> None:
    async with await create_sandbox(make_spec()) as sb:
        r = await sb.exec("echo started; sleep 30", timeout=1)
        assert r.timed_out and r.stdout.startswith("started") and r.duration_s < 15
        assert (await sb.exec("echo alive")).stdout == "alive\n"  # the sandbox stays usable


async def test_output_is_capped_and_marked_truncated(make_spec: Any) -> None:
    async with await create_sandbox(make_spec(max_output_bytes=4096)) as sb:
        r = await sb.exec("head -c 100000 /dev/zero | tr '\\0' x; echo done >&2")
        assert r.truncated and len(r.stdout) == 4096 and r.stderr == "done\n" and r.exit_code == 0


async def test_files_round_trip(make_spec: Any) -> None:
    async with await create_sandbox(make_spec()) as sb:
        payload = bytes(range(256)) * 10
        await sb.write_file("a/b/data.bin", payload)
        assert await sb.read_file("a/b/data.bin") == payload
        assert (await sb.exec("wc -c < a/b/data.bin")).stdout.strip() == str(len(payload))
        await sb.exec("echo made-inside > inside.txt")
        assert await sb.read_file("inside.txt") == b"made-inside\n"
        workdir = sb.spec.workdir
        assert await sb.read_file(f"{workdir}/inside.txt") == b"made-inside\n"
        with pytest.raises(SandboxError):
            await sb.read_file("missing.txt")


async def test_upload_and_download_folders(make_spec: Any, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("VALUE = 5\n")
    (src / "top.txt").write_text("top\n")
    async with await create_sandbox(make_spec()) as sb:
        await sb.upload(src, "proj")
        r = await sb.exec("python -c 'import pkg.mod; print(pkg.mod.VALUE)'", cwd="proj")
        assert r.stdout.strip() == "5", r.stderr
        await sb.exec("echo new > proj/pkg/new.txt")
        out = tmp_path / "out"
        await sb.download("proj", out)
        assert (out / "pkg" / "new.txt").read_text() == "new\n"
        assert (out / "top.txt").read_text() == "top\n"


async def test_workspace_from_folder_and_archive(make_spec: Any, tmp_path: Path) -> None:
    src = tmp_path / "repo"
    src.mkdir()
    (src / "README").write_text("hello\n")
    async with await create_sandbox(make_spec(workspace=src)) as sb:
        assert await sb.read_file("README") == b"hello\n"
    archive = tmp_path / "repo.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(src / "README", arcname="README")
    async with await create_sandbox(make_spec(workspace=archive)) as sb:
        assert (await sb.exec("cat README")).stdout == "hello\n"


async def test_paths_outside_the_workspace_are_refused(make_spec: Any) -> None:
    async with await create_sandbox(make_spec()) as sb:
        for bad in ("../x", "a/../../x", "/etc/passwd"):
            with pytest.raises(SandboxError):
                await sb.read_file(bad)
            with pytest.raises(SandboxError):
                await sb.write_file(bad, "x")
        with pytest.raises(SandboxError):
            await sb.exec("true", cwd="../..")


async def test_close_is_idempotent_and_final(make_spec: Any) -> None:
    sb = await create_sandbox(make_spec())
    await sb.close()
    await sb.close()
    with pytest.raises(SandboxError):
        await sb.exec("true")


def _left_behind(sb: Sandbox) -> Callable[[], bool]:
    """Whether what the sandbox made is still there, looked up on this host (the sandbox server of
    the remote backend runs here too, on bwrap): a workspace folder or mount, a container."""
    if isinstance(sb, LocalSandbox):
        assert sb._ws is not None
        root = sb._ws.root
        return lambda: root.exists() or str(root) in Path("/proc/mounts").read_text()
    if isinstance(sb, DockerSandbox):
        inspect = [docker_cli(), "container", "inspect", sb.name]
        return lambda: subprocess.run(inspect, capture_output=True, timeout=60).returncode == 0
    assert isinstance(sb, RemoteSandbox)
    served = state_dir() / "ws" / sb.id
    assert served.exists()
    return served.exists


async def test_a_close_cancelled_while_it_waits_still_removes_the_sandbox(make_spec: Any) -> None:
    """A close() cancelled while a command still runs (a Ctrl-C) goes on removing the sandbox, and a
    second close() returns only once it is gone. Before, the first close marked the sandbox closed
    and the second returned at once: a bwrap workspace stayed mounted until the process's exit sweep,
    and a server's sandbox could be left to the server."""
    sb = await create_sandbox(make_spec())
    left_behind = _left_behind(sb)
    assert left_behind()
    running = asyncio.create_task(sb.exec("sleep 1"))
    await asyncio.sleep(0.3)  # the command runs (and holds the sandbox where a backend locks it)
    closing = asyncio.create_task(sb.close())
    await asyncio.sleep(0.02)
    closing.cancel()  # bwrap, process and remote wait for the command here; docker's rm -f may be done
    with contextlib.suppress(asyncio.CancelledError):
        await closing
    await sb.close()
    assert not left_behind()
    with pytest.raises(SandboxError):
        await sb.exec("true")
    with contextlib.suppress(SandboxError):
        await running  # it ran to its end, or the removal ended it (docker's rm -f)


async def test_missing_workspace_source_is_a_sandbox_error(make_spec: Any, tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="does not exist"):
        await create_sandbox(make_spec(workspace=tmp_path / "nope"))


async def test_warm_pool_hands_out_started_sandboxes(make_spec: Any) -> None:
    pool = SandboxPool(make_spec(), size=2)
    await pool.start()
    assert pool.ready == 2
    a, b, c = await pool.acquire(), await pool.acquire(), await pool.acquire()
    assert len({a.id, b.id, c.id}) == 3
    assert (await c.exec("echo ok")).stdout == "ok\n"
    for sb in (a, b, c):
        await sb.close()
    await pool.close()
