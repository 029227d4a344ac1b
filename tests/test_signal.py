"""Training-signal diagnostics (coderl.train.signal): the figures by hand, each cause of a starved run,
and real runs built to starve — every sample truncated, a tool parser that never matches, groups of
one sample — each of which must say so loudly (console, metrics.jsonl, report.html)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from coderl.config import load_config
from coderl.engine.scripted import ScriptedEngine
from coderl.rollout.runner import RolloutResult
from coderl.tasks.patching import holds_change
from coderl.train.loop import Trainer
from coderl.train.signal import OUTCOMES, InUse, SignalWatch, change_f1, outcome, outcomes, signal_metrics
from coderl.train.validation import outcome_text
from coderl.types import Trajectory
from tests.tiny import tiny_checkpoint


def result(group: str, reward: float, status: str = "submitted", patch: str = "", **metrics: float) -> RolloutResult:
    traj = Trajectory(task_id=group.split("#")[0], group_id=group, prompt_ids=[1], reward=reward)
    traj.exit_status = status
    traj.patch = patch
    traj.num_turns = int(metrics.pop("turns", 2))
    traj.metrics = {"format_errors": 0.0, "tool_calls": 2.0, "truncated_turns": 0.0, **metrics}
    return RolloutResult(traj, reward > 0, None)


def test_signal_figures_by_hand() -> None:
    results = [
        result("a#0", 1.0), result("a#0", 0.0, "token_limit", truncated_turns=1.0),  # group a can teach
        result("b#0", 0.0, format_errors=2.0, tool_calls=0.0), result("b#0", 0.0),  # group b cannot
    ]  # fmt: skip
    m = signal_metrics(results)
    assert m["groups"] == 2 and m["teaching_groups"] == 0.5
    assert m["truncated_share"] == 0.25  # one of four samples ended by a limit
    assert m["turn_truncated_share"] == 1 / 8  # one of eight model turns cut at max_tokens
    assert m["parse_failure_rate"] == 2 / 8 and m["tool_calls_mean"] == 6 / 4
    assert m["no_change_share"] == 0.5  # b's two samples submitted an empty patch; a's cut-off one is not counted


def test_outcomes_sort_every_sample_once() -> None:
    diff = "--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    samples = [
        result("a#0", 1.0, patch=diff), result("a#0", 0.0, patch=diff), result("a#0", 0.0, patch="\n"),
        result("a#0", 0.0, "token_limit", patch=diff), result("a#0", 0.0, "error"),
    ]  # fmt: skip
    assert [outcome(r) for r in samples] == ["solved", "wrong_change", "no_change", "cut_off", "error"]
    assert outcomes(samples) == {
        "solved": 1, "fix_plus_edits": 0, "wrong_change": 1, "no_change": 1, "cut_off": 1, "error": 1}  # fmt: skip
    assert outcomes([]) == dict.fromkeys(OUTCOMES, 0)
    assert outcome_text(outcomes(samples[:3])) == "1 solved, 1 wrong change, 1 no change"


def test_a_failing_patch_that_holds_the_gold_fix_is_told_apart_from_a_wrong_one() -> None:
    gold = "--- a/m.py\n+++ b/m.py\n@@ -2,2 +2,2 @@\n def f(x):\n-    return x - 1\n+    return x + 1\n"
    more = (  # the fix, and a line below it broken while the function was written out again
        "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -2,3 +2,3 @@\n def f(x):\n-    return x - 1\n"
        "+    return x + 1\n-y = 2\n+y = 3\n"
    )
    wrong = "--- a/m.py\n+++ b/m.py\n@@ -2,2 +2,2 @@\n def f(x):\n-    return x - 1\n+    return x + 2\n"
    other_file = gold.replace("m.py", "n.py")
    assert holds_change(more, gold) and holds_change(gold, gold)
    assert not holds_change(wrong, gold) and not holds_change(other_file, gold) and not holds_change(more, "")
    samples = [result("t#0", 0.0, patch=more), result("t#0", 0.0, patch=wrong), result("t#0", 1.0, patch=gold)]
    assert [outcome(r, gold) for r in samples] == ["fix_plus_edits", "wrong_change", "solved"]
    assert outcome(samples[0]) == "wrong_change"  # no gold patch known: a change that failed
    counts = outcomes(samples, {"t": gold})
    assert counts["fix_plus_edits"] == 1 and counts["wrong_change"] == 1
    assert outcome_text(counts) == "1 solved, 1 fix plus breaking edits, 1 wrong change"
    assert signal_metrics(samples, {"t": gold})["fix_plus_edits_share"] == pytest.approx(1 / 3)
    assert signal_metrics(samples)["fix_plus_edits_share"] == 0.0


def test_change_f1_grades_how_near_a_patch_came_and_charges_for_lines_rewritten_beside_the_fix() -> None:
    gold = "--- a/m.py\n+++ b/m.py\n@@ -2,2 +2,2 @@\n def f(x):\n-    return x - 1\n+    return x + 1\n"
    near = gold.replace("x + 1", "x + 2")  # the bug's line, changed another way
    broad = (  # the bug's line changed another way, and two more lines rewritten beside it
        "--- a/m.py\n+++ b/m.py\n@@ -1,4 +1,4 @@\n-import os\n+import sys\n def f(x):\n-    return x - 1\n"
        "+    return x + 2\n-y = 2\n+y = 3\n"
    )
    assert change_f1([result("t#0", 1.0, patch=gold)], {"t": gold}) == 1.0
    assert change_f1([result("t#0", 0.0, patch=near)], {"t": gold}) == pytest.approx(0.5)
    assert change_f1([result("t#0", 0.0, patch=broad)], {"t": gold}) == pytest.approx(0.25)  # 1 of 6 lines, 1 of 2
    assert change_f1([result("t#0", 0.0)], {"t": gold}) == 0.0  # no change
    both = [result("t#0", 0.0, patch=near), result("t#0", 0.0), result("u#0", 0.0, patch=near)]
    assert change_f1(both, {"t": gold}) == pytest.approx(0.25)  # u has no gold patch: not counted
    assert change_f1(both, {}) is None


def test_a_starved_streak_of_unchanged_repositories_says_so() -> None:
    watch = SignalWatch(patience=1, group_size=2)
    warning = watch.observe(1, [result("a#0", 0.0), result("a#0", 0.0)])
    assert warning is not None and "2 of them ended without changing the repository" in warning
    changed = SignalWatch(patience=1, group_size=2).observe(1, [result("a#0", 0.0, patch="+x")] * 2)
    assert changed is not None and "without changing" not in changed and "every sample failed" in changed


@pytest.mark.parametrize(
    ("samples", "cause"),
    [
        ([result("a#0", 0.0), result("b#0", 0.0)], "train.group_size=1"),
        ([result("a#0", 0.0, format_errors=2.0, tool_calls=0.0)] * 2, "tool-call parser matched none"),
        ([result("a#0", 0.0, "token_limit")] * 2, "cut off by a limit (token_limit 4; 0 of 8 turns"),
        ([result("a#0", 0.0, "step_limit")] * 2, "used all its turns (step_limit 4)"),
        ([result("a#0", 0.0), result("a#0", 0.0)], "every sample failed"),
        ([result("a#0", 1.0), result("a#0", 1.0)], "every sample solved"),
        ([result("a#0", 1.0), result("a#0", 1.0), result("b#0", 0.0), result("b#0", 0.0)], "all-pass (2) or all-fail (2)"),
    ],
)
def test_each_starved_streak_names_its_cause_once(samples: list[RolloutResult], cause: str) -> None:
    watch = SignalWatch(patience=2, group_size=2)
    assert watch.observe(1, samples) is None and watch.streak == 1
    warning = watch.observe(2, samples)
    assert warning is not None and "no training signal for 2 steps in a row (steps 1-2)" in warning
    assert cause in warning
    assert watch.observe(3, samples) is None and watch.streak == 3  # said once per streak
    assert watch.observe(4, [result("a#0", 1.0), result("a#0", 0.0)]) is None and watch.streak == 0


def test_the_advice_leaves_out_what_the_run_already_does() -> None:
    """A run that warm-started, draws from the calibrated edge and guides its samples is not told to;
    the remedies it has not tried are still named, and the warning says what it already had. Guidance
    fades: a run set to guide whose starved steps guided no sample is told so."""
    failed = [result("a#0", 0.0, patch="+x")] * 2
    plain = SignalWatch(patience=1, group_size=2).observe(1, failed)
    assert plain is not None
    for remedy in ("sft.before_rl=true", "train.curriculum=edge", "train.guide_share > 0", "a lower rollout.temperature"):
        assert remedy in plain
    on = InUse(warm_start=True, edge=True, guided=True)
    guided = [result("a#0", 0.0, patch="+x", guided=1.0), result("a#0", 0.0, patch="+x")]
    tried = SignalWatch(patience=1, group_size=8, in_use=on).observe(1, guided)
    assert tried is not None and "even with a warm start, the edge curriculum and 1 guided sample." in tried
    assert not any(r in tried for r in ("sft.before_rl", "curriculum=edge", "guide_share"))
    assert "Try a lower rollout.temperature or a larger train.group_size (now 8)." in tried  # the setting
    faded = SignalWatch(patience=1, group_size=2, in_use=on).observe(1, failed)
    assert faded is not None and "even with a warm start and the edge curriculum." in faded
    assert faded.endswith("or more guided samples (train.guide_share, train.guide_steps; none of these steps' samples was guided).")
    cut = SignalWatch(patience=1, group_size=2, in_use=on).observe(1, [result("a#0", 0.0, "step_limit")] * 2)
    assert cut is not None and cut.endswith("Raise rollout.max_turns.") and "warm the policy up" not in cut
    mixed = [result("a#0", 1.0), result("a#0", 1.0), result("b#0", 0.0), result("b#0", 0.0)]
    both = SignalWatch(1, 2, InUse(edge=True, dynamic_sampling=True)).observe(1, mixed)
    assert both is not None and both.endswith(
        "no group mixed the two even with dynamic sampling. Raise train.group_size so a task the policy sometimes "
        "solves shows both."
    )
    some = SignalWatch(1, 2, InUse(edge=True)).observe(1, mixed)
    assert some is not None and some.endswith("shows both, or turn on DAPO dynamic sampling (algo.dynamic_sampling=true).")
    easy = SignalWatch(1, 2, InUse(edge=True)).observe(1, [result("a#0", 1.0)] * 2)
    assert easy is not None and easy.endswith("too easy for this policy. Raise rollout.temperature.")


def test_patience_zero_never_warns() -> None:
    watch = SignalWatch(patience=0, group_size=2)
    assert all(watch.observe(s, [result("a#0", 0.0)] * 2) is None for s in range(1, 5))


# ------------------------------------------------------------------ runs built to starve
STARVE = [
    "train.tasks=bundled:strkit-s010", "train.val_tasks=none", "train.steps=2", "train.tasks_per_step=1",
    "train.group_size=2", "train.signal_patience=2", "rollout.agent=swe",
    "rollout.tools=[show_function,replace_function,submit]", "rollout.max_tokens=16", "rollout.max_turns=2",
    "actor.lr=1e-6",
]  # fmt: skip


def _starve(tmp_path: Path, engine: ScriptedEngine, *extra: str) -> tuple[dict[str, object], str, str]:
    # the actor on the tiny model (tests/tiny.py): what is checked is what the run says of its signal
    cfg = load_config(overrides=[*STARVE, *extra, f"run.dir={tmp_path}", f"model.path={tiny_checkpoint()}"])
    out = io.StringIO()
    report = asyncio.run(Trainer(cfg, tmp_path, Console(file=out, width=300), engine=engine).run())
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["teaching_groups"] for r in rows] == [0.0, 0.0]
    assert "signal_warning" not in rows[0]
    return rows[-1], out.getvalue(), report.read_text()


@pytest.mark.slow
def test_a_run_whose_every_sample_is_truncated_says_so(tmp_path: Path, tokenizer: object) -> None:
    # the default scripted reply counts up for max_tokens ids: no turn ever ends, the token limit ends each rollout
    row, console, page = _starve(tmp_path, ScriptedEngine(), "rollout.max_total_tokens=24")
    assert row["truncated_share"] == 1.0 and row["turn_truncated_share"] == 1.0
    assert "cut off by a limit" in str(row["signal_warning"])
    assert "warning:" in console and "cut off by a limit" in console
    assert "No training signal" in page and "cut off by a limit" in page


@pytest.mark.slow
def test_a_run_whose_tool_calls_never_parse_says_so(tmp_path: Path, tokenizer: object) -> None:
    engine = ScriptedEngine(tokenizer=tokenizer, default="I would fix the bug now.")  # never a tool call
    row, console, _ = _starve(tmp_path, engine)
    assert row["parse_failure_rate"] == 1.0 and row["tool_calls_mean"] == 0.0
    assert "tool-call parser matched none" in str(row["signal_warning"]) and "model.tool_format" in console


@pytest.mark.slow
def test_a_run_with_groups_of_one_sample_says_so(tmp_path: Path, tokenizer: object) -> None:
    engine = ScriptedEngine(tokenizer=tokenizer, default="I would fix the bug now.")
    row, _, _ = _starve(tmp_path, engine, "train.group_size=1", "algo.advantage=reinforce_pp")
    assert row["groups"] == 1 and "train.group_size=1" in str(row["signal_warning"])
