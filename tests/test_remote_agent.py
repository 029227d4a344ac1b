"""The `remote` agent loop: an agent program that only knows the OpenAI SDK, run in a real bwrap
sandbox against the real engine through a per-rollout recording proxy."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from coderl.agents import AgentContext, get_loop
from coderl.chat import ChatFormat
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.params import SamplingParams
from coderl.sandbox import SandboxSpec, create_sandbox
from coderl.tasks import grade, load_tasks
from coderl.train.ledger import SampledLedger
from coderl.types import Task
from tests.test_tasks import make_native

AGENT = Path(__file__).parent / "data" / "agents" / "openai_sdk_agent.py"
# the program travels inline (a heredoc): the sandbox sees the host's Python, not the test folder
COMMAND = f"{sys.executable} - <<'AGENT_EOF'\n{AGENT.read_text()}\nAGENT_EOF"


def remote_ctx(engine: Any, tokenizer: Any, command: str, network: bool = True) -> AgentContext:
    async def make_sandbox(t: Task, *, warm: bool = False):  # type: ignore[no-untyped-def]
        return await create_sandbox(
            SandboxSpec(workspace=t.repo, workdir=t.workdir, network=network, memory_mb=4096), warm=warm
        )

    return AgentContext(
        engine, ChatFormat(tokenizer), SamplingParams(), make_sandbox, group_id="g7",
        remote_command=command, remote_timeout_s=120,
    )  # fmt: skip


async def test_remote_loop_without_a_command_is_an_error_naming_the_key(
    tmp_path: Path, tokenizer: Any
) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    traj = await get_loop("remote").run(task, remote_ctx(None, tokenizer, ""))
    assert traj.exit_status == "error" and "rollout.remote_command" in (traj.error or "")


@pytest.mark.slow
async def test_remote_loop_records_an_sdk_agent_token_exactly(
    tmp_path: Path, tokenizer: Any, engine: EmbeddedEngine
) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    ledger = SampledLedger(engine)
    traj = await get_loop("remote").run(task, remote_ctx(ledger, tokenizer, COMMAND))
    assert traj.exit_status == "submitted", traj.error
    # the two turns merged into one trajectory; the sub-agent's call is a sequence of its own
    assert traj.num_turns == 2 and traj.metrics["proxy_trajectories"] == 2
    assert [p.num_turns for p in traj.parts] == [1]
    sub = traj.parts[0]
    assert "Summarise in five words" in tokenizer.decode(sub.prompt_ids)
    assert (sub.task_id, sub.group_id, sub.patch, sub.exit_status) == (task.id, "g7", traj.patch, "submitted")
    assert traj.task_id == task.id and traj.group_id == "g7"
    for seq in traj.sequences():  # every mask-1 token is what the engine sampled, in that context
        assert ledger.verify(seq) is None
    assert 0 < sum(traj.response_mask) <= 24 and 0 in traj.response_mask  # tool text between turns: mask 0
    assert "output of command 0: ok" in tokenizer.decode(traj.response_ids)
    assert "+    return a + b" in traj.patch and ".coderl_task" not in traj.patch
    assert (await grade(task, traj.patch)).resolved


@pytest.mark.slow
async def test_remote_loop_reports_an_agent_that_fails(
    tmp_path: Path, tokenizer: Any, engine: EmbeddedEngine
) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    # no network: the agent cannot reach its proxy, and the SDK's error is what the trajectory says
    traj = await get_loop("remote").run(task, remote_ctx(engine, tokenizer, COMMAND, network=False))
    assert traj.exit_status == "error" and "agent command exited" in (traj.error or "")
    assert "Connection" in (traj.error or "")


@pytest.mark.slow
async def test_mini_swe_agent_runs_as_a_black_box(
    tmp_path: Path, tokenizer: Any, engine: EmbeddedEngine
) -> None:
    import shutil

    from coderl.config import load_config
    from coderl.config.packaged import packaged_config

    if shutil.which("mini", path=str(Path(sys.executable).parent)) is None:
        pytest.skip(
            "mini-swe-agent is not installed (pip install mini-swe-agent; it is in coderl's test extras)"
        )
    cfg = load_config(str(packaged_config("remote_mini_swe_agent.yaml")))
    # fewer, shorter turns than the shipped config, to keep the test short (later -c options win)
    command = cfg.rollout.remote_command.replace(
        " -t ", " -c agent.step_limit=2 -c model.model_kwargs.max_tokens=24 -t "
    )
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    ledger = SampledLedger(engine)
    ctx = remote_ctx(ledger, tokenizer, command)
    traj = await get_loop("remote").run(task, ctx)
    assert traj.error is None and traj.exit_status == "submitted", traj.error
    assert traj.metrics["proxy_calls"] == 2  # mini made its two model calls through its session
    assert ledger.verify(traj) is None and sum(traj.response_mask) > 0
    assert "mswea_bash_command" in tokenizer.decode(traj.prompt_ids)  # mini's own prompt, as rendered
