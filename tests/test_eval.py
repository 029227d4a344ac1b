"""`coderl eval` end to end on the real model: report, Parquet trajectories, and logprobs that an
independent forward pass from the run's own config reproduces."""

from __future__ import annotations

import glob
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml

from coderl.checkpoint import load_model, resolve_checkpoint
from coderl.cli.main import main
from coderl.rollout.report import build_report, pass_at_k
from coderl.rollout.store import read_trajectories
from tests.test_tasks import make_native


@pytest.mark.slow
def test_eval_writes_report_and_exact_trajectories(tmp_path: Path) -> None:
    make_native(tmp_path / "tasks")
    run = tmp_path / "run"
    argv = ["eval", f"tasks.source=native:{tmp_path / 'tasks'}", f"run.dir={run}", "rollout.max_turns=2",
            "rollout.max_tokens=48", "rollout.group_size=2", "rollout.pass_k=[1,2]", "rollout.temperature=0.8"]  # fmt: skip
    assert main(argv) == 0
    report = __import__("json").loads((run / "report.json").read_text())
    for key in (
        "total_instances",
        "resolved_instances",
        "resolved_ids",
        "pass@1",
        "pass@k",
        "by_tier",
        "exit_statuses",
    ):
        assert key in report
    assert report["total_instances"] == 1 and set(report["pass@k"]) == {"1", "2"}
    table = pq.read_table(glob.glob(str(run / "trajectories" / "*.parquet"))[0])
    for col in (
        "task_id",
        "group_id",
        "prompt_ids",
        "response_ids",
        "response_mask",
        "logprobs",
        "reward",
        "policy_version",
        "exit_status",
    ):
        assert col in table.column_names
    rows = table.to_pylist()
    assert len(rows) == 2 and rows[0]["group_id"] == rows[1]["group_id"]
    # recompute the logprobs of mask-1 tokens from the checkpoint named in the run's config.yaml
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    model = load_model(resolve_checkpoint(cfg["model"]["path"]), torch.float32, "cpu")
    temperature = cfg["rollout"]["temperature"]
    diffs = []
    for row in rows:
        ids = torch.tensor([row["prompt_ids"] + row["response_ids"]])
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        logp = torch.log_softmax(logits / temperature, dim=-1)
        start = len(row["prompt_ids"])
        for i, (tok, mask, lp) in enumerate(
            zip(row["response_ids"], row["response_mask"], row["logprobs"], strict=True)
        ):
            if mask:
                diffs.append(abs(logp[start + i - 1, tok].item() - lp))
    assert diffs and sum(diffs) / len(diffs) < 1e-3
    assert len(read_trajectories(run)) == 2


def test_pass_at_k_matches_hand_computed_values() -> None:
    assert pass_at_k(5, 0, 1) == 0.0
    assert pass_at_k(5, 5, 3) == 1.0
    assert abs(pass_at_k(5, 2, 1) - 0.4) < 1e-12
    assert abs(pass_at_k(5, 2, 2) - (1 - 3 / 10)) < 1e-12  # 1 - C(3,2)/C(5,2)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)
    rows = [
        {"task_id": "a", "resolved": True, "exit_status": "submitted", "reward": 1.0},
        {"task_id": "a", "resolved": False, "exit_status": "step_limit", "reward": 0.0},
        {"task_id": "b", "resolved": False, "exit_status": "error", "reward": 0.0},
        {"task_id": "b", "resolved": False, "exit_status": "submitted", "reward": 0.0},
    ]
    r = build_report(rows, {"a": "warmup", "b": "easy"}, [1, 2])
    assert r["resolved_ids"] == ["a"] and r["pass@1"] == 0.25 and r["pass@k"]["2"] == 0.5
    assert r["by_tier"]["warmup"]["pass@1"] == 0.5 and r["exit_statuses"] == {
        "submitted": 2,
        "step_limit": 1,
        "error": 1,
    }


def test_interrupted_store_keeps_finished_trajectories(tmp_path: Path) -> None:
    from coderl.rollout.store import TrajectoryStore
    from coderl.types import Trajectory

    store = TrajectoryStore(tmp_path, shard_size=2)
    for i in range(3):
        store.add(
            Trajectory(
                task_id=f"t{i}",
                group_id="g",
                prompt_ids=[1],
                response_ids=[2],
                response_mask=[1],
                logprobs=[-0.1],
            )
        )
    # no close(): as if the process died here; one shard of 2 and one record only in the log
    assert [r["task_id"] for r in read_trajectories(tmp_path)] == ["t0", "t1", "t2"]


def test_a_reopened_store_recovers_what_a_killed_writer_left(tmp_path: Path) -> None:
    from coderl.rollout.store import TrajectoryStore
    from coderl.types import Trajectory

    def traj(i: int) -> Trajectory:
        return Trajectory(
            task_id=f"t{i}",
            group_id="g",
            prompt_ids=[1],
            response_ids=[2],
            response_mask=[1],
            logprobs=[-0.1],
        )

    first = TrajectoryStore(tmp_path, shard_size=2)
    for i in range(3):
        first.add(traj(i))
    with (tmp_path / "trajectories.jsonl").open("a") as fh:
        fh.write('{"task_id": "cut')  # the kill landed mid-line
    # killed: t2 only in the log; a resumed run opens the store again and goes on
    second = TrajectoryStore(tmp_path, shard_size=2)
    for i in range(3, 6):
        second.add(traj(i))
    second.close()
    assert [r["task_id"] for r in read_trajectories(tmp_path)] == [f"t{i}" for i in range(6)]


def test_a_rollout_with_parts_is_stored_one_row_per_sequence(tmp_path: Path) -> None:
    from coderl.rollout.store import TrajectoryStore
    from coderl.types import Trajectory

    def seq(n: int) -> Trajectory:
        return Trajectory(task_id="t", group_id="g", prompt_ids=[1] * n, response_ids=[2], response_mask=[1],
                          logprobs=[-0.1], reward=1.0, patch="diff")  # fmt: skip

    main = seq(3)
    main.parts = [seq(4), seq(5)]
    store = TrajectoryStore(tmp_path)
    store.add(main, {"step": 7})
    store.close()
    rows = read_trajectories(tmp_path)
    assert [(r["part"], len(r["prompt_ids"]), r["step"], r["reward"]) for r in rows] == [
        (0, 3, 7, 1.0),
        (1, 4, 7, 1.0),
        (2, 5, 7, 1.0),
    ]
    assert all("parts" not in r for r in rows)
