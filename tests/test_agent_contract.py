"""One suite for every registered ``AgentLoop`` (single_turn, tool, swe, remote) on a real bwrap
sandbox and a real task, with the shared scripted engine behind a :class:`SampledLedger`:

- every sequence's ids, mask and logprobs have one length, and each mask-1 run is exactly what the
  engine sampled after exactly that context, with the engine's logprobs; mask-0 tokens carry 0.0;
- every sequence carries the task id and the context's group id;
- a failing engine comes back as data: a trajectory with exit status ``error`` and the reason, never
  an exception."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, get_args

import pytest

from coderl.agents import LOOPS, AgentContext, get_loop
from coderl.agents.baseline import BaselineCache
from coderl.chat import ChatFormat
from coderl.engine.base import Engine
from coderl.engine.params import SamplingParams
from coderl.engine.scripted import ScriptedEngine
from coderl.errors import EngineUnavailableError
from coderl.sandbox import SandboxSpec, create_sandbox
from coderl.tasks import load_tasks
from coderl.train.ledger import SampledLedger
from coderl.types import ExitStatus, Task
from tests.test_tasks import make_native

AGENT = Path(__file__).parent / "data" / "agents" / "openai_sdk_agent.py"


def call(name: str, **args: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def script(loop: str, task: Task) -> list[str]:
    """Replies that take each loop through a few turns to the end of the task."""
    return {
        "single_turn": ["```diff\n" + (task.gold_patch or "") + "```"],
        "tool": ["Let me think. " + call("submit", answer="the add function subtracts")],
        "swe": [
            call("view", path="calc.py"),
            call("str_replace", path="calc.py", old="return a - b", new="return a + b"),
            call("submit"),
        ],
        "remote": ["ls", "cat calc.py", "add subtracts"],
    }[loop]


def context(loop: str, engine: Engine, tokenizer: Any, baselines: BaselineCache) -> AgentContext:
    async def make_sandbox(t: Task, *, warm: bool = False):  # type: ignore[no-untyped-def]
        return await create_sandbox(
            SandboxSpec(workspace=t.repo, workdir=t.workdir, network=loop == "remote"), warm=warm
        )

    command = f"{sys.executable} - <<'AGENT_EOF'\n{AGENT.read_text()}\nAGENT_EOF" if loop == "remote" else ""
    return AgentContext(
        engine, ChatFormat(tokenizer), SamplingParams(max_tokens=256), make_sandbox, group_id="contract-g",
        baselines=baselines, remote_command=command, remote_timeout_s=120,
    )  # fmt: skip


@pytest.fixture
def task(tmp_path: Path) -> Task:
    return load_tasks(f"native:{make_native(tmp_path)}")[0]


@pytest.fixture
def baselines() -> Any:
    cache = BaselineCache()
    yield cache
    cache.close()


def test_every_registered_loop_is_in_the_suite() -> None:
    assert set(LOOPS) == {"single_turn", "tool", "swe", "remote"}


@pytest.mark.parametrize("loop", list(LOOPS))
async def test_trajectories_are_what_the_engine_sampled(
    loop: str, task: Task, tokenizer: Any, baselines: BaselineCache
) -> None:
    engine = ScriptedEngine(script(loop, task), tokenizer, default="I am done.")
    ledger = SampledLedger(engine)
    traj = await get_loop(loop).run(task, context(loop, ledger, tokenizer, baselines))
    assert traj.exit_status in get_args(ExitStatus) and traj.exit_status != "error", traj.error
    assert traj.num_turns >= 1 and len(engine.calls) >= 1
    for seq in traj.sequences():
        assert len(seq.response_ids) == len(seq.response_mask) == len(seq.logprobs)
        assert ledger.verify(seq) is None  # every model token and its logprob as sampled, in that context
        env = [lp for lp, m in zip(seq.logprobs, seq.response_mask, strict=True) if m == 0]
        assert env == [0.0] * len(env)
        assert (seq.task_id, seq.group_id) == (task.id, "contract-g")
    assert isinstance(traj.patch, str)


@pytest.mark.parametrize("loop", list(LOOPS))
async def test_a_failing_engine_comes_back_as_data(
    loop: str, task: Task, tokenizer: Any, baselines: BaselineCache
) -> None:
    engine = ScriptedEngine([EngineUnavailableError("the engine went away")] * 8, tokenizer)
    traj = await get_loop(loop).run(task, context(loop, engine, tokenizer, baselines))
    assert traj.exit_status == "error" and traj.error
    assert traj.task_id == task.id and traj.group_id == "contract-g"
    for seq in traj.sequences():
        assert len(seq.response_ids) == len(seq.response_mask) == len(seq.logprobs)
