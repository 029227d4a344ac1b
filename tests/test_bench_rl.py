"""``coderl bench rl`` end to end on a tiny recipe: one warm start (``coderl sft``), the RL phase from it
and its lr-0 control, each a process of its own; the JSON keys the issue names; the warm start reused
by the temperature sweep of the same configuration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from coderl.bench.rl import _change_f1_figures, pooled_rise
from coderl.bench.rl_markdown import to_markdown
from coderl.rollout.store import TrajectoryStore, read_trajectories
from coderl.tasks.patching import change_overlap
from coderl.types import Trajectory
from tests.tiny import tiny_checkpoint

pytestmark = pytest.mark.slow

SUITE = "bundled:strkit-s010,strkit-s039,strkit-s013,strkit-s016"
TINY = [
    f"train.tasks={SUITE}", "train.val_tasks=", "train.val_size=1", "train.val_samples=1",
    "rollout.max_tokens=120", "rollout.max_total_tokens=200", f'sft.data=["gold:{SUITE}"]', "sft.lr=1e-4",
    "sft.epochs=2", "sft.batch_size=2", "sft.max_demos=3", "actor.lora_rank=4", 'train.val_also=["bundled:strkit-s021"]',
]  # fmt: skip


def bench(cwd: Path, *flags: str, write: bool = True) -> subprocess.CompletedProcess[str]:
    """The bench on the tiny model (tests/tiny.py): what is checked is the bench's plumbing."""
    return subprocess.run(
        [sys.executable, "-m", "coderl", "bench", "rl", "--quick", "--json", *(["--write", "B.md"] if write else []),
         *flags, *TINY,
         f"model.path={tiny_checkpoint()}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_bench_rl_runs_the_rl_phase_from_one_warm_start_against_its_control(tmp_path: Path) -> None:
    out = bench(tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    assert r["seeds"] == [0]
    for key in ("warm_pass_at_1", "rl_pass_at_1"):
        assert len(r[key]) == 1 and 0.0 <= r[key][0] <= 1.0
    assert r["rl_rise"] == pytest.approx(r["rl_pass_at_1"][0] - r["warm_pass_at_1"][0])
    lo, hi = r["rl_rise_ci95"]
    assert lo <= r["rl_rise"] <= hi and isinstance(r["control_rise"], float)
    assert 0.0 <= r["teaching_group_share"] <= 1.0 and r["control_seeds"] == [0]
    [[same, total]] = r["control_same_trajectories"]  # the control's greedy validation at both ends, compared
    assert total == 1 and 0 <= same <= total
    [also] = r["also"]  # the val_also set, reported the same way
    assert also["source"] == "bundled:strkit-s021" and also["tasks"] == 1 and isinstance(also["control_rise"], float)
    assert also["rl_rise"] == pytest.approx(also["rl_pass_at_1"][0] - also["warm_pass_at_1"][0])
    for kind in ("rl", "control"):  # how close the held-out patches came to the gold ones, at both ends
        assert isinstance(r[f"{kind}_change_f1_rise"], float) and len(r[f"{kind}_change_f1_rise_ci95"]) == 2
    assert 0.0 <= r["warm_change_f1"][0] <= 1.0 and 0.0 <= r["rl_change_f1"][0] <= 1.0
    root = Path(r["run_dirs"]["rl"][0]).parent  # runs/bench-rl-<digest>, under the bench's working directory
    assert (tmp_path / root / "warm" / "model" / "model.safetensors").is_file()
    for kind in ("rl", "control"):  # each run starts from the warm start, with no warm start of its own
        config = (tmp_path / r["run_dirs"][kind][0] / "config.yaml").read_text()
        assert str(root / "warm" / "model") in config and "before_rl: false" in config
    assert "lr: 0.0" in (tmp_path / r["run_dirs"]["control"][0] / "config.yaml").read_text()
    assert "RL's own share" in (tmp_path / "B.md").read_text()
    made = (tmp_path / root / "warm" / "bench.json").stat().st_mtime
    sweep = bench(tmp_path, "--temperatures", "1.0")  # the same configuration: the same warm start
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    s = json.loads(sweep.stdout)
    assert [x["temperature"] for x in s["sweep"]] == [1.0] and s["chosen_temperature"] == 1.0
    assert s["sweep"][0]["samples"] == 2 * s["sweep"][0]["tasks"] and s["sweep"][0]["tasks"] >= 1
    assert (tmp_path / root / "warm" / "bench.json").stat().st_mtime == made and "made before, reused" in sweep.stderr
    written = (tmp_path / "B.md").read_text()  # the sweep's section beside the seeds' figures, not over them
    assert "RL's own share" in written and "The RL phase's rollout temperature" in written
    alone = bench(tmp_path, "--no-control", "--trained-tasks", "--warm", str(root / "warm" / "model"), write=False)
    assert alone.returncode == 0, alone.stderr[-3000:]
    a = json.loads(alone.stdout)
    assert a["warm_start"] == str(root / "warm" / "model") and "coderl sft" not in alone.stderr  # --warm: no sft
    assert a["control"] is False and list(a["run_dirs"]) == ["rl", "control"] and a["run_dirs"]["control"] == []
    assert "rl_rise" in a and "control_rise" not in a and "control_end_pass_at_1" not in a
    # --trained-tasks: the RL run's own training tasks (never a held-out one), under the warm start and its final weights
    run = tmp_path / a["run_dirs"]["rl"][0]
    trained = {row["task_id"] for row in read_trajectories(run)}
    held = {row["task_id"] for row in read_trajectories(next((run / "validation").iterdir()))}
    assert a["trained_tasks"] == [len(trained)] and trained and not trained & held
    assert (run / "export-final" / "config.json").is_file()
    after = [row for row in read_trajectories(run / "trained-eval") if row.get("part", 0) == 0]
    assert {row["task_id"] for row in after} == trained and len(after) == 2 * len(trained)  # train.group_size each
    assert a["trained_samples_per_task"] == 2 and 0.0 <= a["trained_rl_pass_rate"][0] <= 1.0
    assert a["trained_rl_pass_rate"][0] == pytest.approx(sum(bool(r.get("resolved")) for r in after) / len(after))
    assert a["trained_rise"] == pytest.approx(a["trained_rl_pass_rate"][0] - a["trained_warm_pass_rate"][0])
    lo, hi = a["trained_rise_ci95"]
    assert lo <= a["trained_rise"] <= hi
    assert a["untrained_edge_tasks"] == [0]  # one seed: no task only another seed trained on
    both = bench(tmp_path, "--no-control", "--control-seeds", "0", write=False)
    assert both.returncode != 0 and "--no-control with --control-seeds" in both.stderr
    other = bench(tmp_path, "--control-seeds", "5", write=False)
    assert other.returncode != 0 and "--control-seeds 5 — give one or more of the seeds run (0)" in other.stderr


def test_bench_rl_needs_a_warm_start(tmp_path: Path) -> None:
    out = bench(tmp_path, "sft.before_rl=false")
    assert out.returncode != 0 and "needs sft.before_rl=true" in out.stderr


def test_bench_rl_refuses_a_warm_start_that_is_not_a_model_folder(tmp_path: Path) -> None:
    out = bench(tmp_path, "--warm", str(tmp_path))
    assert out.returncode != 0 and f"--warm {tmp_path} is not a model folder (no config.json)" in out.stderr


def test_bench_rl_refuses_runs_bounded_by_minutes(tmp_path: Path) -> None:
    out = bench(tmp_path, "train.rl_minutes=5")
    assert out.returncode != 0 and "train.rl_minutes=5 would end each run" in out.stderr


def test_the_table_says_when_there_is_no_control_and_when_it_is_a_dev_split() -> None:
    from coderl.bench.rl_markdown import to_markdown

    r = {
        "machine": {"cpu": "cpu", "cores": 2, "torch": "2"}, "command": "coderl bench rl --no-control",
        "warm_start_minutes": None, "warm_start": "w", "steps": 8, "samples_per_step": 16, "tasks": "t",
        "seeds": [0, 1], "minutes_per_run": 17.0, "teaching_group_share": 0.5, "control": False,
        "validated_on": "dev", "warm_pass_at_1": [0.1, 0.1], "rl_pass_at_1": [0.2, 0.1], "rl_rise": 0.05,
        "rl_rise_ci95": [-0.02, 0.12], "held_out_tasks": 24,
    }  # fmt: skip
    text = to_markdown(r)
    assert "with no control runs" in text and "| dev split (train.dev_size) |" in text
    assert "| greedy (24 tasks) | RL |" in text and "control (lr 0)" not in text


def test_the_table_puts_the_controls_own_starts_beside_its_ends_and_reports_each_val_also_set() -> None:
    from coderl.bench.rl_markdown import to_markdown

    r = {
        "machine": {"cpu": "cpu", "cores": 2, "torch": "2"}, "command": "coderl bench rl --control-seeds 0",
        "warm_start_minutes": 9.0, "warm_start": "w", "steps": 8, "samples_per_step": 16, "tasks": "t",
        "seeds": [0, 1], "minutes_per_run": 30.0, "teaching_group_share": 0.5, "control": True,
        "control_seeds": [0], "validated_on": "held-out",
        "warm_pass_at_1": [0.125, 0.167], "rl_pass_at_1": [0.25, 0.208], "rl_rise": 0.083,
        "rl_rise_ci95": [0.0, 0.167], "control_start_pass_at_1": [0.125], "control_end_pass_at_1": [0.125],
        "control_rise": 0.0, "control_rise_ci95": [0.0, 0.0], "held_out_tasks": 24,
        "also": [{"source": "pypi:toolz==0.12.1?n=24", "tasks": 24, "warm_pass_at_1": [0.0, 0.0],
                  "rl_pass_at_1": [0.042, 0.0], "rl_rise": 0.021, "rl_rise_ci95": [0.0, 0.063],
                  "control_start_pass_at_1": [0.0], "control_end_pass_at_1": [0.0], "control_rise": 0.0,
                  "control_rise_ci95": [0.0, 0.0]}],
        "control_same_trajectories": [[21, 24]],
    }  # fmt: skip
    text = to_markdown(r)
    assert "against a control whose RL learning rate is 0 (on seed 0)" in text
    assert "| greedy (24 tasks) | control (lr 0) | 0.125 | 0.125 | **+0.000** |" in text
    assert "| greedy, `pypi:toolz==0.12.1?n=24` (24 tasks) | RL | 0.000, 0.000 | 0.042, 0.000 | **+0.021** | [+0.000, +0.063] |" in text
    assert "| greedy, `pypi:toolz==0.12.1?n=24` (24 tasks) | control (lr 0) | 0.000 | 0.000 |" in text
    assert "in the control (weights unchanged) 21 of 24 held-out trajectories came out token for token the same" in text


def test_the_table_says_when_the_controls_greedy_validation_reproduced_exactly_and_names_the_gpu() -> None:
    from coderl.bench.rl_markdown import to_markdown

    r = {
        "machine": {"cpu": "cpu", "cores": 16, "torch": "2", "cuda": "NVIDIA H200"}, "command": "coderl bench rl",
        "warm_start_minutes": 2.0, "warm_start": "w", "steps": 5, "samples_per_step": 64, "tasks": "t",
        "seeds": [0], "minutes_per_run": 7.0, "teaching_group_share": 0.2, "control": True,
        "control_seeds": [0], "validated_on": "held-out",
        "warm_pass_at_1": [0.083], "rl_pass_at_1": [0.167], "rl_rise": 0.083, "rl_rise_ci95": [0.0, 0.208],
        "control_start_pass_at_1": [0.083], "control_end_pass_at_1": [0.083], "control_rise": 0.0,
        "control_rise_ci95": [0.0, 0.0], "held_out_tasks": 24, "control_same_trajectories": [[24, 24]],
    }  # fmt: skip
    text = to_markdown(r)
    assert "16 cores, NVIDIA H200, torch 2" in text
    assert "24 of 24 greedy held-out trajectories came out token for token the same at both ends" in text
    assert "not bit-for-bit" not in text


def test_the_trained_tasks_rise_is_pooled_over_seed_task_pairs() -> None:
    mean, (lo, hi) = pooled_rise([(0.0, 1.0), (0.5, 0.5), (0.25, 0.0), (0.0, 0.0)])
    assert mean == pytest.approx(0.1875)
    assert -0.25 <= lo < mean < hi <= 1.0  # resampling four pairs: the interval spans their spread
    assert pooled_rise([(0.1, 0.3)] * 5) == (pytest.approx(0.2), [pytest.approx(0.2), pytest.approx(0.2)])
    assert pooled_rise([]) == (0.0, [0.0, 0.0])


def test_the_trained_tasks_control_is_the_edge_tasks_only_other_seeds_trained_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pairing alone (the evaluations faked): seed 0 trained a and b, seed 1 b and c; the warm start
    solved a and c sometimes, b never. Each seed's final weights are compared on its own tasks, and on
    the edge tasks only the other seed trained on (seed 0: c, seed 1: a)."""
    import coderl.bench.rl as rl
    from coderl.config import load_config

    runs = [tmp_path / "rl-seed0", tmp_path / "rl-seed1"]
    trained = {runs[0]: ["a", "b"], runs[1]: ["b", "c"]}
    outcomes = {
        "warm": {"a": [True, False], "b": [False, False], "c": [True, True]},
        "rl-seed0/trained-eval": {"a": [True, True], "b": [False, False]},
        "rl-seed0/other-eval": {"c": [True, False]},
        "rl-seed1/trained-eval": {"b": [True, False], "c": [True, True]},
        "rl-seed1/other-eval": {"a": [False, False]},
    }
    asked: dict[str, list[str]] = {}

    def fake(cfg: object, model: Path, ids: list[str], temperature: float, run_dir: Path, console: object) -> dict[str, list[bool]]:
        key = "warm" if run_dir.name.startswith("trained-warm") else f"{run_dir.parent.name}/{run_dir.name}"
        asked[key] = ids
        return {t: outcomes[key][t] for t in ids}

    monkeypatch.setattr(rl, "sampled_outcomes", fake)
    monkeypatch.setattr(rl, "trained_task_ids", lambda d: trained[d])
    monkeypatch.setattr(rl, "final_model", lambda d: d / "export-final")
    cfg = load_config(None, ["train.group_size=2"])
    f = rl.trained_tasks_figures(cfg, tmp_path / "warm", tmp_path, runs, Console())
    assert asked == {
        "warm": ["a", "b", "c"], "rl-seed0/trained-eval": ["a", "b"], "rl-seed0/other-eval": ["c"],
        "rl-seed1/trained-eval": ["b", "c"], "rl-seed1/other-eval": ["a"],
    }  # fmt: skip
    assert f["trained_tasks"] == [2, 2] and f["untrained_edge_tasks"] == [1, 1]
    assert f["trained_warm_pass_rate"] == [0.25, 0.5] and f["trained_rl_pass_rate"] == [0.5, 0.75]
    assert f["trained_rise"] == pytest.approx(0.25)  # (+0.5, 0, +0.5, 0) over the four seed-task pairs
    assert f["trained_edge_pairs"] == 2 and f["trained_edge_rise"] == pytest.approx(0.25)  # a (+0.5), c (0)
    assert f["untrained_edge_rise"] == pytest.approx(-0.5)  # c: 1.0 -> 0.5, a: 0.5 -> 0.0


GOLD = "--- a/m.py\n+++ b/m.py\n@@ -2,2 +2,2 @@\n def f(x):\n-    return x - 1\n+    return x + 1\n"
NEAR = GOLD.replace("x + 1", "x + 2")  # the bug's line changed another way: F1 0.5


def _validation(run: Path, step: int, patches: dict[str, list[str]], kind: str = "") -> None:
    """A validation set as a run stores it: each sample with its change F1, where its task has a gold
    patch (task ``c`` has none)."""
    store = TrajectoryStore(run / "validation" / f"step-{step:06d}" / kind)
    for task, those in {**patches, "c": ["whatever"]}.items():
        for i, patch in enumerate(those):
            traj = Trajectory(task_id=task, group_id=f"{task}#val{i}", prompt_ids=[1], reward=float(patch == GOLD))
            traj.patch = patch
            f1 = {"change_f1": change_overlap(patch, GOLD)} if task != "c" else {}
            store.add(traj, {"step": step, "resolved": patch == GOLD, **f1})
    store.close()


def test_change_f1_rises_are_paired_over_tasks_for_the_runs_and_their_control(tmp_path: Path) -> None:
    rl, control = tmp_path / "rl-seed0", tmp_path / "control-seed0"
    for run, end in ((rl, {"a": [GOLD], "b": [NEAR]}), (control, {"a": [NEAR], "b": [""]})):
        _validation(run, 0, {"a": [NEAR], "b": [""]})
        _validation(run, 4, end)
        _validation(run, 0, {"a": [NEAR, ""], "b": ["", ""]}, "val_sampled")
        _validation(run, 4, {"a": [GOLD, NEAR], "b": ["", ""]}, "val_sampled")
    runs = {"rl": [{"run_dir": str(rl)}], "control": [{"run_dir": str(control)}]}
    f = _change_f1_figures(runs)
    assert f["change_f1_tasks"] == 2 and f["sampled_change_f1_tasks"] == 2  # c: no gold patch, no F1
    assert f["warm_change_f1"] == [pytest.approx(0.25)] and f["rl_change_f1"] == [pytest.approx(0.75)]
    assert f["rl_change_f1_rise"] == pytest.approx(0.5)  # a: 0.5 -> 1, b: 0 -> 0.5
    assert f["control_change_f1_rise"] == 0.0 and f["control_change_f1_rise_ci95"] == [0.0, 0.0]
    assert f["rl_sampled_change_f1_rise"] == pytest.approx(0.25)  # a: 0.25 -> 0.75 over its two samples
    r = {"machine": {"cpu": "x", "cores": 2, "torch": "t"}, "command": "c", "warm_start_minutes": 1.0, "steps": 4,
         "samples_per_step": 16, "tasks": "t", "seeds": [0], "control_seeds": [0], "minutes_per_run": 1.0,
         "teaching_group_share": 0.5, **f}  # fmt: skip
    table = to_markdown(r)
    assert "| greedy, change F1 against the gold patches (2 tasks) | RL | 0.250 | 0.750 | **+0.500** |" in table
    assert "| at the rollout temperature, change F1 against the gold patches (2 tasks) | control (lr 0) |" in table
    assert _change_f1_figures({"rl": [{"run_dir": str(tmp_path / "none")}], "control": []}) == {}  # nothing stored
