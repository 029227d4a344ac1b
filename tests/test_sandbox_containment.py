"""Hostile programs against the bwrap backend (directly and through the remote server) and the docker
backend (on the task image ``coderl sandbox image build`` makes): each must be contained with a clear
result, and the host must be unaffected. Where a container contains a program differently (its own
root user without capabilities, its own image's /etc and /root, an init), the docker case checks that
instead, and says so."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coderl.errors import SandboxError
from coderl.sandbox import Sandbox, create_sandbox
from coderl.sandbox.docker import docker_cli
from coderl.sandbox.hostsetup import state_dir
from tests.sandbox_backends import sandbox_server, spec_for  # noqa: F401  (fixture)


@pytest.fixture(params=["bwrap", "remote", "docker"])
def make_spec(request: pytest.FixtureRequest) -> Any:
    url = request.getfixturevalue("sandbox_server") if request.param == "remote" else None
    return lambda **fields: spec_for(str(request.param), url, **fields)


@pytest.fixture
async def sb(make_spec: Any) -> Any:
    box = await create_sandbox(make_spec(timeout_s=20))
    yield box
    await box.close()


@pytest.fixture
def host_listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP service on the host's loopback that records whatever reaches it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    got: list[bytes] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            got.append(conn.recv(100) or b"<connected>")
            conn.close()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    yield srv.getsockname()[1], got
    stop.set()
    t.join()
    srv.close()


def _host_processes_with(token: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if token.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                pass
    return found


def _gone_soon(token: str, within_s: float = 5.0) -> list[int]:
    """Processes still carrying ``token`` once they have had ``within_s`` to die: a PID namespace's
    processes are killed when its init exits, but the kernel reaps them asynchronously (a loaded
    machine showed one still listed right after the exec returned)."""
    deadline = time.monotonic() + within_s
    while (left := _host_processes_with(token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


PY = "python -c"


async def test_no_tcp_to_host_loopback(sb: Sandbox, host_listener: tuple[int, list[bytes]]) -> None:
    port, got = host_listener
    r = await sb.exec(
        f'{PY} \'import socket; s=socket.create_connection(("127.0.0.1", {port}), 2); s.send(b"leak")\''
    )
    assert r.exit_code != 0 and "Connection refused" in r.stderr
    assert got == []


async def test_no_route_to_outside_addresses(sb: Sandbox) -> None:
    # 192.0.2.1 is TEST-NET-1 (never routed); the sandbox has no interface but its own loopback anyway
    r = await sb.exec(f"{PY} 'import socket; socket.create_connection((\"192.0.2.1\", 80), 2)'")
    assert r.exit_code != 0 and "unreachable" in r.stderr
    r = await sb.exec("cat /sys/class/net/*/operstate 2>/dev/null; ls /sys 2>&1 | head -1")
    r2 = await sb.exec(f"{PY} 'import socket; print(socket.if_nameindex())'")
    assert "eth" not in r2.stdout and "lo" in r2.stdout


async def test_no_dns(sb: Sandbox) -> None:
    r = await sb.exec(f"{PY} 'import socket; socket.getaddrinfo(\"pypi.org\", 443)'")
    assert r.exit_code != 0 and "gaierror" in r.stderr


async def test_cannot_read_host_home_or_secrets(sb: Sandbox, tmp_path: Path) -> None:
    if sb.spec.backend == "docker":
        # the container's /root and /etc/shadow are the image's own (root inside, no capabilities):
        # what must stay out of reach is the host's files
        secret = tmp_path / "host-secret.txt"
        secret.write_text("hunter2-host-file")
        home = Path.home()
        r = await sb.exec(f"cat {secret}; test -e {secret} && echo visible; ls -a {home}; cat /etc/shadow")
        assert "hunter2-host-file" not in r.stdout and "visible" not in r.stdout
        host_entries = {p.name for p in home.iterdir()} - {".bashrc", ".profile", ".", ".."}
        assert not host_entries & set(r.stdout.split()), "the host's home folder is visible"
        return
    r = await sb.exec("ls -a /root 2>&1; cat /etc/shadow 2>&1; ls /home 2>&1; cat ~root/.bash_history 2>&1")
    assert "Permission denied" in r.stdout or "No such file" in r.stdout
    assert ".bashrc" not in r.stdout
    assert "root:$" not in r.stdout and "root:*" not in r.stdout


async def test_cannot_read_another_sandboxes_workspace(make_spec: Any) -> None:
    async with await create_sandbox(make_spec()) as victim, await create_sandbox(make_spec()) as thief:
        await victim.write_file("secret.txt", "victim-secret-123")
        r = await thief.exec(
            f"cat {state_dir()}/ws/*/secret.txt 2>&1; find /tmp /workspace /root /home /var /run -name secret.txt 2>/dev/null; grep -rs victim-secret /tmp /workspace /root /home /proc/*/cwd 2>/dev/null | head -1",
            timeout=15,
        )
        assert "victim-secret-123" not in r.stdout


async def test_cannot_write_outside_the_workspace(sb: Sandbox) -> None:
    marker = f"coderl-{uuid.uuid4().hex}"
    r = await sb.exec(
        f"for d in / /usr /etc /root /var /opt {state_dir()}; do touch $d/{marker} 2>&1; done; echo x > /proc/sys/kernel/hostname 2>&1"
    )
    # /usr and /etc are read-only binds; / is the sandbox's own throw-away tmpfs; the rest is absent
    # (docker: the whole root file system is read-only, /proc/sys too)
    refused = "Read-only file system" if sb.spec.backend == "docker" else "Permission denied"
    assert (
        r.stdout.count("Read-only file system") >= 2 and f"/proc/sys/kernel/hostname: {refused}" in r.stderr
    )
    for d in ("/", "/usr", "/etc", "/root", "/var", "/opt", str(state_dir())):
        assert not (Path(d) / marker).exists()


async def test_fork_bomb_is_contained(make_spec: Any) -> None:
    async with await create_sandbox(make_spec(max_processes=64)) as box:
        r = await box.exec("bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", timeout=8)
        # docker: where the bomb fills the pid limit before the exec wrapper's output filter has forked
        # its `head`, the command's output is lost and the wrapper reports 0 (a known gap, seen once in CI
        # 2026-12-02): the refused forks are in its stderr, and the sandbox must still work below
        lost = box.spec.backend == "docker" and "fork: retry" in r.stderr
        assert r.timed_out or r.exit_code != 0 or "survived" in r.stdout or lost, r
        # the bomb's processes may take a moment to die (docker: the pid limit stays full until they
        # have), so the sandbox must work again within a few tries, not necessarily at once
        outputs = []
        for _ in range(10):
            outputs.append((await box.exec("echo still-works")).stdout)
            if outputs[-1] == "still-works\n":
                break
            await asyncio.sleep(1)
        assert outputs[-1] == "still-works\n", outputs
    assert subprocess.run(["true"]).returncode == 0  # the host can still start processes


async def test_memory_bomb_is_contained(make_spec: Any) -> None:
    async with await create_sandbox(make_spec(memory_mb=256)) as box:
        r = await box.exec(f"{PY} 'x = bytearray(2 * 1024**3); print(len(x))'")
        assert r.exit_code != 0 and "MemoryError" in r.stderr


async def test_disk_fill_stops_at_the_workspace_size(make_spec: Any) -> None:
    async with await create_sandbox(make_spec(disk_mb=16, max_file_mb=64)) as box:
        r = await box.exec(
            "i=0; while head -c 1048576 /dev/zero > f$i 2>/dev/null; do i=$((i+1)); done; echo files=$i; du -sm . | cut -f1"
        )
        files = int(r.stdout.split("files=")[1].split()[0])
        assert files <= 16
        r = await box.exec(
            "head -c 1048576 /dev/zero > /tmp/t && echo tmp-ok"
        )  # /tmp is separate and bounded
        assert r.exit_code == 0


async def test_single_huge_file_hits_the_file_size_limit(make_spec: Any) -> None:
    async with await create_sandbox(make_spec(max_file_mb=2, disk_mb=64)) as box:
        r = await box.exec("head -c 10000000 /dev/zero > big; echo rc=$?; stat -c %s big")
        assert "rc=0" not in r.stdout and int(r.stdout.split()[-1]) <= 2 * 1024 * 1024


async def test_infinite_loop_times_out(sb: Sandbox) -> None:
    r = await sb.exec("while true; do :; done", timeout=1)
    assert r.timed_out and r.duration_s < 10


async def test_cpu_limit_kills_a_busy_loop(make_spec: Any) -> None:
    async with await create_sandbox(make_spec(cpu_seconds=1)) as box:
        r = await box.exec(f"{PY} 'while True: pass'", timeout=30)
        assert not r.timed_out and r.exit_code != 0 and r.duration_s < 20


async def test_output_flood_is_capped(make_spec: Any) -> None:
    async with await create_sandbox(make_spec(max_output_bytes=10000)) as box:
        r = await box.exec("yes flood", timeout=2)
        assert r.truncated and len(r.stdout) <= 10000 and r.timed_out


async def test_one_gigabyte_single_line(make_spec: Any) -> None:
    async with await create_sandbox(make_spec(max_output_bytes=1 << 16)) as box:
        r = await box.exec("head -c 1073741824 /dev/zero | tr '\\0' a", timeout=60)
        assert r.truncated and len(r.stdout) == 1 << 16 and set(r.stdout) == {"a"}


async def test_daemons_do_not_outlive_exec_or_close(make_spec: Any) -> None:
    token = f"daemon-{uuid.uuid4().hex}"
    box = await create_sandbox(make_spec())
    await box.exec(
        f"setsid nohup bash -c 'exec -a {token} sleep 1000' >/dev/null 2>&1 & disown; (sleep 1000 &) ; echo spawned"
    )
    assert _gone_soon(token) == []  # gone when the exec's PID namespace ended
    await box.exec(
        f'{PY} \'import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.execvp("sleep", ["{token}", "1000"])\n\''
    )
    await box.close()
    assert _gone_soon(token) == []


async def test_cannot_signal_or_trace_host_processes(sb: Sandbox) -> None:
    victim = subprocess.Popen(["sleep", "300"])
    try:
        r = await sb.exec(
            f"kill -9 {victim.pid} 2>&1; echo kill=$?; "
            f"{PY} 'import ctypes; l=ctypes.CDLL(None); print(\"ptrace\", l.ptrace(16, {victim.pid}, 0, 0))'"
        )
        assert "kill=1" in r.stdout and "ptrace -1" in r.stdout
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


async def test_host_environment_is_not_visible(make_spec: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODERL_TEST_HOST_SECRET", "hunter2-host-secret")
    async with await create_sandbox(make_spec()) as box:
        r = await box.exec("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")
        assert "hunter2-host-secret" not in r.stdout


async def test_proc_shows_only_the_sandbox(sb: Sandbox) -> None:
    r = await sb.exec("ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/1/cmdline | tr '\\0' ' '")
    count, cmdline = r.stdout.splitlines()[0], r.stdout.splitlines()[1]
    docker = sb.spec.backend == "docker"
    # docker: the init, its `sleep infinity`, the exec's wrapper, `timeout` and the output filters
    # (two, each a shell and its `head`) come on top
    assert int(count) <= (14 if docker else 6)
    assert str(os.getpid()) not in r.stdout.split()
    assert ("sleep infinity" if docker else "bwrap") in cmdline


async def test_symlink_escape_on_read_file(sb: Sandbox) -> None:
    await sb.exec("ln -s /etc/passwd leak; ln -s /root/.bashrc home; mkdir d; ln -s / d/root")
    for path in ("leak", "home", "d/root/etc/passwd"):
        with pytest.raises(SandboxError):
            await sb.read_file(path)


async def test_symlink_escape_on_download(sb: Sandbox, tmp_path: Path) -> None:
    await sb.exec(
        "mkdir out; echo ok > out/ok.txt; ln -s /etc out/etc; ln -s /etc/hostname out/host; ln -s ok.txt out/inside"
    )
    await sb.download("out", tmp_path / "dl")
    names = sorted(p.name for p in (tmp_path / "dl").iterdir())
    assert "ok.txt" in names and "etc" not in names and "host" not in names
    assert not any(
        p.is_symlink() and not p.resolve().is_relative_to(tmp_path) for p in (tmp_path / "dl").iterdir()
    )


async def test_symlink_escape_on_upload_and_write(sb: Sandbox, tmp_path: Path) -> None:
    target = tmp_path / "host-target"
    target.mkdir()
    (target / "keep.txt").write_text("original")
    os.chmod(tmp_path, 0o755)
    await sb.exec(f"ln -s {target} sub; ln -s {target}/keep.txt file")
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "keep.txt").write_text("overwritten")
    await sb.upload(src, ".")  # replaces the planted link; never writes through it
    with pytest.raises(SandboxError):
        await sb.write_file("file", "overwritten")
    with pytest.raises(SandboxError):
        await sb.write_file("sub/../file", "overwritten")
    assert (target / "keep.txt").read_text() == "original"
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"]


async def test_path_traversal_in_file_apis(sb: Sandbox, tmp_path: Path) -> None:
    for call in (
        sb.read_file("../../../etc/passwd"),
        sb.write_file("../escape.txt", "x"),
        sb.upload(tmp_path, "../../"),
        sb.download("../..", tmp_path / "x"),
        sb.read_file("a\x00b"),
    ):
        with pytest.raises(SandboxError):
            await call


async def test_no_privilege_escalation(sb: Sandbox) -> None:
    r = await sb.exec(
        "id -u; unshare -U true 2>&1; echo unshare=$?; mount -t tmpfs none /tmp 2>&1; echo mount=$?; su -c id 2>&1 | head -1"
    )
    lines = r.stdout.splitlines()
    if sb.spec.backend == "docker":
        # root inside the container (no user namespace), holding no capability at all
        caps = await sb.exec("grep -E '^(CapPrm|CapEff|CapBnd|NoNewPrivs)' /proc/self/status | tr -d '\\t'")
        assert caps.stdout.split() == [
            "CapPrm:" + "0" * 16,
            "CapEff:" + "0" * 16,
            "CapBnd:" + "0" * 16,
            "NoNewPrivs:1",
        ]
    else:
        assert lines[0] != "0"
    assert "unshare=0" not in r.stdout and "mount=0" not in r.stdout


async def test_raw_devices_are_not_reachable(sb: Sandbox) -> None:
    r = await sb.exec("ls /dev; cat /dev/vda 2>&1 | head -c 100; echo; ls /sys 2>&1")
    assert "vda" not in r.stdout.split("\n")[0:20] or "No such file" in r.stdout


async def test_hostile_chmod_does_not_block_cleanup(make_spec: Any) -> None:
    box = await create_sandbox(make_spec())
    await box.exec("mkdir -p locked/deep && touch locked/deep/f && chmod -R 000 locked && chmod 000 .")
    sid = box.id
    await box.close()
    assert not (state_dir() / "ws" / sid).exists()
    if box.spec.backend == "docker":  # the container went with its workspace
        listed = subprocess.run(
            [docker_cli(), "ps", "-aq", "--filter", f"name=coderl-{sid}"], capture_output=True
        )
        assert listed.returncode == 0 and listed.stdout.strip() == b""


def test_site_folders_a_pth_file_added_are_bound_too(tmp_path: Path) -> None:
    from coderl.sandbox.hostsetup import site_dirs_outside

    outer = tmp_path / "outer" / "lib" / "python3.11" / "site-packages"
    inner = tmp_path / "inner" / "lib" / "python3.11" / "site-packages"
    for d in (outer, inner, tmp_path / "src"):
        d.mkdir(parents=True)
    path = [str(tmp_path / "src"), str(inner), str(outer), str(outer), "", "/usr/lib/python3/dist-packages"]
    assert site_dirs_outside(path, [tmp_path / "inner"]) == [outer]  # inner is under a prefix; src is no site
