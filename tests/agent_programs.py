"""Agent programs from npm, installed at a pinned version once per machine for the compatibility tests.

Each goes under the coderl cache (``npm install --prefix``), never into the system; a test whose
program cannot be installed (no npm, no registry) is skipped with the reason."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coderl.agents import AgentContext
from coderl.chat import ChatFormat
from coderl.checkpoint import cache_root
from coderl.config import load_config
from coderl.config.packaged import packaged_config
from coderl.engine.base import Engine
from coderl.engine.params import SamplingParams
from coderl.sandbox import SandboxSpec, create_sandbox
from coderl.types import Task

CODEX = ("@openai/codex", "0.171.0", "codex")
"""Codex CLI: package, pinned version, the program's name."""
CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.332", "claude")
OPENCODE = ("opencode-ai", "1.18.33", "opencode")
AGENTS_SDK = "openai-agents==0.24.0"
AIDER = "aider-chat==0.86.2"
"""The OpenAI Agents SDK, pinned (a pip requirement, installed in a virtualenv of its own)."""


def npm_program(package: str, version: str, name: str) -> Path:
    """The installed program (its ``node_modules/.bin`` entry); installs it first where missing."""
    root = cache_root() / "npm" / f"{package.strip('@').replace('/', '-')}-{version}"
    exe = root / "node_modules" / ".bin" / name
    if exe.exists():
        return exe
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"{package}@{version} needs npm, which is not installed (apt-get install -y npm)")
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / ".lock", "w") as lock:  # one install at a time on this machine
        fcntl.flock(lock, fcntl.LOCK_EX)
        if exe.exists():
            return exe
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        try:
            r = subprocess.run(
                [npm, "install", "--prefix", str(partial), "--no-audit", "--no-fund", f"{package}@{version}"],
                capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm install {package}@{version} ran past 600 s")
        if r.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            pytest.skip(f"npm install {package}@{version} failed: {(r.stderr or r.stdout).strip()[-300:]}")
        partial.rename(root)  # whole or not at all: a killed install leaves only the .partial folder
    return exe


def pip_venv(requirement: str) -> Path:
    """A virtualenv (under the coderl cache) with ``requirement`` installed, made once per machine;
    skips the test with the reason when pip cannot install it. Never coderl's own environment: agent
    programs pin versions of their own (aider pins ~100 packages)."""
    root = cache_root() / "venvs" / requirement.replace("==", "-").replace("/", "-")
    done = root / ".installed"
    if done.exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return root
        shutil.rmtree(root, ignore_errors=True)  # a killed install: start again
        steps = [
            [sys.executable, "-m", "venv", str(root)],
            [str(root / "bin" / "pip"), "install", "--disable-pip-version-check", "--quiet", requirement],
        ]
        for step in steps:
            try:
                r = subprocess.run(step, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, check=False)
            except subprocess.TimeoutExpired:
                pytest.skip(f"installing {requirement} ran past 900 s")
            if r.returncode != 0:
                shutil.rmtree(root, ignore_errors=True)
                pytest.skip(f"could not install {requirement}: {(r.stderr or r.stdout).strip()[-300:]}")
        done.write_text(requirement + "\n")
    return root


def recipe_ctx(
    recipe: str, program: tuple[str, str, str] | str, engine: Engine, tokenizer: Any, max_tokens: int
) -> AgentContext:
    """A packaged remote recipe's command and sandbox keys, with its program from the pinned install
    (an npm package, or a pip requirement in a virtualenv; bound read-only into the sandbox and first
    on its PATH) and ``rollout.max_tokens=max_tokens``."""
    cfg = load_config(str(packaged_config(recipe)))
    if isinstance(program, str):
        venv = pip_venv(program)
        bin_dir, prefix = venv / "bin", str(venv)
    else:
        bin_dir = npm_program(*program).parent
        prefix = str(bin_dir.parent.parent)  # the install's root: .bin links into node_modules

    async def make_sandbox(t: Task, *, warm: bool = False):  # type: ignore[no-untyped-def]
        spec = cfg.sandbox.model_dump() | {
            "workspace": t.repo, "workdir": t.workdir, "host_paths": [prefix],
            "env": {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"},
        }  # fmt: skip
        return await create_sandbox(SandboxSpec.model_validate(spec), warm=warm)

    return AgentContext(
        engine, ChatFormat(tokenizer), SamplingParams(max_tokens=max_tokens), make_sandbox, group_id="g1",
        remote_command=cfg.rollout.remote_command, remote_timeout_s=300,
    )  # fmt: skip


def assert_recorded_token_exactly(traj: Any, ledger: Any) -> None:
    """A real-model rollout of an agent program: it ended as a program run does (a small model's reply
    is often cut at the cap, which some programs treat as an error: ``token_limit``), reached the
    model, and every mask-1 token of every sequence is what the engine sampled in that context."""
    assert traj.exit_status in ("submitted", "token_limit"), traj.error
    assert traj.metrics["proxy_calls"] >= 1 and sum(traj.response_mask) > 0
    for seq in traj.sequences():
        assert ledger.verify(seq) is None
