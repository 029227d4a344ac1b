"""Agent loops with a scripted engine (orchestration under test) on a real sandbox and real tasks."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from coderl.agents import AgentContext, AgentLimits, get_loop
from coderl.chat import ChatFormat
from coderl.engine.base import Engine
from coderl.engine.params import SamplingParams
from coderl.engine.scripted import ScriptedEngine, scripted_logprobs
from coderl.engine.stops import name_verdict
from coderl.errors import AgentError
from coderl.sandbox import SandboxSpec, create_sandbox
from coderl.tasks import grade, load_tasks
from coderl.types import Task
from tests.test_tasks import make_native


def ScriptedChatEngine(tokenizer: Any, replies: list[Any]) -> ScriptedEngine:
    """The shared scripted engine answering each call with the next scripted text as real token ids
    (then "I am done."), at policy version 3."""
    return ScriptedEngine(replies, tokenizer, default="I am done.", version=3)


def call(name: str, **args: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


@pytest.fixture
def task(tmp_path: Path) -> Task:
    return load_tasks(f"native:{make_native(tmp_path)}")[0]


def ctx_for(engine: Engine, tokenizer: Any, **limits: Any) -> AgentContext:
    async def make_sandbox(t: Task, *, warm: bool = False):  # type: ignore[no-untyped-def]
        return await create_sandbox(SandboxSpec(workspace=t.repo, workdir=t.workdir), warm=warm)

    return AgentContext(
        engine,
        ChatFormat(tokenizer),
        SamplingParams(max_tokens=256),
        make_sandbox,
        AgentLimits(**limits),
        "g1",
    )


def assert_token_exact(traj: Any, engine: ScriptedEngine) -> None:
    """Every engine call saw exactly prompt_ids + response_ids so far; model tokens have mask 1."""
    assert len(traj.response_ids) == len(traj.response_mask) == len(traj.logprobs)
    for prompt in engine.prompts:
        assert prompt == (traj.prompt_ids + traj.response_ids)[: len(prompt)]
    runs = [
        list(g)
        for m, g in itertools.groupby(zip(traj.logprobs, traj.response_mask, strict=True), key=lambda x: x[1])
    ]
    for run in runs:  # each model turn carries the engine's logprobs, each environment insert zeros
        logprobs = [lp for lp, _ in run]
        assert logprobs == (scripted_logprobs(len(run)) if run[0][1] == 1 else [0.0] * len(run))


async def test_swe_loop_fixes_the_bug_token_exactly(task: Task, tokenizer: Any) -> None:
    engine = ScriptedChatEngine(tokenizer, [
        "Let me look.\n" + call("view", path="calc.py"),
        call("str_replace", path="calc.py", old="return a - b", new="return a + b"),
        call("bash", command="python -c 'from calc import add; print(add(2, 3))'"),
        call("submit"),
    ])  # fmt: skip
    traj = await get_loop("swe").run(task, ctx_for(engine, tokenizer))
    assert traj.exit_status == "submitted", traj.error
    assert traj.num_turns == 4 and len(engine.prompts) == 4
    assert_token_exact(traj, engine)
    assert "+    return a + b" in traj.patch
    assert (await grade(task, traj.patch)).resolved
    decoded = tokenizer.decode(traj.response_ids)
    assert "    1  def add(a, b):" in decoded and "5\n[exit code 0]" in decoded
    assert traj.metrics["tool_calls/str_replace"] == 1 and traj.metrics["format_errors"] == 0
    assert traj.policy_version == 3 and traj.group_id == "g1"
    assert engine.ended == [engine.calls[0].session_id]  # the engine may drop the session's KV now


async def test_malformed_calls_get_corrective_messages(task: Task, tokenizer: Any) -> None:
    engine = ScriptedChatEngine(tokenizer, [
        '<tool_call>{"name": view, }</tool_call>',
        "I think the bug is in add.",
        call("nonexistent"),
        call("str_replace", path="calc.py", old="a", new="b"),
        call("submit"),
    ])  # fmt: skip
    traj = await get_loop("swe").run(task, ctx_for(engine, tokenizer))
    text = tokenizer.decode(traj.response_ids)
    assert traj.exit_status == "submitted" and traj.metrics["format_errors"] == 3
    assert "is not valid JSON" in text and "No tool call found" in text and "no tool 'nonexistent'" in text
    assert "occurs" in text and "exactly once" in text


async def test_a_call_missing_a_required_argument_is_a_format_error(task: Task, tokenizer: Any) -> None:
    """A call its tool cannot run (a required argument left out) is told what it needs and counts as a
    format error, so algo.format_reward pays nothing for it: a policy trained with the bonus once
    learned to write replace_function with a path only and submit, at full format bonus."""
    engine = ScriptedChatEngine(tokenizer, [call("str_replace", path="calc.py"), call("submit")])
    traj = await get_loop("swe").run(task, ctx_for(engine, tokenizer))
    assert traj.exit_status == "submitted" and traj.metrics["format_errors"] == 1
    assert "Error: str_replace needs" in tokenizer.decode(traj.response_ids)
    assert_token_exact(traj, engine)


async def test_max_format_errors_ends_the_rollout_at_the_nth_error(task: Task, tokenizer: Any) -> None:
    """rollout.max_format_errors: the Nth format error ends the trajectory (format_limit), the edit
    made before it kept; below the limit each error is answered and the loop goes on."""
    edit = call("str_replace", path="calc.py", old="return a - b", new="return a + b")
    engine = ScriptedChatEngine(tokenizer, [edit, "no call here", call("nonexistent"), call("submit")])
    traj = await get_loop("swe").run(task, ctx_for(engine, tokenizer, max_format_errors=2))
    assert traj.exit_status == "format_limit" and traj.num_turns == 3 and len(engine.prompts) == 3
    assert traj.metrics["format_errors"] == 2 and "return a + b" in traj.patch
    assert "no tool 'nonexistent'" not in tokenizer.decode(traj.response_ids)  # no turn follows to read it
    assert_token_exact(traj, engine)
    engine = ScriptedChatEngine(tokenizer, ["no call here", call("submit")])
    traj = await get_loop("swe").run(task, ctx_for(engine, tokenizer, max_format_errors=2))
    assert traj.exit_status == "submitted" and traj.metrics["format_errors"] == 1
    assert "No tool call found" in tokenizer.decode(traj.response_ids)


async def test_limits_end_the_rollout_with_a_patch(task: Task, tokenizer: Any) -> None:
    edits = [call("str_replace", path="calc.py", old="return a - b", new="return a + b")]
    engine = ScriptedChatEngine(tokenizer, edits + [call("bash", command="true")] * 10)
    traj = await get_loop("swe").run(task, ctx_for(engine, tokenizer, max_turns=3))
    assert traj.exit_status == "step_limit" and traj.num_turns == 3 and "return a + b" in traj.patch
    probe = ScriptedChatEngine(tokenizer, [call("submit")])
    await get_loop("swe").run(task, ctx_for(probe, tokenizer))
    prompt_len = len(probe.prompts[0])
    engine = ScriptedChatEngine(tokenizer, [call("bash", command="true")] * 10)
    traj = await get_loop("swe").run(task, ctx_for(engine, tokenizer, max_context_tokens=prompt_len + 40))
    assert traj.exit_status == "context_limit" and 1 <= traj.num_turns < 10
    engine = ScriptedChatEngine(tokenizer, [call("bash", command="true")] * 10)
    traj = await get_loop("swe").run(task, ctx_for(engine, tokenizer, max_total_tokens=60))
    assert traj.exit_status == "token_limit"


async def test_editor_tools(task: Task, tokenizer: Any) -> None:
    engine = ScriptedChatEngine(tokenizer, [
        call("create", path="notes/new.py", text="x = 1\n"),
        call("insert", path="notes/new.py", line=1, text="y = 2"),
        call("view", path="notes/new.py", start=2, end=2),
        call("undo_edit", path="notes/new.py"),
        call("find_file", pattern="*.py"),
        call("search", text="def mul"),
        call("submit"),
    ])  # fmt: skip
    traj = await get_loop("swe").run(task, ctx_for(engine, tokenizer))
    text = tokenizer.decode(traj.response_ids)
    assert "    2  y = 2" in text and "./calc.py" in text and "calc.py:5:def mul" in text
    assert "+x = 1" in traj.patch and "y = 2" not in traj.patch  # the insert was undone


async def test_search_and_find_file_run_without_a_shell_and_keep_the_first_lines(
    task: Task, tokenizer: Any
) -> None:
    odd = "-n 'q\" $(x)"  # looks like an option, holds both quotes and a substitution: taken literally
    (task.repo / "many.py").write_text("".join(f"v{i} = '{odd}'\n" for i in range(60)))
    engine = ScriptedChatEngine(tokenizer, [
        call("search", text=odd),
        call("search", text="no such text anywhere"),
        call("find_file", pattern="*.nothing"),
        call("submit"),
    ])  # fmt: skip
    traj = await get_loop("swe").run(task, ctx_for(engine, tokenizer, max_tool_output_chars=100_000))
    text = tokenizer.decode(traj.response_ids)
    hits = [line for line in text.splitlines() if line.startswith("./many.py:")]
    assert [h.split(":")[1] for h in hits] == [str(i) for i in range(1, 51)]  # the first 50, as head kept
    assert "No matches for 'no such text anywhere'." in text and "No files match '*.nothing'." in text


async def test_single_turn_and_registry(task: Task, tokenizer: Any) -> None:
    diff = "```diff\n" + (task.gold_patch or "") + "```"
    engine = ScriptedChatEngine(tokenizer, [diff])
    traj = await get_loop("single_turn").run(task, ctx_for(engine, tokenizer))
    assert traj.exit_status == "submitted" and (await grade(task, traj.patch)).resolved
    assert get_loop("coderl.agents.swe:SWELoop").name == "swe"
    with pytest.raises(AgentError, match="registered"):
        get_loop("nope")


async def test_engine_failure_is_recorded_not_raised(task: Task, tokenizer: Any) -> None:
    broken = ScriptedEngine([ConnectionError("engine went away")], tokenizer)
    traj = await get_loop("swe").run(task, ctx_for(broken, tokenizer))
    assert traj.exit_status == "error" and "engine went away" in (traj.error or "")


async def test_baseline_is_made_once_per_snapshot_and_seeds_each_sandbox(task: Task) -> None:
    from coderl.agents.baseline import BaselineCache

    made: list[Task] = []

    async def make_sandbox(t: Task, *, warm: bool = False):  # type: ignore[no-untyped-def]
        made.append(t)
        return await create_sandbox(SandboxSpec(workspace=t.repo, workdir=t.workdir), warm=warm)

    cache = BaselineCache()
    seeded = await asyncio.gather(*(cache.task_with_baseline(task, make_sandbox) for _ in range(4)))
    assert len(made) == 1  # four concurrent rollouts of one task: one baseline
    assert all(s is not None and s.repo == seeded[0].repo for s in seeded)  # type: ignore[union-attr]
    first = seeded[0]
    assert first is not None and (first.repo / ".git").is_dir() and first.repo != task.repo
    async with await make_sandbox(first) as sb:
        assert (await sb.exec("git status --porcelain")).stdout == ""  # the snapshot, committed
        await sb.write_file("new.txt", "x\n")
        diff = (await sb.exec("git add -A && git diff --cached --stat")).stdout
        assert "new.txt" in diff and len(diff.splitlines()) == 2
    root = cache.folder
    assert root is not None and root.is_dir()
    cache.close()
    assert not root.exists()  # closed: the baselines are gone
    again = BaselineCache()
    assert await again.task_with_baseline(task, make_sandbox) is not None
    forgotten = again.folder
    assert forgotten is not None and forgotten.is_dir()
    del again  # never closed: collected, and its folder goes with it
    gc.collect()
    assert not forgotten.exists()


async def test_response_prefix_is_written_by_the_environment(task: Task, tokenizer: Any) -> None:
    body = json.dumps({"name": "view", "arguments": {"path": "calc.py"}})
    engine = ScriptedChatEngine(
        tokenizer, [body + "\n</tool_call>", json.dumps({"name": "submit", "arguments": {}})]
    )
    ctx = ctx_for(engine, tokenizer)
    ctx.response_prefix = "<tool_call>\n"
    traj = await get_loop("swe").run(task, ctx)
    assert traj.exit_status == "submitted" and traj.metrics["format_errors"] == 0, traj.error
    assert_token_exact(traj, engine)
    opener = tokenizer.encode("<tool_call>\n", add_special_tokens=False)
    for prompt in engine.prompts:  # each turn the model continues the opener, which is not its own
        assert prompt[-len(opener) :] == opener
    first_model = traj.response_mask.index(1)
    assert traj.response_ids[first_model - len(opener) : first_model] == opener
    assert set(traj.response_mask[first_model - len(opener) : first_model]) == {0}


def xml_call(tool: str, **args: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={tool}>\n{body}</function>\n</tool_call>"


async def test_a_wrong_tool_name_stops_the_reply_there_when_that_error_ends_the_rollout(
    task: Task, tokenizer: Any
) -> None:
    """rollout.cut_wrong_tool_names: the environment writes `<function=`, and with one format error
    left the engine is asked to stop a reply at the token where its tool name goes wrong (what follows
    cannot change the outcome); with errors to spare, or the setting off, the reply runs on."""
    wrong = "testing_calc>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>"
    submit = "submit>\n</function>\n</tool_call>"

    async def run_with(replies: list[str], **limits: Any) -> tuple[Any, ScriptedEngine]:
        engine = ScriptedChatEngine(tokenizer, replies)
        ctx = ctx_for(engine, tokenizer, **limits)
        ctx.chat, ctx.response_prefix = ChatFormat(tokenizer, "xml"), "<tool_call>\n<function="
        return await get_loop("swe").run(task, ctx), engine

    traj, engine = await run_with([wrong], max_format_errors=1)
    expect = engine.calls[0].params.expect_name
    assert expect is not None and "submit" in expect.names and "testing_calc" not in expect.names
    ids = tokenizer.encode(wrong, add_special_tokens=False)
    texts = [tokenizer.decode(ids[:n]) for n in range(1, len(ids) + 1)]
    k = next(n for n, t in enumerate(texts, start=1) if name_verdict(t, expect) == "departed")
    model = [t for t, m in zip(traj.response_ids, traj.response_mask, strict=True) if m]
    assert model == ids[:k] and k < len(ids) // 2  # cut where the name went wrong, that token kept
    assert traj.exit_status == "format_limit" and traj.metrics["tool_name_cuts"] == 1
    assert_token_exact(traj, engine)
    # errors to spare: the first reply runs on (the model reads the error); the last chance is watched
    traj, engine = await run_with([wrong, submit], max_format_errors=2)
    assert [c.params.expect_name is not None for c in engine.calls] == [False, True]
    assert traj.exit_status == "submitted" and traj.metrics["tool_name_cuts"] == 0
    assert "there is no tool 'testing_calc'" in tokenizer.decode(traj.response_ids)
    traj, engine = await run_with([wrong], max_format_errors=1, cut_wrong_tool_names=False)
    assert engine.calls[0].params.expect_name is None and traj.metrics["tool_name_cuts"] == 0
    assert traj.exit_status == "format_limit" and "</tool_call>" in tokenizer.decode(traj.response_ids)
    # a malformed first block voids the turn's action, so a later call in the same reply (which the
    # cut would never reach) does not run either: cut or not, the outcome is the same
    later = "testing>\n</function>\n</tool_call>\n<tool_call>\n" + xml_call("submit").removeprefix("<tool_call>\n")
    for cut in (True, False):
        traj, _ = await run_with([later], max_format_errors=1, cut_wrong_tool_names=cut)
        assert traj.exit_status == "format_limit" and traj.metrics["tool_name_cuts"] == int(cut)


async def test_symbol_tools_show_and_replace_whole_functions(task: Task, tokenizer: Any) -> None:
    calc = Path(task.repo) / "calc.py"
    calc.write_text(calc.read_text().replace("    return a * b", '    """The product.\n\n    >>> mul(2, 3)\n    6\n    """\n    return a * b'))
    (Path(task.repo) / "other.py").write_text("def add(x, y):\n    return [x, y]\n")
    fixed = "def add(a, b):\n    # fixed\n    return a + b"
    engine = ScriptedChatEngine(tokenizer, [
        xml_call("show_function", name="calc.add"),  # as an issue's traceback calls it: after its module
        xml_call("show_function", name="nope"),
        xml_call("replace_function", path="calc.py", name="add", text="def add(a, b):\n    return (a +"),
        xml_call("replace_function", path="calc.py", name="div", text="x"),
        xml_call("replace_function", path="calc/py", name="add", text="x"),  # two files define add
        xml_call("replace_function", path="calc/py", name="div", text="x"),  # none does
        xml_call("replace_function", path="calc.py", name="add", text="def add(a, b):\n    return a - b\n"),
        xml_call("replace_function", path="calc.py", name="add", text=fixed),
        # the one file that defines it; written without its docstring, mul keeps it
        xml_call("replace_function", path="calc/calc.py", name="mul", text="def mul(a, b):\n    return b * a"),
        xml_call("view", path="calc.py", start="1", end="z"),
        xml_call("submit"),
    ])  # fmt: skip
    ctx = ctx_for(engine, tokenizer)
    ctx.chat = ChatFormat(tokenizer, "xml")
    traj = await get_loop("swe").run(task, ctx)
    text = tokenizer.decode(traj.response_ids)
    # one call its tool cannot run (end="z" is not a whole number); the tools' own refusals are not format errors
    assert traj.exit_status == "submitted" and traj.metrics["format_errors"] == 1, traj.error
    assert "calc.py, lines 1-2:\ndef add(a, b):\n    return a - b\n" in text  # file, lines, raw source
    assert "other.py, lines 1-2:\ndef add(x, y):" in text
    assert "No function named 'nope'" in text
    assert "would not parse" in text and "the file is unchanged" in text
    assert "0 functions named 'div' in calc.py." in text
    assert "Error: no file 'calc/py'; a function 'add' is defined in calc.py, other.py." in text  # where it is
    assert "Error: no file 'calc/py'." in text
    assert "No change: the text is add as it stands in calc.py." in text
    assert "Replaced add in calc.py." in text
    assert "Replaced mul in calc.py (there is no file 'calc/calc.py'; its docstring kept)." in text
    assert "view needs end as a whole number, got 'z'" in text
    assert "+    # fixed" in traj.patch and "+    return a + b" in traj.patch
    assert "+    return b * a" in traj.patch and '"""The product.' not in traj.patch  # not removed, not added
    assert "other.py" not in traj.patch
    assert (await grade(task, traj.patch)).resolved
    assert_token_exact(traj, engine)
