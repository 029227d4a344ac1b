"""Per-task difficulty estimates and the curriculum that draws tasks at the policy's edge."""

from __future__ import annotations

from pathlib import Path

import pytest

from coderl.config import load_config
from coderl.rollout.runner import RolloutResult
from coderl.tasks import load_tasks
from coderl.tasks.calibration import Estimate, calibration_dir, load_estimates, save_estimates, setting_key
from coderl.train.curriculum import Curriculum
from coderl.types import Task, Trajectory


def _tasks(n: int) -> list[Task]:
    return [
        Task(id=f"t{i}", instruction="", repo=Path("."), fail_to_pass=[], pass_to_pass=[]) for i in range(n)
    ]


def _result(task_id: str, resolved: bool) -> RolloutResult:
    return RolloutResult(Trajectory(task_id=task_id, group_id="g", prompt_ids=[]), resolved, None)


def test_estimates_are_keyed_by_model_and_settings_and_add_up(tmp_path: Path) -> None:
    cfg = load_config()
    key, setting = setting_key(cfg.model, cfg.rollout)
    hotter, _ = setting_key(cfg.model, cfg.rollout.model_copy(update={"temperature": 0.5}))
    bigger_batch, _ = setting_key(cfg.model, cfg.rollout.model_copy(update={"max_sandboxes": 99}))
    assert key != hotter and key == bigger_batch  # only settings that change the pass rate
    source = f"native:{tmp_path}"
    assert calibration_dir(source) == tmp_path / "calibration"
    save_estimates(source, key, setting, {"a": Estimate(4, 1), "b": Estimate(4, 0)})
    save_estimates(source, key, setting, {"a": Estimate(4, 3)})
    got = load_estimates(source, key)
    assert got["a"] == Estimate(8, 4) and got["a"].rate == 0.5 and got["b"].rate == 0.0
    assert load_estimates(source, hotter) == {}


def test_edge_draws_tasks_between_0_and_1_then_untried_then_the_rest() -> None:
    tasks = _tasks(6)
    estimates = {"t0": Estimate(4, 0), "t1": Estimate(4, 2), "t2": Estimate(4, 4), "t3": Estimate(4, 1)}
    cur = Curriculum(tasks, "edge", estimates, seed=0)
    assert {t.id for t in cur.draw(2)} == {"t1", "t3"}  # the edge
    assert {t.id for t in cur.draw(4)} == {"t1", "t3", "t4", "t5"}  # then the never-tried ones
    assert cur.edge_fraction() == 2 / 6
    cur.update([_result("t0", True), _result("t2", False)])  # training rollouts move t0 and t2 to the edge
    assert {t.id for t in cur.draw(4)} == {"t0", "t1", "t2", "t3"}
    again = Curriculum(tasks, "edge", {}, seed=7)
    again.load(cur.state())  # a checkpoint's curriculum: the same counts and random state
    assert again.counts == cur.counts
    assert [t.id for t in again.draw(6)] == [t.id for t in cur.draw(6)]


def test_none_is_a_resumable_cycle() -> None:
    tasks = _tasks(3)
    cur = Curriculum(tasks, "none", {}, seed=0)
    assert [t.id for t in cur.draw(2)] == ["t0", "t1"] and [t.id for t in cur.draw(2)] == ["t2", "t0"]
    resumed = Curriculum(tasks, "none", {}, seed=0)
    resumed.load({"cursor": 4})  # what an old checkpoint holds
    assert [t.id for t in resumed.draw(1)] == ["t1"]


def test_a_resumed_run_draws_first_the_tasks_it_had_drawn_and_not_trained_on() -> None:
    tasks = _tasks(4)
    cur = Curriculum(tasks, "none", {}, seed=0)
    cur.draw(3)  # t0 t1 t2 drawn; t1 and t2 were still rolling out at the checkpoint
    state = cur.state(redraw=["t1", "t2", "gone"])
    resumed = Curriculum(tasks[:3], "none", {}, seed=0)  # "gone" (and t3) no longer trained on
    resumed.load(state)
    assert [t.id for t in resumed.draw(2)] == ["t1", "t2"]
    assert [t.id for t in resumed.draw(2)] == ["t0", "t1"]  # then the cycle where it was (cursor 3 of 3)
    edge = Curriculum(tasks, "edge", {}, seed=0)
    edge.load({"redraw": ["t3"]})
    assert edge.draw(2)[0].id == "t3"


@pytest.mark.slow
def test_coderl_tasks_calibrate_saves_estimates_the_trainer_reads(tmp_path: Path) -> None:
    from coderl.cli.main import main
    from coderl.config.packaged import default_train_config
    from tests.test_tasks import make_native

    suite = make_native(tmp_path)
    small = [
        f"train.tasks=native:{suite}",
        "rollout.max_tokens=8",
        "rollout.max_turns=1",
        f"run.dir={tmp_path / 'run'}",
    ]
    assert main(["tasks", "calibrate", "--k", "2", *small]) == 0
    cfg = load_config(defaults=default_train_config(), overrides=small)
    key, _ = setting_key(cfg.model, cfg.rollout)
    estimates = load_estimates(f"native:{suite}", key)  # where train.curriculum=edge looks
    assert set(estimates) == {t.id for t in load_tasks(f"native:{suite}")}
    assert all(e.samples == 2 and 0 <= e.passed <= 2 for e in estimates.values())


def test_an_edge_task_drawn_edge_draws_times_goes_behind_the_untried_ones() -> None:
    tasks = _tasks(4)
    estimates = {"t0": Estimate(4, 2), "t1": Estimate(4, 0)}  # t0 at the edge, t1 never solved
    cur = Curriculum(tasks, "edge", estimates, seed=0, edge_draws=2)
    assert [t.id for t in cur.draw(1)] == ["t0"] and [t.id for t in cur.draw(1)] == ["t0"]
    assert {t.id for t in cur.draw(2)} == {"t2", "t3"}  # t0 was drawn twice: the untried come first
    assert cur.draws == {"t0": 2, "t2": 1, "t3": 1}
    again = Curriculum(tasks, "edge", {}, seed=0, edge_draws=2)
    again.load(cur.state())
    assert again.draws == cur.draws
    unlimited = Curriculum(tasks, "edge", estimates, seed=0)
    assert [t.id for _ in range(3) for t in unlimited.draw(1)] == ["t0", "t0", "t0"]


def test_the_calibration_pool_follows_calibrate_from() -> None:
    from coderl.train.calibrate import calibration_pool

    tasks = _tasks(4)
    shown = {"t0", "t2"}
    assert [x.id for x in calibration_pool(tasks, shown, "demonstrated")[0]] == ["t0", "t2"]
    assert calibration_pool(tasks, shown, "undemonstrated") == ([tasks[1], tasks[3]], "undemonstrated")
    assert calibration_pool(tasks, shown, "all") == (tasks, "training")
    assert calibration_pool(tasks, set(), "undemonstrated") == (tasks, "training")  # no warm start known
    assert calibration_pool(tasks, {t.id for t in tasks}, "undemonstrated") == (tasks, "training")  # none left
