"""Guided samples: the environment writes a demonstration's first tokens in the model's place (mask 0),
the model samples the rest; the schedule anneals to nothing; held-out tasks are never guided."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coderl.agents import get_loop
from coderl.agents.guide import Guide, guide_tokens
from coderl.chat import ChatFormat
from coderl.config import load_config
from coderl.errors import ConfigError
from coderl.rollout.runner import task_groups
from coderl.tasks import grade, load_tasks
from coderl.tasks.calibration import Estimate
from coderl.train.curriculum import Curriculum
from coderl.train.guidance import Guidance, fix_point
from coderl.types import Task
from tests.test_agents import ScriptedChatEngine, assert_token_exact, call, ctx_for
from tests.test_tasks import make_native


def test_which_tokens_a_guide_writes_by_hand() -> None:
    guide = Guide(((1, 2, 3), (4, 5), (6,)), tokens=4)
    assert guide.total == 6
    assert guide.written(0) == [1, 2, 3] and guide.whole(0)
    assert guide.written(1) == [4] and not guide.whole(1)  # the model continues after 4
    assert guide.written(2) == [] and not guide.whole(2)
    assert guide.written(7) == []
    assert guide_tokens(6, 0.5) == 3 and guide_tokens(6, 0.99) == 5 and guide_tokens(6, 0.0) == 0
    with pytest.raises(ValueError, match=r"guide fraction: got 1\.5"):
        guide_tokens(6, 1.5)


@pytest.fixture
def task(tmp_path: Path) -> Task:
    return load_tasks(f"native:{make_native(tmp_path)}")[0]


async def test_a_guided_rollout_writes_the_demonstrations_start_and_the_model_samples_the_rest(
    task: Task, tokenizer: Any
) -> None:
    chat = ChatFormat(tokenizer)
    end = chat.end_of_turn
    assert end is not None
    view = chat.encode(call("view", path="calc.py")) + [end]
    fix_text = call("str_replace", path="calc.py", old="return a - b", new="return a + b")
    fix = chat.encode(fix_text) + [end]
    submit = chat.encode(call("submit")) + [end]
    guide = Guide((tuple(view), tuple(fix), tuple(submit)), tokens=len(view) + 5)  # turn 1 whole, 5 tokens of turn 2
    rest = tokenizer.decode(fix[5:-1])  # what the model writes after the written start of turn 2
    engine = ScriptedChatEngine(tokenizer, [rest, call("submit")])
    ctx = ctx_for(engine, tokenizer)
    ctx.guide = guide
    traj = await get_loop("swe").run(task, ctx)
    assert traj.exit_status == "submitted", traj.error
    assert len(engine.prompts) == 2  # the written first turn asked nothing of the engine
    assert_token_exact(traj, engine)
    assert traj.num_turns == 2 and traj.metrics["guided_tokens"] == len(view) + 5
    assert traj.metrics["tool_calls"] == 2  # str_replace (finished by the model) and submit; not the view
    ids, mask = traj.response_ids, traj.response_mask
    at = ids.index(view[0])
    assert ids[at : at + len(view)] == view and set(mask[at : at + len(view)]) == {0}
    second = engine.prompts[0][len(traj.prompt_ids) :]  # the first call: the written start of turn 2 ends it
    assert second[-5:] == fix[:5] and set(mask[len(second) - 5 : len(second)]) == {0}
    assert mask[len(second)] == 1  # then the model's own tokens
    assert (await grade(task, traj.patch)).resolved


def fix_context(task: Task) -> str:
    """The buggy line's text before its first changed character (from the gold patch)."""
    lines = (task.gold_patch or "").splitlines()
    old = next(x[1:] for x in lines if x.startswith("-") and not x.startswith("---"))
    new = next(x[1:] for x in lines if x.startswith("+") and not x.startswith("+++"))
    n = 0
    while old[n] == new[n]:
        n += 1
    return old[:n].strip()


def test_the_fix_point_of_a_one_line_change_by_hand() -> None:
    patch = "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n def f(x):\n-    return x - 1\n+    return x + 1\n"
    turns = ["show>", "replace>\ndef f(x):\n    return x + 1\n</tool_call>"]
    assert fix_point(turns, patch) == (1, turns[1].index("+ 1"))
    assert fix_point(turns, patch.replace("def f(x)", "def g(x)")) == (1, turns[1].index("+ 1"))  # the line alone
    twice = ["replace>\ndef g(x):\n    return x + 1\n\ndef h(x):\n    return x + 1\n"]
    assert fix_point(twice, patch) is None  # not the right context, and the line alone is ambiguous
    added = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,3 @@\n def f(x):\n+    x = abs(x)\n     return x\n"
    assert fix_point(["def f(x):\n    x = abs(x)\n    return x"], added) == (0, len("def f(x):\n"))
    edit = ["show>", "str_replace>\n<parameter=old>\nreturn x - 1\n</parameter>\n<parameter=new>\nreturn x + 1\n"]
    assert fix_point(edit, patch) == (1, edit[1].index("+ 1"))  # str_replace leaves the indentation off


def test_guidance_guides_unsolved_tasks_anneals_and_refuses_held_out_ones(tmp_path: Path, tokenizer: Any) -> None:
    # the bundled synth task's gold plan with the main job's symbol tools
    cfg = load_config(
        overrides=[
            "train.guide_share=0.25", "train.guide_fraction=0.5", "train.steps=4", "train.group_size=8",
            "rollout.agent=swe", "rollout.tools=[show_function,replace_function,submit]", "rollout.max_turns=3",
        ]
    )  # fmt: skip
    tasks = load_tasks("bundled:strkit-s010,strkit-s039")
    guidance = Guidance(cfg.train, cfg.rollout, ChatFormat(tokenizer), held_out={"strkit-s039"})
    assert [guidance.fraction(s) for s in (1, 2, 3, 4, 5)] == [0.5, 0.375, 0.25, 0.125, 0.0]
    assert guidance.guided_per_group() == 2
    curriculum = Curriculum(tasks[:1], "edge", {}, seed=0)
    (group,) = guidance.attach(task_groups(tasks[:1], 8), curriculum, step=1)
    assert group.guided == 2 and group.guide is not None
    assert [group.guide_of(i) is not None for i in range(8)] == [False] * 6 + [True] * 2
    demo = guidance._demonstration(tasks[0])
    assert demo is not None and 0 < demo[1] < group.guide.total
    assert group.guide.tokens == demo[1] // 2  # half the tokens before the fix at step 1
    chat = ChatFormat(tokenizer)
    flat = [i for turn in demo[0] for i in turn]
    shown = chat.decode(flat[: demo[1]])  # everything up to the token that must change
    assert shown.endswith(fix_context(tasks[0])) and shown.count("<tool_call>") == 2  # turn 1, then turn 2 up to the fix
    curriculum.counts["strkit-s010"] = Estimate(4, 1)  # once solved: no longer guided
    (group,) = guidance.attach(task_groups(tasks[:1], 8), curriculum, step=1)
    assert group.guided == 0 and group.guide is None
    curriculum.counts.clear()
    (group,) = guidance.attach(task_groups(tasks[:1], 8), curriculum, step=5)  # annealed away
    assert group.guide is None
    with pytest.raises(ConfigError, match="strkit-s039 is held out"):
        guidance.attach(task_groups(tasks[1:], 8), curriculum, step=1)
