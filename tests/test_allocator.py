"""The C allocator of a coderl command: jemalloc preloaded by one re-run, and kept from its children."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from coderl import allocator

HAS_JEMALLOC = sys.platform.startswith("linux") and allocator.jemalloc_library() is not None


def test_choice_names_a_bad_value_and_the_valid_ones() -> None:
    assert allocator.choice({}) == "jemalloc"
    assert allocator.choice({"CODERL_ALLOCATOR": " System "}) == "system"
    with pytest.raises(allocator.AllocatorError, match=r"'tcmalloc'.*jemalloc, system"):
        allocator.choice({"CODERL_ALLOCATOR": "tcmalloc"})


@pytest.mark.skipif(not HAS_JEMALLOC, reason="no jemalloc library on this machine")
def test_preload_env_only_where_it_should() -> None:
    env = allocator.preload_env({"PATH": "/usr/bin"}, platform="linux")
    assert env is not None and env["LD_PRELOAD"] == allocator.jemalloc_library() and env["PATH"] == "/usr/bin"
    assert env["MALLOC_CONF"] == allocator.JEMALLOC_CONF == "thp:always"
    users = allocator.preload_env({"MALLOC_CONF": "narenas:2"}, platform="linux")  # the user's settings stand
    assert users is not None and users["MALLOC_CONF"] == "narenas:2"
    assert allocator.preload_env({"LD_PRELOAD": "/opt/libmine.so"}, platform="linux") is None  # theirs stands
    assert allocator.preload_env({"CODERL_ALLOCATOR": "system"}, platform="linux") is None
    assert allocator.preload_env(env, platform="linux") is None  # the re-run never runs again
    assert allocator.preload_env({}, platform="darwin") is None


def test_forget_preload_leaves_children_the_systems_allocator() -> None:
    env = {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2", "MALLOC_CONF": "thp:always", "CODERL_PRELOADED": "conf", "A": "1"}
    allocator.forget_preload(env)
    assert env == {"A": "1"}
    users = {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2", "MALLOC_CONF": "narenas:2", "CODERL_PRELOADED": "library"}
    allocator.forget_preload(users)
    assert users == {"MALLOC_CONF": "narenas:2"}  # the user's MALLOC_CONF stays
    mine = {"LD_PRELOAD": "/opt/libmine.so"}  # not preloaded by coderl: untouched
    allocator.forget_preload(mine)
    assert mine == {"LD_PRELOAD": "/opt/libmine.so"}


def _entry(env: dict[str, str]) -> list[str]:
    """Run coderl's entry sequence in a fresh interpreter: the allocator it ends on, its pid before and
    after, and what a child it starts sees in LD_PRELOAD."""
    code = (
        "import os, subprocess, sys\n"
        "print(os.environ.get('PID_BEFORE') or os.getpid())\n"
        "os.environ['PID_BEFORE'] = str(os.getpid())\n"
        "from coderl import allocator\n"
        "allocator.preload_jemalloc()\n"
        "allocator.forget_preload()\n"
        "print(allocator.active()); print(os.getpid())\n"
        "print(subprocess.run(['sh', '-c', 'echo \"[$LD_PRELOAD$MALLOC_CONF]\"'], capture_output=True, text=True).stdout.strip())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout.split()


@pytest.mark.skipif(not HAS_JEMALLOC, reason="no jemalloc library on this machine")
def test_the_command_runs_again_on_jemalloc_and_its_children_do_not() -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF", "CODERL_ALLOCATOR", "CODERL_PRELOADED")
    }
    first_pid, active, pid, child = _entry(env)[-4:]
    assert active == "jemalloc"
    assert pid == first_pid  # execve: the same process
    assert child == "[]"
    assert _entry({**env, "CODERL_ALLOCATOR": "system"})[-3:-2] == ["system"]


@pytest.mark.skipif(not HAS_JEMALLOC, reason="no jemalloc library on this machine")
def test_version_names_the_allocator() -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF", "CODERL_ALLOCATOR", "CODERL_PRELOADED")
    }
    run = subprocess.run(
        [sys.executable, "-m", "coderl", "--version"], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and "(C allocator: jemalloc)" in run.stdout
    env["CODERL_ALLOCATOR"] = "bogus"
    run = subprocess.run(
        [sys.executable, "-m", "coderl", "--version"], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2 and "CODERL_ALLOCATOR='bogus'" in run.stderr


@pytest.mark.skipif(not HAS_JEMALLOC, reason="no jemalloc library on this machine")
def test_a_benchmarks_child_gets_the_allocator_it_asks_for() -> None:
    env = {"PATH": "/usr/bin", "LD_PRELOAD": "/old.so", "CODERL_PRELOADED": "conf"}
    assert allocator.env_for("jemalloc", env) == {
        "PATH": "/usr/bin", "LD_PRELOAD": allocator.jemalloc_library(), "MALLOC_CONF": "thp:always"
    }  # fmt: skip
    assert allocator.env_for("system", env) == {"PATH": "/usr/bin"}
    with pytest.raises(allocator.AllocatorError, match="'tcmalloc'"):
        allocator.env_for("tcmalloc", env)
