"""The OpenAI Agents SDK (pinned, in a virtualenv of its own) as an agent program in the remote loop:
its default model class speaks the Responses API to the rollout's proxy session.

With a scripted engine, the model's tool call must reach the SDK as a function call, the SDK must run
its tool and send the output back, and both calls must merge into one trajectory whose sampled tokens
are the scripted ones. With the real model the calls must be recorded token-exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coderl.agents import AgentContext, get_loop
from coderl.chat import ChatFormat
from coderl.engine.base import Engine
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.params import SamplingParams
from coderl.engine.scripted import ScriptedEngine
from coderl.sandbox import SandboxSpec, create_sandbox
from coderl.tasks import grade, load_tasks
from coderl.train.ledger import SampledLedger
from coderl.types import Task
from tests.agent_programs import AGENTS_SDK, assert_recorded_token_exactly, pip_venv
from tests.test_tasks import make_native

AGENT = Path(__file__).parent / "data" / "agents" / "agents_sdk_agent.py"
FIX = "sed -i 's/a - b/a + b/' calc.py && echo fixed"
CALL = f'<tool_call>\n{{"name": "run", "arguments": {{"command": "{FIX}"}}}}\n</tool_call>'
FINAL = "I changed a - b to a + b in calc.py."


def sdk_ctx(engine: Engine, tokenizer: Any, max_tokens: int) -> AgentContext:
    venv = pip_venv(AGENTS_SDK)
    command = f"{venv}/bin/python - <<'AGENT_EOF'\n{AGENT.read_text()}\nAGENT_EOF"

    async def make_sandbox(t: Task, *, warm: bool = False):  # type: ignore[no-untyped-def]
        spec = SandboxSpec(
            workspace=t.repo, workdir=t.workdir, network=True, memory_mb=8192, host_paths=[str(venv)]
        )
        return await create_sandbox(spec, warm=warm)

    return AgentContext(
        engine, ChatFormat(tokenizer), SamplingParams(max_tokens=max_tokens), make_sandbox, group_id="g1",
        remote_command=command, remote_timeout_s=300,
    )  # fmt: skip


async def test_the_agents_sdk_runs_the_models_tool_call_and_its_calls_merge(tmp_path: Path, tokenizer: Any) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    engine = ScriptedEngine([CALL, FINAL], tokenizer, name="scripted")
    traj = await get_loop("remote").run(task, sdk_ctx(engine, tokenizer, max_tokens=128))
    assert traj.exit_status == "submitted", traj.error
    assert (traj.metrics["proxy_calls"], traj.metrics["proxy_trajectories"], traj.num_turns) == (2, 1, 2)
    prompt = tokenizer.decode(traj.prompt_ids)
    assert "You fix bugs in this repository" in prompt and '"name": "run"' in prompt
    sampled = [t for t, m in zip(traj.response_ids, traj.response_mask, strict=True) if m]
    assert tokenizer.decode(sampled) == CALL + "<|im_end|>" + FINAL + "<|im_end|>"
    env = tokenizer.decode([t for t, m in zip(traj.response_ids, traj.response_mask, strict=True) if not m])
    assert "fixed" in env  # the tool's output, sent back as a function_call_output: mask 0
    assert (await grade(task, traj.patch)).resolved


@pytest.mark.slow
async def test_the_agents_sdk_with_the_real_model_is_recorded_token_exactly(
    tmp_path: Path, tokenizer: Any, engine: EmbeddedEngine
) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    ledger = SampledLedger(engine)
    traj = await get_loop("remote").run(task, sdk_ctx(ledger, tokenizer, max_tokens=24))
    # the SDK raises on a reply cut at the cap (an incomplete response): exit status token_limit
    assert_recorded_token_exactly(traj, ledger)
