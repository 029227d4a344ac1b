"""Claude Code (npm @anthropic-ai/claude-code, pinned) end to end: the packaged
remote_claude_code.yaml's command runs the real program in a real bwrap sandbox, through a per-rollout
recording proxy, on the Messages API (streamed).

With a scripted engine (what is under test is the wire between Claude Code and the proxy, and the
merge): a reply cut at rollout.max_tokens gets Claude Code's "Output token limit hit" turn, the model's
tool call comes back as a tool_use that Claude Code runs, and every call merges into one trajectory
whose sampled tokens are the scripted ones. With the real model the calls must be recorded
token-exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coderl.agents import get_loop
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.scripted import ScriptedEngine
from coderl.tasks import grade, load_tasks
from coderl.train.ledger import SampledLedger
from tests.agent_programs import CLAUDE_CODE, assert_recorded_token_exactly, recipe_ctx
from tests.test_tasks import make_native

RECIPE = "remote_claude_code.yaml"
RAMBLE = "Let me think about this. " * 20  # over the cap of 64 tokens: cut, stop_reason max_tokens
FIX = "sed -i 's/a - b/a + b/' calc.py"
CALL = f'<tool_call>\n{{"name": "Bash", "arguments": {{"command": "{FIX}", "description": "Fix add"}}}}\n</tool_call>'
FINAL = "Fixed add: it now returns a + b."


async def test_claude_code_resumes_a_cut_reply_runs_the_tool_call_and_its_calls_merge(
    tmp_path: Path, tokenizer: Any
) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    engine = ScriptedEngine([RAMBLE, CALL, FINAL], tokenizer, name="scripted")
    traj = await get_loop("remote").run(task, recipe_ctx(RECIPE, CLAUDE_CODE, engine, tokenizer, max_tokens=64))
    assert traj.exit_status == "submitted", traj.error
    assert all(c.params.max_tokens == 64 for c in engine.calls)  # it asked for 32,000; the proxy capped it
    assert (traj.metrics["proxy_calls"], traj.metrics["proxy_trajectories"], traj.num_turns) == (3, 1, 3)
    prompt = tokenizer.decode(traj.prompt_ids)
    assert "You are a coding agent in a git repository" in prompt and '"name": "Bash"' in prompt
    assert "WebFetch" not in prompt  # --tools keeps three
    # sampled: the cut reply (its first 64 tokens), the tool call, the final reply - nothing else
    sampled = [t for t, m in zip(traj.response_ids, traj.response_mask, strict=True) if m]
    cut = tokenizer.encode(RAMBLE)[:64]
    assert sampled == cut + tokenizer.encode(CALL + "<|im_end|>" + FINAL + "<|im_end|>")
    env = tokenizer.decode([t for t, m in zip(traj.response_ids, traj.response_mask, strict=True) if not m])
    assert "Output token limit hit" in env  # Claude Code's own turn after the cut reply: mask 0
    assert "+    return a + b" in traj.patch and ".claude" not in traj.patch
    assert (await grade(task, traj.patch)).resolved


@pytest.mark.slow
async def test_claude_code_with_the_real_model_is_recorded_token_exactly(
    tmp_path: Path, tokenizer: Any, engine: EmbeddedEngine
) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    ledger = SampledLedger(engine)
    ctx = recipe_ctx(RECIPE, CLAUDE_CODE, ledger, tokenizer, max_tokens=24)
    assert "--max-turns 8" in ctx.remote_command
    ctx.remote_command = ctx.remote_command.replace("--max-turns 8", "--max-turns 2")  # a shorter test
    traj = await get_loop("remote").run(task, ctx)
    # a small model's replies are cut at 24 tokens; Claude Code resumes each until --max-turns ends its
    # run with exit status 1, and the rollout's exit status says why
    assert_recorded_token_exactly(traj, ledger)
    assert '"name": "Bash"' in tokenizer.decode(traj.prompt_ids)
