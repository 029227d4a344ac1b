"""Codex CLI (npm @openai/codex, pinned) end to end: the packaged remote_codex.yaml's command runs the
real program in a real bwrap sandbox, through a per-rollout recording proxy, on the Responses API.

With a scripted engine (what is under test is the wire between Codex and the proxy, and the merge) the
model's tool call must come back to Codex as a function call, Codex must run it, and both calls must
merge into one trajectory whose sampled tokens are the scripted ones. With the real model the calls
must be recorded token-exactly (every mask-1 token is what the engine sampled, in that context)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coderl.agents import get_loop
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.scripted import ScriptedEngine
from coderl.tasks import grade, load_tasks
from coderl.train.ledger import SampledLedger
from tests.agent_programs import CODEX, recipe_ctx
from tests.test_tasks import make_native

FIX = "sed -i 's/a - b/a + b/' calc.py"
CALL = f'<tool_call>\n{{"name": "exec_command", "arguments": {{"cmd": "{FIX}"}}}}\n</tool_call>'
FINAL = "Fixed add: it now returns a + b."


async def test_codex_runs_the_models_tool_call_and_its_calls_merge(tmp_path: Path, tokenizer: Any) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    engine = ScriptedEngine([CALL, FINAL], tokenizer, name="scripted")
    traj = await get_loop("remote").run(task, recipe_ctx("remote_codex.yaml", CODEX, engine, tokenizer, max_tokens=256))
    assert traj.exit_status == "submitted", traj.error
    # Codex sent two Responses calls (the second with the command's output) and they are one trajectory
    assert (traj.metrics["proxy_calls"], traj.metrics["proxy_trajectories"], traj.num_turns) == (2, 1, 2)
    assert traj.parts == []
    prompt = tokenizer.decode(traj.prompt_ids)
    assert "You are a coding agent in a git repository" in prompt  # the recipe's instructions
    assert "exec_command" in prompt and "web_search" not in prompt  # its tools, the unusable ones off
    # the sampled tokens are exactly the scripted replies; Codex's function_call_output is mask 0
    sampled = [t for t, m in zip(traj.response_ids, traj.response_mask, strict=True) if m]
    assert tokenizer.decode(sampled) == CALL + "<|im_end|>" + FINAL + "<|im_end|>"
    env = tokenizer.decode([t for t, m in zip(traj.response_ids, traj.response_mask, strict=True) if not m])
    assert "Process exited with code 0" in env
    assert engine.calls[1].prompt_ids[: len(traj.prompt_ids)] == traj.prompt_ids
    # Codex ran the command it got as a function call: the patch fixes the task, and holds nothing else
    assert "+    return a + b" in traj.patch and ".codex" not in traj.patch
    assert (await grade(task, traj.patch)).resolved


@pytest.mark.slow
async def test_codex_with_the_real_model_is_recorded_token_exactly(
    tmp_path: Path, tokenizer: Any, engine: EmbeddedEngine
) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    ledger = SampledLedger(engine)
    traj = await get_loop("remote").run(task, recipe_ctx("remote_codex.yaml", CODEX, ledger, tokenizer, max_tokens=24))
    # a reply cut at the cap ends Codex's run with exit status 1 (it treats "incomplete" as an error)
    assert traj.exit_status in ("submitted", "token_limit"), traj.error
    if traj.exit_status == "token_limit":
        assert "rollout.max_tokens=24" in (traj.error or "") and "max_output_tokens" in (traj.error or "")
    assert traj.metrics["proxy_calls"] >= 1 and sum(traj.response_mask) > 0
    assert traj.metrics["model_tokens"] <= 24 * traj.metrics["proxy_calls"]  # rollout.max_tokens capped each call
    for seq in traj.sequences():  # every mask-1 token is what the engine sampled, in that context
        assert ledger.verify(seq) is None
    assert "exec_command" in tokenizer.decode(traj.prompt_ids)
