"""Held-out evaluation: a fixed split disjoint from training, pass@1 with a 95% interval, the headline
of the run's summary and report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coderl.errors import TaskError
from coderl.rollout.report import build_report, wilson_interval
from coderl.tasks import load_tasks
from coderl.tasks.overlap import changed_old_lines, fixed_functions, without_overlap
from coderl.tasks.split import split_tasks, train_and_held_out
from coderl.train.metrics import run_summary
from coderl.train.report import write_report


def test_wilson_interval_by_hand() -> None:
    # p = 0, n = 8, z = 1.96: upper = (z^2 / 2n) / (1 + z^2 / n) * 2 = z^2 / (n + z^2) = 3.8415 / 11.8415
    lo, hi = wilson_interval(0.0, 8)
    assert lo == 0.0 and hi == pytest.approx(3.841459 / 11.841459, abs=1e-6)
    lo, hi = wilson_interval(0.5, 8)
    assert lo == pytest.approx(1 - hi) and lo == pytest.approx(0.2152, abs=1e-4)
    assert wilson_interval(1.0, 8) == pytest.approx((1 - 3.841459 / 11.841459, 1.0))
    assert wilson_interval(0.3, 0) == (0.0, 1.0)


def test_pass_at_1_interval_counts_tasks_not_samples() -> None:
    rows = [{"task_id": f"t{i}", "resolved": i % 2 == 1, "reward": 0.0} for i in range(8) for _ in range(4)]
    report = build_report(rows, {}, [1])
    assert report["pass@1"] == 0.5 and report["samples_per_instance"] == 4
    assert report["pass@1_ci95"] == pytest.approx(list(wilson_interval(0.5, 8)))  # n = 8 tasks, not 32


def test_the_split_is_fixed_disjoint_and_independent_of_order() -> None:
    tasks = load_tasks("bundled")
    train, held = split_tasks(tasks, 8)
    assert len(held) == 8 and len(train) == len(tasks) - 8
    assert not {t.id for t in train} & {t.id for t in held}
    _, again_held = split_tasks(list(reversed(tasks)), 8)
    assert {t.id for t in again_held} == {t.id for t in held}  # by id, not by position or seed
    _, fewer = split_tasks(tasks, 100)
    assert len(fewer) == len(tasks) - 1  # at least one task is left to train on
    with pytest.raises(TaskError, match="at least 2"):
        split_tasks(tasks[:1], 1)


def test_training_never_fixes_a_function_a_held_out_task_fixes() -> None:
    synth = load_tasks("bundled:synth")
    held = [t for t in synth if t.id == "strkit-s001"]  # fixes strkit/text.py: wrap
    assert fixed_functions(held[0]) == {("strkit", "strkit/text.py", "wrap")}
    kept, removed = without_overlap(synth, held)
    same = sorted(
        t.id
        for t in synth
        if t.metadata["synth"]["function"] == "wrap" and t.metadata["repo_name"] == "strkit"
    )
    assert len(same) >= 2 and removed == same and len(kept) == len(synth) - len(same)
    warmup = load_tasks("bundled:warmup")  # hand-written fixes, compared the same way
    split = train_and_held_out("bundled:synth", "none", 8, "bundled:warmup")
    train, held_sets, (also,), dropped = split.train, split.val, split.also, split.removed
    assert held_sets == [] and {t.id for t in also} == {t.id for t in warmup}
    touched = set().union(*(fixed_functions(t) for t in warmup))
    assert touched and all(not fixed_functions(t) & touched for t in train) and len(dropped) > 0


def test_changed_lines_of_a_diff_by_hand() -> None:
    diff = "--- a/m.py\n+++ b/m.py\n@@ -3,3 +3,3 @@\n a\n-b\n+B\n c\n@@ -9,0 +10,1 @@\n+new\n"
    assert changed_old_lines(diff) == [4, 4, 9]  # the removed line 4 (and its replacement), after line 9


def test_summary_and_report_lead_with_held_out_pass_at_1(tmp_path: Path) -> None:
    val = {"val_tasks": 8, "val_samples": 4}
    rows = [
        {"step": 0, "val_pass_at_1": 0.0, "val_pass_at_1_ci95": [0.0, 0.324], **val},
        {"step": 1, "pass_rate": 0.0, "reward_mean": 0.0, "stage_s": {"rollout": 1.0}, "task_ids": ["a", "b"]},
        {
            "step": 2,
            "pass_rate": 0.5,
            "reward_mean": 0.5,
            "task_ids": ["b", "c"],
            "val_pass_at_1": 0.25,
            "val_pass_at_1_ci95": [0.07, 0.59],
            **val,
        },
    ]
    summary = run_summary(rows)
    assert next(iter(summary)) == "held-out pass@1" and summary["steps"] == 2
    assert summary["held-out pass@1"].startswith(
        "0.000 [0.000, 0.324] at step 0 -> 0.250 [0.070, 0.590] at step 2 (+0.250"
    )
    assert summary["distinct tasks rolled out in RL (all steps)"] == 3  # a, b, c: b twice counts once
    page = write_report(tmp_path, rows, summary).read_text()
    first_chart = page.index("<svg")
    assert page.index("Held-out pass@1 (95% interval)") > first_chart  # the first chart
    assert page[first_chart:].index("Held-out pass@1") < page[first_chart:].index("RL signal")
    assert page.count('stroke-opacity="0.45"') == 2  # one interval bar per validation


def test_the_validation_points_are_printed_side_by_side() -> None:
    from coderl.train.validation import validation_table

    def point(step: int, phase: str | None, greedy: float, sampled: float | None) -> dict[str, object]:
        row: dict[str, object] = {"step": step, "val_pass_at_1": greedy, "val_pass_at_1_ci95": [0.0, 0.5],
                                  "val_tasks": 24, "val_samples": 1, "val_temperature": 0.0}  # fmt: skip
        if phase:
            row["phase"] = phase
        if sampled is not None:
            row.update(val_sampled_pass_at_1=sampled, val_sampled_pass_at_1_ci95=[0.1, 0.4], val_sampled_tasks=24,
                       val_sampled_samples=4, val_sampled_temperature=0.7)  # fmt: skip
        return row

    rows = [point(0, "start", 0.0, None), point(0, "sft", 0.125, 0.25), {"step": 1, "pass_rate": 0.5},
            point(8, None, 0.25, 0.375)]  # fmt: skip
    head, greedy, sampled = validation_table(rows)
    assert head.split() == ["held-out", "pass@1", "start", "after", "warm", "start", "step", "8"]
    assert greedy.startswith("greedy (1 x 24 tasks)") and greedy.split()[5:] == [
        "0.000", "[0.000,", "0.500]", "0.125", "[0.000,", "0.500]", "0.250", "[0.000,", "0.500]"]  # fmt: skip
    assert sampled.startswith("T=0.7 (4 x 24 tasks)") and sampled.split()[5] == "-"  # not sampled at the start
    assert "0.375 [0.100, 0.400]" in sampled
    assert validation_table([{"step": 1, "pass_rate": 0.5}]) == []


def test_val_also_takes_one_source_or_several_and_each_is_held_out() -> None:
    from pydantic import ValidationError

    from coderl.train.config import TrainConfig

    assert TrainConfig(val_also="bundled:warmup").val_also == ["bundled:warmup"]  # one source, as before
    assert TrainConfig(val_also="").val_also == [] and TrainConfig(val_also=None).val_also == []
    assert TrainConfig(val_also=["bundled:warmup", "bundled:strkit-001"]).val_also == [
        "bundled:warmup", "bundled:strkit-001"]  # fmt: skip
    with pytest.raises(ValidationError, match=r"train.val_also\[1\] is empty"):
        TrainConfig(val_also=["bundled:warmup", " "])
    strkit = [t.id for t in load_tasks("bundled:strkit-001")]
    split = train_and_held_out("bundled", "none", 8, ["bundled:warmup", "bundled:strkit-001"])
    train, also = split.train, split.also
    assert [len(one) for one in also] == [len(load_tasks("bundled:warmup")), len(strkit)]
    assert not {t.id for t in train} & {t.id for one in also for t in one}  # no set is trained on


def test_each_val_also_set_has_its_row_in_the_table_and_the_summary() -> None:
    from coderl.train.validation import also_prefix, also_prefixes, validation_table

    assert [also_prefix(i) for i in range(3)] == ["val_also", "val_also2", "val_also3"]

    def held(prefix: str, value: float, tasks: int, source: str) -> dict[str, object]:
        return {f"{prefix}_pass_at_1": value, f"{prefix}_pass_at_1_ci95": [0.0, 0.5], f"{prefix}_tasks": tasks,
                f"{prefix}_samples": 1, f"{prefix}_temperature": 0.0, f"{prefix}_source": source}  # fmt: skip

    def point(step: int, phase: str | None, a: float, b: float, c: float) -> dict[str, object]:
        row = {"step": step, **held("val", a, 24, ""), **held("val_also", b, 15, "bundled:warmup"),
               **held("val_also2", c, 12, "pypi:toolz==0.12.1?n=12")}  # fmt: skip
        return {**row, "phase": phase} if phase else row

    rows = [point(0, "start", 0.0, 0.0, 0.0), point(0, "sft", 0.25, 0.0, 1 / 12), {"step": 1, "pass_rate": 0.5, "reward_mean": 0.5},
            point(4, None, 0.25, 2 / 15, 2 / 12)]  # fmt: skip
    assert also_prefixes(rows) == ["val_also", "val_also2"]
    head, split, second, third = validation_table(rows)
    assert "after warm start" in head and split.startswith("greedy (1 x 24 tasks)")
    assert second.startswith("bundled:warmup greedy (1 x 15 tasks)") and "0.133 [0.000, 0.500]" in second
    assert third.startswith("pypi:toolz==0.12.1?n=12 greedy (1 x 12 tasks)") and third.split()[6:8] == ["0.000", "[0.000,"]
    unnamed = [{k: v for k, v in r.items() if not k.endswith("_source")} for r in rows]  # rows of older runs
    assert validation_table(unnamed)[2].startswith("second set greedy (1 x 15 tasks)")
    summary = run_summary(rows)
    assert summary["held-out pass@1, second set (bundled:warmup)"].endswith("(+0.133; 15 tasks)")
    assert summary["held-out pass@1, third set (pypi:toolz==0.12.1?n=12)"].endswith("(+0.167; 12 tasks)")


def test_a_dev_split_validates_on_training_tasks_and_sets_every_held_out_task_aside() -> None:
    source = "bundled:synth?bug_in=callee"
    plain = train_and_held_out(source, "", 24, ["bundled:warmup"])
    dev = train_and_held_out(source, "", 24, ["bundled:warmup"], dev_size=12)
    assert dev.also == [] and len(dev.val) == 12
    held = {t.id for t in plain.val} | {t.id for one in plain.also for t in one}
    assert {t.id for t in dev.set_aside} == held  # the same held-out tasks, set aside
    assert {t.id for t in dev.unseen()} == held | {t.id for t in dev.val}
    assert {t.id for t in dev.val} <= {t.id for t in plain.train}  # drawn from the training side
    touched = set().union(*(fixed_functions(t) for t in dev.unseen()))
    assert all(not fixed_functions(t) & touched for t in dev.train)  # no training task fixes an unseen function
    assert set(dev.removed) >= set(plain.removed) | {t.id for t in dev.val}
    again = train_and_held_out(source, "", 24, ["bundled:warmup"], dev_size=12)
    assert [t.id for t in again.val] == [t.id for t in dev.val]  # fixed, like the held-out split


def test_a_dev_split_never_holds_a_task_the_starting_weights_imitated() -> None:
    source = "bundled:synth?bug_in=callee"
    plain = train_and_held_out(source, "", 24)
    first = train_and_held_out(source, "", 24, dev_size=12)
    imitated = {t.id for t in plain.train[::2]} | {first.val[0].id}  # a warm start that saw a dev task
    dev = train_and_held_out(source, "", 24, dev_size=12, demonstrated=imitated)
    seen = set().union(*(fixed_functions(t) for t in plain.train if t.id in imitated))
    assert len(dev.val) == 12 and first.val[0].id not in {t.id for t in dev.val}
    assert all(t.id not in imitated and not fixed_functions(t) & seen for t in dev.val)
    with pytest.raises(TaskError, match=r"train.dev_size: got 12, but 0 training task\(s\).*set train.dev_size=0"):
        train_and_held_out(source, "", 24, dev_size=12, demonstrated={t.id for t in plain.train})


def test_bench_write_refuses_dev_split_figures(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "coderl", "bench", "rl", "--write", str(tmp_path / "B.md"), "train.dev_size=12"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode != 0 and "train.dev_size=12" in done.stderr and "held-out" in done.stderr
    alone = subprocess.run(
        [sys.executable, "-m", "coderl", "bench", "rl", "--no-control", "--write", str(tmp_path / "B.md")],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path,
    )  # fmt: skip
    assert alone.returncode != 0 and "refused with --no-control" in alone.stderr
    assert not (tmp_path / "B.md").exists()


@pytest.mark.slow
def test_a_run_on_a_dev_split_validates_dev_tasks_only_and_says_so(tmp_path: Path) -> None:
    import asyncio
    import io
    import json

    from rich.console import Console

    from coderl.config import load_config
    from coderl.engine.scripted import ScriptedEngine
    from coderl.train.loop import Trainer
    from tests.tiny import tiny_checkpoint

    source = "bundled:synth?bug_in=callee"
    cfg = load_config(overrides=[
        f"train.tasks={source}", "train.val_size=24", "train.val_also=[bundled:warmup]", "train.dev_size=2",
        "train.steps=1", "train.tasks_per_step=1", "train.group_size=2", "train.val_samples=1",
        "rollout.agent=swe", "rollout.tools=[show_function,replace_function,submit]", "rollout.max_tokens=16",
        "rollout.max_turns=2", "actor.lr=1e-6", f"run.dir={tmp_path}", f"model.path={tiny_checkpoint()}",
    ])  # fmt: skip
    out = io.StringIO()
    asyncio.run(Trainer(cfg, tmp_path, Console(file=out, width=300), engine=ScriptedEngine()).run())
    said = out.getvalue()
    split = train_and_held_out(source, "", 24, ["bundled:warmup"], dev_size=2)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    vals = [r for r in rows if "val_pass_at_1" in r]
    assert len(vals) == 2 and all(r["val_tasks"] == 2 and r["val_split"] == "dev" for r in vals)
    assert not any(key.startswith("val_also") for r in rows for key in r)  # the held-out sets are set aside
    validated = {json.loads(line)["task_id"] for line in (tmp_path / "validation" / "step-000000" / "trajectories.jsonl").open()}
    assert validated == {t.id for t in split.val}
    trained = {json.loads(line)["task_id"] for line in (tmp_path / "trajectories.jsonl").open()}
    assert trained and not trained & {t.id for t in split.unseen()}
    assert "dev split (train.dev_size): validating on 2 training tasks" in said and "39 held-out tasks" in said
    assert "dev pass@1 (start -> end)" in said and "held-out pass@1 (start" not in said


def test_the_main_job_validates_three_ways() -> None:
    import yaml

    from coderl.config.packaged import TRAIN_DEFAULTS, packaged_config
    from coderl.tasks.overlap import repository_of

    recipe = yaml.safe_load(packaged_config(TRAIN_DEFAULTS).read_text())["train"]  # the shipped file itself
    hand, new = recipe["val_also"]
    assert hand == "bundled:warmup" and new.startswith("pypi:toolz==")  # hand-written bugs, a new repository
    trained = {repository_of(t) for t in load_tasks(recipe["tasks"])}
    assert trained and not any("toolz" in repo for repo in trained)


def test_coderl_train_defaults_may_come_from_a_file_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coderl.config import load_config
    from coderl.config.packaged import default_train_config
    from coderl.errors import ConfigError

    (tmp_path / "site.yaml").write_text("train:\n  steps: 3\n")
    monkeypatch.setenv("CODERL_TRAIN_DEFAULTS", str(tmp_path / "site.yaml"))
    assert load_config(None, [], defaults=default_train_config()).train.steps == 3
    monkeypatch.setenv("CODERL_TRAIN_DEFAULTS", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match=r"CODERL_TRAIN_DEFAULTS=.*missing.yaml: no such file.*unset it"):
        default_train_config()
