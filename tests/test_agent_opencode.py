"""opencode (npm opencode-ai, pinned) end to end: the packaged remote_opencode.yaml's command runs the
real program in a real bwrap sandbox, through a per-rollout recording proxy, on chat completions
(streamed).

With a scripted engine: the model's tool call must reach opencode as a tool call that it runs, the
session's calls must merge into one trajectory per conversation (the main one, and opencode's title
request as a sequence of its own), with the scripted tokens sampled. With the real model the calls
must be recorded token-exactly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coderl.agents import get_loop
from coderl.engine.embedded import EmbeddedEngine
from coderl.engine.params import SamplingParams
from coderl.engine.scripted import ScriptedEngine
from coderl.tasks import grade, load_tasks
from coderl.train.ledger import SampledLedger
from tests.agent_programs import OPENCODE, assert_recorded_token_exactly, recipe_ctx
from tests.test_tasks import make_native

RECIPE = "remote_opencode.yaml"
FIX = "sed -i 's/a - b/a + b/' calc.py"
CALL = f'<tool_call>\n{{"name": "bash", "arguments": {{"command": "{FIX}", "description": "Fix add"}}}}\n</tool_call>'
FINAL = "Fixed add: it now returns a + b."
TITLE = "Fix add in calc.py"


def script(tokenizer: Any) -> Callable[[list[int], SamplingParams], list[int]]:
    """The title request (it comes whenever opencode sends it) gets a title; the main conversation the
    tool call, then the final reply."""
    end = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    main = iter([CALL, FINAL])

    def reply(prompt_ids: list[int], params: SamplingParams) -> list[int]:
        text = TITLE if "title generator" in tokenizer.decode(prompt_ids) else next(main, "ok")
        return [*tokenizer.encode(text), end]

    return reply


async def test_opencode_runs_the_models_tool_call_and_its_calls_merge(tmp_path: Path, tokenizer: Any) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    engine = ScriptedEngine([], tokenizer, name="scripted", default=script(tokenizer))
    traj = await get_loop("remote").run(task, recipe_ctx(RECIPE, OPENCODE, engine, tokenizer, max_tokens=256))
    assert traj.exit_status == "submitted", traj.error
    assert (traj.metrics["proxy_calls"], traj.metrics["proxy_trajectories"], traj.num_turns) == (3, 2, 2)
    prompt = tokenizer.decode(traj.prompt_ids)
    assert "You are a coding agent in a git repository" in prompt and '"name": "bash"' in prompt
    assert '"name": "webfetch"' not in prompt
    sampled = [t for t, m in zip(traj.response_ids, traj.response_mask, strict=True) if m]
    assert tokenizer.decode(sampled) == CALL + "<|im_end|>" + FINAL + "<|im_end|>"
    [title] = traj.parts  # the title request: a conversation of its own, trained with the rollout
    assert tokenizer.decode([t for t, m in zip(title.response_ids, title.response_mask, strict=True) if m]) == (
        TITLE + "<|im_end|>"
    )
    # new_context, or sub_agent when the title request came between the main conversation's calls
    splits = traj.metrics.get("proxy_splits/new_context", 0) + traj.metrics.get("proxy_splits/sub_agent", 0)
    assert splits == 1
    assert "+    return a + b" in traj.patch and ".opencode" not in traj.patch
    assert (await grade(task, traj.patch)).resolved


@pytest.mark.slow
async def test_opencode_with_the_real_model_is_recorded_token_exactly(
    tmp_path: Path, tokenizer: Any, engine: EmbeddedEngine
) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    ledger = SampledLedger(engine)
    traj = await get_loop("remote").run(task, recipe_ctx(RECIPE, OPENCODE, ledger, tokenizer, max_tokens=24))
    assert_recorded_token_exactly(traj, ledger)
