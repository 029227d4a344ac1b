"""``coderl bench learn`` end to end on a tiny recipe: a run and its lr-0 control, each a ``coderl train``
process of its own, then the held-out figures and their Markdown section."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.tiny import tiny_checkpoint

pytestmark = pytest.mark.slow

TINY = [
    "train.tasks=bundled:warmup",
    "train.val_tasks=",
    "train.val_size=2",
    "train.steps=1",
    "train.tasks_per_step=1",
    "train.group_size=2",
    "rollout.agent=single_turn",
    "rollout.tools=null",
    "rollout.max_tokens=8",
    "sft.before_rl=false",
    "train.val_also=[bundled:checkkit-s001,bundled:unitkit-s031]",  # two more held-out sets, one task each
]


def bench(cwd: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coderl", "bench", "learn", "--quick", "--json", "--write", "B.md", *flags, *TINY,
         f"model.path={tiny_checkpoint()}"],  # the tiny model (tests/tiny.py): the bench's plumbing is checked
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_bench_learn_runs_the_recipe_and_its_control_in_processes_of_their_own(tmp_path: Path) -> None:
    out = bench(tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)  # the runs' own output went to stderr
    assert r["seeds"] == [0] and r["held_out_tasks"] == 2 and r["control_held_out_tasks"] == 2
    for key in ("start_pass_at_1", "end_pass_at_1", "control_start_pass_at_1", "control_end_pass_at_1"):
        assert len(r[key]) == 1 and 0.0 <= r[key][0] <= 1.0
    assert r["rise_ci95"][0] <= r["mean_rise"] <= r["rise_ci95"][1]
    assert r["control_rise_ci95"][0] <= r["control_rise"] <= r["control_rise_ci95"][1]
    assert r["minutes_per_run"] > 0
    (recipe,), (control,) = r["run_dirs"]["recipe"], r["run_dirs"]["control"]
    lrs = []
    for run in (recipe, control):
        folder = tmp_path / run
        cfg = yaml.safe_load((folder / "config.yaml").read_text())
        lrs.append((cfg["actor"]["lr"], cfg["sft"]["lr"], cfg["sft"]["before_rl"]))
        assert cfg["run"]["seed"] == 0 and cfg["train"]["steps"] == 1
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        assert rows[0]["step"] == 0 and rows[-1]["step"] == 1 and "val_pass_at_1" in rows[-1]
    assert lrs[0][0] > 0 and lrs[1] == (0.0, 0.0, False)  # the control learns nothing, the recipe does
    section = (tmp_path / "B.md").read_text()
    assert "Learning check" in section and "control (lr 0)" in section
    assert r["val_also_sets"] == {"val_also": "bundled:checkkit-s001", "val_also2": "bundled:unitkit-s031"}
    for held in ("val_also_", "val_also2_", "val_also2_control_"):
        assert r[f"{held}held_out_tasks"] == 1 and len(r[f"{held}start_pass_at_1"]) == 1
    assert "`bundled:checkkit-s001` (1 tasks)" in section and "`bundled:unitkit-s031` (1 tasks)" in section
    assert "warm_pass_at_1" not in r and "rl_rise" not in r  # no warm start here: no RL's share to tell apart

    # the same bench again reuses both finished runs (an interrupted bench goes on where it stopped)
    again = bench(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("finished before, reused") == 2 and "run directory" not in again.stderr
    r2 = json.loads(again.stdout)
    assert r2["run_dirs"] == r["run_dirs"] and r2["start_pass_at_1"] == r["start_pass_at_1"]


def test_bench_learn_refuses_a_job_count_below_one(tmp_path: Path) -> None:
    out = bench(tmp_path, "--jobs", "0")
    assert out.returncode == 2 and "argument --jobs: '0': must be an integer of at least 1" in out.stderr
    assert not (tmp_path / "runs").exists()  # refused before any run started
    out = bench(tmp_path, "train.rl_minutes=2.5")  # runs of unequal length would be compared
    assert out.returncode != 0 and "train.rl_minutes=2.5 would end each run" in out.stderr
    assert not (tmp_path / "runs").exists()


def test_the_benches_leave_the_whole_run_budget_out_and_say_so() -> None:
    from rich.console import Console

    from coderl.bench.learn import bound_by_steps
    from coderl.config import load_config

    console = Console(record=True, width=200)
    cfg = load_config(overrides=["train.run_minutes=28.5", "train.patch_credit_steps=8", "train.steps=8"])
    runs = bound_by_steps(cfg, "rl", console)
    assert runs.train.run_minutes is None and cfg.train.run_minutes == 28.5 and runs.train.steps == 8
    said = console.export_text()
    assert "bench rl: train.run_minutes=28.5 left out — each run takes all train.steps=8 RL steps" in said
    plain = load_config()
    assert bound_by_steps(plain, "learn", console) is plain  # nothing to leave out


def test_the_table_names_the_new_repository_target_for_a_pypi_set() -> None:
    from coderl.bench.learn import to_markdown

    r: dict[str, object] = {
        "machine": {"cpu": "cpu", "cores": 2, "torch": "2"}, "command": "coderl bench learn", "tasks": "t",
        "steps": 8, "warm_start": True, "seeds": [0], "minutes_per_run": 60.0, "held_out_tasks": 24,
        "val_also_sets": {"val_also": "bundled:warmup", "val_also2": "pypi:toolz==0.12.1?n=24"},
    }  # fmt: skip
    for held in ("", "val_also_", "val_also2_"):
        r |= {f"{held}start_pass_at_1": [0.0], f"{held}end_pass_at_1": [0.1], f"{held}mean_rise": 0.1,
              f"{held}rise_ci95": [0.0, 0.2], f"{held}control_start_pass_at_1": [0.0],
              f"{held}control_end_pass_at_1": [0.0], f"{held}control_rise": 0.0,
              f"{held}control_rise_ci95": [0.0, 0.0], f"{held}held_out_tasks": 24}  # fmt: skip
    r |= {"warm_pass_at_1": [0.25], "rl_rise": -0.208, "rl_rise_ci95": [-0.375, -0.042]}  # the split's
    text = to_markdown(r)
    assert "| 0.000 | 0.250 | 0.100 | **+0.100** | [+0.000, +0.200] | -0.208 [-0.375, -0.042] |" in text
    assert "| 0.000 | - | 0.100 | **+0.100** | [+0.000, +0.200] | - |" in text  # a set without the figure
    assert "For `pypi:toolz==0.12.1?n=24` (a repository no training task comes from): a rise with its interval above 0." in text
    assert "`bundled:warmup` (a repository" not in text
    del r["val_also_sets"]
    assert "(a repository no training task comes from)" not in to_markdown(r)
