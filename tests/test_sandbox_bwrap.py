"""The bwrap backend's own machinery: its exec agent on the event loop, and the CPU-weight group."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path
from types import FrameType

import pytest

from coderl.sandbox import SandboxSpec, create_sandbox
from coderl.sandbox import agent as agent_module
from coderl.sandbox.agent_src import AGENT_SOURCE
from coderl.sandbox.bwrap import BwrapSandbox, agent_python
from coderl.sandbox.cpugroup import _v1_parent, _v2_parent, sandbox_group

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def test_the_exec_agent_refuses_to_run_outside_a_sandbox() -> None:
    # it kills every process it can see after each command; on a host that would be everything. With
    # stdin empty it would only have said it was ready and left, so this check cannot harm the host.
    r = subprocess.run(
        [agent_python(), "-I", "-S", "-c", AGENT_SOURCE, "cpu=1,as=1,nproc=1,fsize=1,nofile=16,core=0", "1024"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    assert r.returncode == 1 and b"only as PID 2 of a bwrap sandbox" in r.stderr and r.stdout == b""


async def test_a_cancelled_command_ends_its_namespace_and_the_next_starts_afresh() -> None:
    async with await create_sandbox(SandboxSpec()) as sb:
        await sb.warm()  # the agent, not a one-shot first command
        running = asyncio.create_task(sb.exec("echo here > /tmp/mark; sleep 30"))
        await asyncio.sleep(0.5)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        r = await sb.exec("cat /tmp/mark 2>/dev/null || echo fresh")  # /tmp is the namespace's own
        assert (r.exit_code, r.stdout) == (0, "fresh\n")


async def test_a_cancel_while_the_workspace_is_made_leaves_no_workspace_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C that cancels create_sandbox while its worker thread makes the workspace (a tmpfs mount
    where root): the thread finishes anyway, and what it made is removed, not left mounted."""
    import time

    made: list[Path] = []
    make = BwrapSandbox._create_workspace

    def slow(self: BwrapSandbox) -> object:
        time.sleep(0.5)  # the cancel comes while this thread works
        ws = make(self)
        made.append(ws.root)
        return ws

    monkeypatch.setattr(BwrapSandbox, "_create_workspace", slow)
    task = asyncio.create_task(create_sandbox(SandboxSpec()))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(made) == 1 and not made[0].exists()
    assert str(made[0]) not in Path("/proc/mounts").read_text()


_NEVER_CLOSED = """
import asyncio
from coderl.sandbox import SandboxSpec, create_sandbox

async def main() -> None:
    kept = await create_sandbox(SandboxSpec())  # never closed
    closed = await create_sandbox(SandboxSpec())
    await closed.close()
    print(kept.id, closed.id)

asyncio.run(main())
"""


def test_a_process_that_never_closes_a_sandbox_leaves_no_workspace_behind(tmp_path: Path) -> None:
    """Whatever path loses a close(), the process removes the workspaces it made at exit, saying so."""
    import os

    boxes = tmp_path / "boxes"
    done = subprocess.run(
        [sys.executable, "-c", _NEVER_CLOSED], capture_output=True, text=True, timeout=120,
        env={**os.environ, "CODERL_SANDBOX_DIR": str(boxes)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    kept, closed = done.stdout.split()
    assert f"{boxes / 'ws' / kept} was never closed: removed at exit" in done.stderr
    assert closed not in done.stderr  # a closed one is removed by its close, not again
    assert not [line for line in Path("/proc/mounts").read_text().splitlines() if str(boxes / "ws") in line]
    assert not any((boxes / "ws").iterdir())
    for line in Path("/proc/mounts").read_text().splitlines():  # the host view stays, by design
        if str(boxes) in line:
            subprocess.run(["umount", "-l", line.split()[1]], check=False)


async def test_a_warm_start_starts_the_agent_while_the_workspace_fills(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "f.txt").write_text("filled\n")
    seen: list[bool] = []
    real_fill = BwrapSandbox._fill

    def fill(self: BwrapSandbox, *args: object) -> None:
        seen.append(self._warming is not None)  # the agent's start is already under way
        real_fill(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(BwrapSandbox, "_fill", fill)
    async with await create_sandbox(SandboxSpec(workspace=str(tmp_path)), warm=True) as sb:
        r = await sb.exec("cat f.txt; echo $$")  # the agent sees what was filled after it started
        assert r.stdout.split("\n")[0] == "filled" and int(r.stdout.split("\n")[1]) > 2  # not a one-shot
    async with await create_sandbox(SandboxSpec(workspace=str(tmp_path))) as sb:
        assert (await sb.exec("echo $$")).stdout == "2\n"  # a cold sandbox's first command: one-shot
    assert seen == [True, False]


async def test_commands_inherit_the_limits_the_agent_holds() -> None:
    spec = SandboxSpec(max_processes=77, max_open_files=333, cpu_seconds=44, max_file_mb=5, memory_mb=1000)
    async with await create_sandbox(spec, warm=True) as sb:
        r = await sb.exec("for o in u n t f v c; do ulimit -H -$o; done")  # hard: cannot be raised
        assert r.stdout.split() == ["77", "333", "44", str(5 << 10), str(1000 << 10), "0"], r.stdout
        assert (await sb.exec(["sh", "-c", "ulimit -n 334"])).exit_code != 0
    # too little address space for the agent to live under: each command goes through prlimit instead
    async with await create_sandbox(SandboxSpec(memory_mb=64, max_processes=55), warm=True) as sb:
        for _ in range(2):
            r = await sb.exec("for o in u v; do ulimit -H -$o; done")
            assert r.stdout.split() == ["55", str(64 << 10)], r.stdout


async def test_an_agent_past_half_its_cpu_limit_retires_and_the_next_command_starts_afresh() -> None:
    # The agent holds the CPU limit its commands inherit, so its own CPU (here: reading floods of
    # output) counts against it; past half it says so and exits, and the next command gets a new one.
    async with await create_sandbox(SandboxSpec(cpu_seconds=2), warm=True) as sb:
        for _ in range(40):
            agent = sb._agent  # type: ignore[attr-defined]
            r = await sb.exec("echo here > /tmp/mark; head -c 400000000 /dev/zero")
            assert (r.exit_code, r.truncated) == (0, True)
            if sb._agent is None:  # type: ignore[attr-defined]
                assert agent is not None and agent.retiring
                break
        else:
            pytest.fail("the agent never retired")
        r = await sb.exec("cat /tmp/mark 2>/dev/null || echo fresh")  # a new namespace, the same workspace
        assert r.stdout == "fresh\n"


async def test_a_command_that_kills_the_agent_is_reported_and_the_next_starts_afresh() -> None:
    async with await create_sandbox(SandboxSpec()) as sb:
        await sb.warm()
        r = await sb.exec("kill -9 $PPID; sleep 5")  # its parent is the exec agent
        assert r.exit_code == -9 and r.timed_out and "namespace ended" in r.stderr
        assert (await sb.exec("echo again")).stdout == "again\n"


async def test_a_command_that_closes_its_output_is_waited_for_to_its_exit() -> None:
    async with await create_sandbox(SandboxSpec()) as sb:
        await sb.warm()
        r = await sb.exec("exec >&- 2>&-; sleep 0.3; exit 4")  # output closed long before the exit
        assert (r.exit_code, r.timed_out) == (4, False) and r.duration_s >= 0.3
        r = await sb.exec("exec >&- 2>&-; sleep 30", timeout=0.5)
        assert r.timed_out and r.duration_s < 5
        assert (await sb.exec("echo on")).stdout == "on\n"


def _threads_waiting_on_an_agent() -> int:
    agent_file = str(Path(agent_module.__file__ or "").resolve())
    waiting = 0
    for frame in sys._current_frames().values():
        f: FrameType | None = frame
        while f is not None and str(Path(f.f_code.co_filename).resolve()) != agent_file:
            f = f.f_back
        waiting += f is not None
    return waiting


async def test_commands_in_flight_hold_no_thread() -> None:
    sandboxes = [await create_sandbox(SandboxSpec()) for _ in range(16)]
    try:
        await asyncio.gather(*(sb.warm() for sb in sandboxes))
        running = [asyncio.create_task(sb.exec("sleep 1; echo done")) for sb in sandboxes]
        await asyncio.sleep(0.5)
        assert _threads_waiting_on_an_agent() == 0  # it was one pool thread per command in flight
        results = await asyncio.gather(*running)
        assert [r.stdout for r in results] == ["done\n"] * 16
    finally:
        await asyncio.gather(*(sb.close() for sb in sandboxes))


async def test_a_sandbox_runs_in_the_cpu_group_where_one_can_be_made() -> None:
    procs = sandbox_group()
    if procs is None:
        pytest.skip("no CPU-weight group here (needs root and a writable cpu cgroup controller)")
    for grouped in (True, False):
        async with await create_sandbox(SandboxSpec(cpu_group=grouped)) as sb:
            await sb.warm()  # the agent, not a one-shot first command
            assert (await sb.exec("true")).ok
            assert isinstance(sb, BwrapSandbox) and sb._agent is not None
            members = procs.read_text().split()
            assert (str(sb._agent.proc.pid) in members) is grouped


def test_the_group_sits_in_this_process_cpu_cgroup_v1(tmp_path: Path) -> None:
    (tmp_path / "cpu" / "job").mkdir(parents=True)
    mounts = (
        f"cgroup {tmp_path}/cpuset cgroup rw,cpuset 0 0\n"
        f"cgroup {tmp_path}/cpu cgroup rw,nosuid,cpu,cpuacct 0 0\n"
    )
    own = "5:cpuset:/\n3:cpu,cpuacct:/job\n0::/\n"
    assert _v1_parent(mounts, own) == tmp_path / "cpu" / "job"
    assert _v1_parent(mounts.replace("cpu,cpuacct", "cpuacct"), own) is None  # no cpu controller
    assert _v1_parent(mounts, own.replace("/job", "/gone")) is None


def test_the_group_sits_at_the_v2_root_with_cpu_turned_on(tmp_path: Path) -> None:
    mounts = f"cgroup2 {tmp_path} cgroup2 rw 0 0\n"
    (tmp_path / "cgroup.controllers").write_text("cpuset io memory pids\n")
    assert _v2_parent(mounts) is None  # the cpu controller is not available
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    assert _v2_parent(mounts) == tmp_path
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"  # turned on for the children
    assert _v2_parent("") is None


async def test_many_sandboxes_filling_at_once_use_a_few_host_threads(tmp_path: Path) -> None:
    """Workspace file work runs in a small pool: 48 sandboxes made, filled and edited at once start
    at most 8 host threads (a thread per sandbox tripled the CPU a fill costs)."""
    import threading

    from coderl.sandbox.local import HOST_POOL

    (tmp_path / "repo" / "pkg").mkdir(parents=True)
    for i in range(20):
        (tmp_path / "repo" / "pkg" / f"m{i}.py").write_text(f"X = {i}\n")
    spec = SandboxSpec(workspace=str(tmp_path / "repo"))

    async def one(k: int) -> str:
        async with await create_sandbox(spec) as sb:
            await sb.write_file("pkg/m0.py", f"X = {k}\n")
            return (await sb.read_file("pkg/m0.py")).decode() + (await sb.read_file("pkg/m19.py")).decode()

    texts = await asyncio.gather(*(one(k) for k in range(48)))
    assert texts == [f"X = {k}\nX = 19\n" for k in range(48)]
    host = [t for t in threading.enumerate() if t.name.startswith("coderl-host")]
    assert 1 <= len(host) <= HOST_POOL._max_workers == 8


async def test_host_paths_are_read_only_inside_even_under_a_private_folder(tmp_path: Path) -> None:
    private = tmp_path / "home"  # mode 700, as /root is: the sandbox's own uid could not reach it
    tool = private / "tools"
    tool.mkdir(parents=True)
    private.chmod(0o700)
    (tool / "hello.sh").write_text("echo hello from the host\n")
    async with await create_sandbox(SandboxSpec(host_paths=[str(tool)])) as sb:
        r = await sb.exec(f"sh {tool}/hello.sh && touch {tool}/new")
        assert r.stdout.strip() == "hello from the host" and r.exit_code != 0 and "Read-only" in r.stderr
    assert not (tool / "new").exists()


async def test_a_host_path_that_does_not_exist_or_is_relative_is_named() -> None:
    from pydantic import ValidationError

    from coderl.errors import SandboxError
    from coderl.sandbox.bwrap import _LEFT

    before = dict(_LEFT)
    with pytest.raises(SandboxError, match=r"sandbox\.host_paths: /nowhere/at-all does not exist"):
        async with await create_sandbox(SandboxSpec(host_paths=["/nowhere/at-all"])) as sb:
            await sb.exec("true")
    assert _LEFT == before  # refused before a workspace was made (it was left mounted once)
    with pytest.raises(ValidationError, match="'tools' is not an absolute path"):
        SandboxSpec(host_paths=["tools"])
