"""The supervised warm start: gold-patch demonstrations played through the real loop, held-out tasks
refused, the NLL of the assistant's tokens going down, and `coderl sft` writing a model folder that
a later run loads."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from coderl.chat import ChatFormat
from coderl.config import load_config
from coderl.config.packaged import default_train_config
from coderl.errors import ConfigError
from coderl.tasks import grade, load_tasks
from coderl.train.actor import Actor
from coderl.train.config import ActorConfig, SFTConfig
from coderl.train.demos import (
    NOT_IN_ISSUE,
    NOT_ONE_LINE,
    OVER_MAX_TOKENS,
    _changed_span,
    edit_span,
    gold_demonstrations,
    gold_plan,
    gold_turns,
    issue_callee,
    one_line_fix,
)
from coderl.train.sft import (
    build_demos,
    check_demos,
    check_gold_kinds,
    nll_loss,
    sft_steps,
    synth_kind,
    train_sft,
)
from coderl.types import Trajectory
from tests.test_tasks import GOLD, make_native


def test_one_line_fixes_and_what_a_person_would_type() -> None:
    fix = one_line_fix(GOLD)
    assert fix is not None and (fix.path, fix.line) == ("calc.py", 2)
    assert (fix.old, fix.new) == ("    return a - b", "    return a + b")
    assert _changed_span(fix.old, fix.new) == ("-", "+")
    assert _changed_span("x = a[i + 1] + 1", "x = a[i - 1] + 1") == (
        "i + 1",
        "i - 1",
    )  # '+' alone is not unique
    assert _changed_span("    total(items)", "    return total(items)") == ("total", "return total")
    assert _changed_span("if not (x < y):", "if x < y:") == ("not (x < y)", "x < y")
    source = "def f(i):\n    y = i + 1\n    return i + 1\n"  # unique in the file, not only in the line
    assert _changed_span("    return i + 1", "    return i - 1", source) == ("return i + 1", "return i - 1")
    two = GOLD.replace("+    return a + b", "+    return a + b\n+    # fixed")
    assert one_line_fix(two) is None  # not a one-line change


BASH = [
    "rollout.tools=[bash]",
    'rollout.response_prefix="<tool_call>\\n{\\"name\\": \\"bash\\", \\"arguments\\": {\\"command\\": \\""',
    "rollout.max_tokens=64",
    "model.tool_format=auto",
]
"""The bash-only recipe (the environment opens a bash call, the model writes the command)."""


def test_gold_turns_for_the_bash_loop_and_for_the_tool_loop(tmp_path: Path) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    bash = load_config(defaults=default_train_config(), overrides=BASH).rollout
    assert bash.response_prefix == '<tool_call>\n{"name": "bash", "arguments": {"command": "'
    turns = gold_turns(task, bash)
    assert turns is not None and len(turns) == 3 and all(t.endswith('"}}\n</tool_call>') for t in turns)
    assert (
        json.loads('"' + turns[2].split('"}}')[0] + '"') == "sed -i 's/-/+/' calc.py"
    )  # unique in the file: no line number
    tools = bash.model_copy(update={"response_prefix": "", "max_turns": 5, "tools": None})
    calls = gold_turns(task, tools)
    assert calls is not None and [json.loads(c.split("\n")[1])["name"] for c in calls] == [
        "search", "view", "str_replace", "submit"
    ]  # fmt: skip
    assert gold_turns(task, bash.model_copy(update={"max_turns": 2})) is None  # three moves do not fit
    elsewhere = dataclasses.replace(task, instruction="total([2, 3]) returns -1")  # the fix is in add()
    assert gold_plan(elsewhere, bash) == NOT_IN_ISSUE  # its first move could not be read off the issue


async def test_symbol_tool_demonstrations_rewrite_the_callee_in_xml(tmp_path: Path, tokenizer: Any) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    symbols = load_config(
        defaults=default_train_config(),
        overrides=[
            "rollout.tools=[show_function,replace_function,submit]",
            'rollout.response_prefix="<tool_call>\\n<function="',
            "model.tool_format=xml",
        ],
    )
    turns = gold_turns(task, symbols.rollout, "xml")
    assert turns == [
        "show_function>\n<parameter=name>\nadd\n</parameter>\n</function>\n</tool_call>",
        "replace_function>\n<parameter=path>\ncalc.py\n</parameter>\n<parameter=name>\nadd\n</parameter>\n"
        "<parameter=text>\ndef add(a, b):\n    return a + b\n</parameter>\n</function>\n</tool_call>",
        "submit>\n</function>\n</tool_call>",
    ]  # the whole fixed function, raw, after the prefix the environment writes
    assert gold_turns(task, symbols.rollout.model_copy(update={"max_turns": 2}), "xml") is None
    elsewhere = dataclasses.replace(task, instruction="total([2, 3]) returns -1")
    assert gold_plan(elsewhere, symbols.rollout, "xml") == NOT_IN_ISSUE
    chat = ChatFormat(tokenizer, "xml")
    source = f"gold:native:{tmp_path / 'calc-001'}"
    demos, made = await build_demos(symbols, chat, held_out=[], data=[source])
    assert made[source]["kept"] == 1 and demos[0].exit_status == "submitted"
    model_text = tokenizer.decode([t for t, m in zip(demos[0].response_ids, demos[0].response_mask, strict=True) if m])
    assert "return a + b" in model_text and "return a - b" not in model_text  # shown source is mask 0
    assert (await grade(task, demos[0].patch)).resolved



async def test_symbol_demonstrations_leave_out_a_docstring_the_fix_keeps(tmp_path: Path, tokenizer: Any) -> None:
    """replace_function keeps a docstring the text leaves out: the demonstration copies none back,
    unless the fix changes it."""
    symbols = load_config(
        defaults=default_train_config(),
        overrides=["rollout.tools=[show_function,replace_function,submit]", "model.tool_format=xml"],
    )
    doc = '    """Sum of a and b.\n\n    >>> add(2, 3)\n    5\n    """\n'
    for fixed_doc, copied in ((doc, False), (doc.replace("Sum", "The sum"), True)):
        task_dir = make_native(tmp_path / str(copied))
        calc = task_dir / "repo" / "calc.py"
        calc.write_text(calc.read_text().replace("def add(a, b):\n", "def add(a, b):\n" + doc))
        gold = (
            "--- a/calc.py\n+++ b/calc.py\n@@ -1,7 +1,7 @@\n def add(a, b):\n"
            + "".join(f"-{line}\n" for line in doc.splitlines()) + "".join(f"+{line}\n" for line in fixed_doc.splitlines())
            + "-    return a - b\n+    return a + b\n"
        )  # fmt: skip
        (task_dir / "gold.patch").write_text(gold)
        task = load_tasks(f"native:{task_dir}")[0]
        turns = gold_turns(task, symbols.rollout, "xml")
        assert turns is not None
        text = turns[1].split("<parameter=text>\n")[1].split("\n</parameter>")[0]
        assert text == "def add(a, b):\n" + (fixed_doc if copied else "") + "    return a + b"
        source = f"gold:native:{task_dir}"
        demos, made = await build_demos(symbols, ChatFormat(tokenizer, "xml"), held_out=[], data=[source])
        assert made[source]["kept"] == 1 and (await grade(task, demos[0].patch)).resolved
        assert ('-    """Sum' in demos[0].patch) == copied  # the docstring kept as it was, or fixed


async def test_symbol_edit_demonstrations_replace_only_the_changed_line(tmp_path: Path, tokenizer: Any) -> None:
    task = load_tasks(f"native:{make_native(tmp_path)}")[0]
    edit = load_config(
        defaults=default_train_config(),
        overrides=[
            "rollout.tools=[show_function,str_replace,submit]",
            'rollout.response_prefix="<tool_call>\\n<function="',
            "model.tool_format=xml",
        ],
    )
    turns = gold_turns(task, edit.rollout, "xml")
    assert turns == [
        "show_function>\n<parameter=name>\nadd\n</parameter>\n</function>\n</tool_call>",
        "str_replace>\n<parameter=path>\ncalc.py\n</parameter>\n<parameter=old>\nreturn a - b\n</parameter>\n"
        "<parameter=new>\nreturn a + b\n</parameter>\n</function>\n</tool_call>",
        "submit>\n</function>\n</tool_call>",
    ]  # the changed line alone, its indentation left off
    chat = ChatFormat(tokenizer, "xml")
    source = f"gold:native:{tmp_path / 'calc-001'}"
    demos, made = await build_demos(edit, chat, held_out=[], data=[source])
    assert made[source]["kept"] == 1 and demos[0].exit_status == "submitted"
    assert (await grade(task, demos[0].patch)).resolved


def test_edit_span_widens_a_repeated_line_until_it_is_unique() -> None:
    buggy = "def f(x):\n    y = x\n    y = x\n    return y - 1\n"
    fixed = "def f(x):\n    y = x\n    y = x + 1\n    return y - 1\n"
    assert edit_span(buggy, fixed, 1, 4) == ("y = x\n    return y - 1", "y = x + 1\n    return y - 1")
    removed = "def g(x):\n    if x:\n        return 0\n    return x\n"
    assert edit_span("def g(x):\n    return x\n", removed, 1, 2) == ("def g(x):", "def g(x):\n    if x:\n        return 0")
    assert edit_span(buggy, fixed, 1, 2) is None  # the change lies outside the function's lines


def test_the_issue_callee_is_the_first_function_the_issue_calls() -> None:
    synth = "Quarters is broken\n\n    assert quarter_start(date(2023, 8, 17)) == date(2023, 7, 1)\n"
    assert issue_callee(synth) == "quarter_start"
    raises = "    with pytest.raises(ValueError):\n        cfg.add_section(str('bad]name'))\n"
    assert issue_callee(raises) == "add_section"  # pytest's helpers and builtins are not the library's
    assert issue_callee("    assert not (is_leap(1900))") == "is_leap"
    assert issue_callee("Blank lines are broken") is None


async def test_demonstrations_are_the_loops_own_rendering_and_resolve(tmp_path: Path, tokenizer: Any) -> None:
    cfg = load_config(
        defaults=default_train_config(), overrides=[f"train.tasks=native:{make_native(tmp_path)}", *BASH]
    )
    chat = ChatFormat(tokenizer)
    demos, made = await build_demos(cfg, chat, held_out=[], data=[f"gold:native:{tmp_path / 'calc-001'}"])
    assert made[f"gold:native:{tmp_path / 'calc-001'}"]["kept"] == 1 and len(demos) == 1
    demo = demos[0]
    text = tokenizer.decode(demo.prompt_ids + demo.response_ids)
    assert "sed -i 's/-/+/' calc.py" in text and "def add(a, b)" in text  # the command and its real output
    assert demo.num_turns == 3 and demo.exit_status == "step_limit"
    model_text = tokenizer.decode(
        [t for t, m in zip(demo.response_ids, demo.response_mask, strict=True) if m]
    )
    assert "grep -rn" in model_text and "def add" in model_text and "[exit code" not in model_text  # masks
    assert (await grade(load_tasks(f"native:{tmp_path / 'calc-001'}")[0], demo.patch)).resolved
    source = f"gold:native:{tmp_path / 'calc-001'}"
    none, skipped = await build_demos(
        cfg, chat, held_out=load_tasks(source.removeprefix("gold:")), data=[source]
    )
    assert none == [] and skipped[source]["held_out_skipped"] == 1  # a held-out task is never demonstrated
    with pytest.raises(ConfigError, match="gold:TASK_SOURCE or runs:RUN_DIR"):
        await build_demos(cfg, chat, held_out=[], data=["somewhere"])
    only = cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"gold_kinds": ["negation"]})})
    none, skipped = await build_demos(only, chat, held_out=[], data=[source])
    assert none == [] and skipped[source]["other_kind"] == 1  # not a synthesized task: no kind to match


def test_an_empty_warm_start_says_what_each_source_skipped() -> None:
    report = {"gold:bundled:warmup": {"kept": 0, "turn_over_max_tokens": 3, "held_out_skipped": 2}}
    with pytest.raises(ConfigError, match=r"no demonstrations.*gold:bundled:warmup: turn_over_max_tokens 3, held_out_skipped 2.*rollout.max_tokens"):
        check_demos([], report)
    check_demos([Trajectory("t", "g", [1], response_ids=[2], response_mask=[1], logprobs=[0.0])], report)


def test_gold_kinds_name_the_synthesized_mutation_kinds() -> None:
    synth = load_tasks("bundled:spanlib-s005")[0]
    assert synth_kind(synth) == "off_by_one" and synth_kind(load_tasks("bundled:warmup")[0]) is None
    with pytest.raises(
        ConfigError, match=r"sft\.gold_kinds: unknown mutation kind 'negate'; valid kinds: operator,"
    ):
        check_gold_kinds(["negate"])
    check_gold_kinds(["negation", "drop_return"])


def test_the_nll_counts_model_tokens_only() -> None:
    t = Trajectory("t", "g", [1, 2], response_ids=[3, 4, 5], response_mask=[1, 0, 1], logprobs=[0.0] * 3)
    loss = nll_loss([t])([0], [torch.tensor([-1.0, -5.0, -3.0])])
    assert float(loss) == pytest.approx((1.0 + 3.0) / 2)  # the environment token's -5 is not a target


@pytest.mark.slow
def test_sft_lowers_the_nll_and_coderl_sft_writes_a_model_folder(
    tmp_path: Path, tokenizer: Any, capsys: pytest.CaptureFixture[str], tiny_model: Path
) -> None:
    """On the tiny model (tests/tiny.py): the warm start's steps and the command's folder are checked;
    what a warm start teaches the real model is measured by the benches."""
    from coderl.checkpoint import load_model
    from coderl.cli.main import main

    suite = make_native(tmp_path)
    small = [f"train.tasks=native:{suite}", "train.val_tasks=none"]
    cfg = load_config(defaults=default_train_config(), overrides=small)
    demos, _ = asyncio.run(build_demos(cfg, ChatFormat(tokenizer, "xml"), [], [f"gold:native:{suite}"]))
    assert len(demos) == 1
    actor = Actor(ActorConfig(seed=0), tiny_model)
    actor.setup()
    rows = train_sft(actor, demos, SFTConfig(lr=1e-4, batch_size=1, epochs=2), seed=0)
    assert len(rows) == 2 == sft_steps(len(demos), SFTConfig(batch_size=1, epochs=2))  # the progress bar's total
    assert rows[-1]["nll"] < rows[0]["nll"]
    assert sft_steps(17, SFTConfig(batch_size=8, epochs=2, max_demos=16)) == 4
    out = tmp_path / "warm"
    args = ["sft", *small, f"sft.data=[gold:native:{suite}]", "sft.lr=1e-4", "sft.epochs=2", f"model.path={tiny_model}"]
    assert main([*args, f"run.dir={tmp_path / 'run'}", "--out", str(out)]) == 0
    assert "coderl train model.path=" in " ".join(capsys.readouterr().err.split())
    assert [json.loads(x)["sft_step"] for x in (tmp_path / "run" / "sft.jsonl").read_text().splitlines()] == [
        1,
        2,
    ]
    warm = load_model(out, torch.float32, "cpu")  # a complete checkpoint folder: config, tokenizer, weights
    base = actor.model  # trained above, from the same start: the written weights moved too
    assert (out / "tokenizer.json").is_file() and (out / "model.safetensors").is_file()
    assert warm.config.model_type == base.config.model_type
    fresh = Actor(ActorConfig(seed=0), tiny_model)
    fresh.setup()
    moved = [
        not torch.equal(a, b)
        for a, b in zip(warm.state_dict().values(), fresh.model.state_dict().values(), strict=True)
    ]
    assert any(moved)
    # full weights, as coderl train's warm start trains (the packaged actor.lora_rank is the RL phase's):
    # adapters would leave every norm weight where it was
    start = dict(load_model(tiny_model, torch.float32, "cpu").named_parameters())
    norms = {n: p for n, p in warm.named_parameters() if "norm" in n}
    assert norms and all(not torch.equal(p, start[n]) for n, p in norms.items())


def test_the_warm_start_has_its_own_checkpointing_and_micro_batches() -> None:
    from coderl.train.loop import build_policy

    cfg = load_config(
        defaults=default_train_config(),
        overrides=[
            "actor.gradient_checkpointing=false", "actor.micro_batch_tokens=2048",
            "sft.gradient_checkpointing=true", "sft.micro_batch_tokens=1024",
        ],
    )  # fmt: skip
    warm, rl = build_policy(cfg, False, None, warm_start=True), build_policy(cfg, True, None)
    assert isinstance(warm, Actor) and isinstance(rl, Actor)  # built, not loaded: no weights read here
    assert (warm.cfg.gradient_checkpointing, warm.cfg.micro_batch_tokens, warm.cfg.lora_rank) == (True, 1024, 0)
    assert cfg.sft.actor_config(cfg.actor).lora_rank == 0  # coderl sft's actor: the same full weights
    assert (rl.cfg.gradient_checkpointing, rl.cfg.micro_batch_tokens, rl.cfg.lora_rank) == (False, 2048, 16)
    unset = load_config(defaults=default_train_config(), overrides=["sft.gradient_checkpointing=null"])
    same = build_policy(unset, False, None, warm_start=True)
    assert isinstance(same, Actor) and same.cfg.gradient_checkpointing == unset.actor.gradient_checkpointing


def test_a_full_weight_rl_phase_names_the_warm_start_settings_it_cannot_apply() -> None:
    from coderl.train.loop import own_settings_unused

    packaged = load_config(defaults=default_train_config())  # a LoRA RL phase: the warm start has its own actor
    assert packaged.sft.gradient_checkpointing != packaged.actor.gradient_checkpointing
    assert own_settings_unused(packaged) == ""
    full = load_config(defaults=default_train_config(), overrides=["actor.lora_rank=0"])
    assert own_settings_unused(full) == "sft.gradient_checkpointing, sft.micro_batch_tokens"
    same = load_config(
        defaults=default_train_config(),
        overrides=["actor.lora_rank=0", "sft.gradient_checkpointing=null", "sft.micro_batch_tokens=2048"],
    )
    assert own_settings_unused(same) == ""


async def test_demonstrations_play_in_a_window_and_keep_the_first_that_resolve_in_order(tokenizer: Any) -> None:
    cfg = load_config(defaults=default_train_config(), overrides=[])
    tasks = load_tasks("bundled:synth?bug_in=callee")[:7]
    chat = ChatFormat(tokenizer, cfg.model.tool_format)
    one, counts_one = await gold_demonstrations(tasks, cfg.rollout, cfg.sandbox, chat, concurrency=1, limit=4)
    three, counts_three = await gold_demonstrations(tasks, cfg.rollout, cfg.sandbox, chat, concurrency=3, limit=4)
    assert len(one) == 4 and counts_one["kept"] == 4
    assert [d.task_id for d in three] == [d.task_id for d in one]  # the window changes the pace, not the choice
    assert [d.response_ids for d in three] == [d.response_ids for d in one]
    assert counts_three == counts_one  # plays past the limit are cancelled and counted as not needed
    assert counts_one["not_needed"] == 7 - 4 - counts_one["did_not_resolve"] - sum(
        counts_one[k] for k in (NOT_ONE_LINE, NOT_IN_ISSUE, OVER_MAX_TOKENS)
    )


async def test_several_sources_give_sft_max_demos_in_all_a_seeded_sample_of_what_they_made(tokenizer: Any) -> None:
    ids = [t.id for t in load_tasks("bundled:synth?bug_in=callee")[:8]]
    sources = [f"gold:bundled:{','.join(ids[:4])}", f"gold:bundled:{','.join(ids[4:])}"]
    cfg = load_config(defaults=default_train_config(), overrides=["sft.max_demos=2"])
    chat = ChatFormat(tokenizer, cfg.model.tool_format)
    demos, made = await build_demos(cfg, chat, [], sources)
    assert [made[s]["kept"] for s in sources] == [2, 2]  # each source plays until it has made sft.max_demos
    assert len(demos) == 2 == sum(made[s]["used"] for s in sources)  # ... and the warm start uses that many
    again, _ = await build_demos(cfg, chat, [], sources)
    assert [d.task_id for d in again] == [d.task_id for d in demos]  # seeded
    one, counts = await build_demos(cfg, chat, [], sources[:1])
    assert len(one) == 2 and counts[sources[0]]["used"] == 2
    with pytest.raises(ConfigError, match=r"is listed twice; name each source once"):
        load_config(defaults=default_train_config(), overrides=["sft.data=[gold:bundled:synth,gold:bundled:synth]"])
