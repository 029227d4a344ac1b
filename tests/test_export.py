"""`coderl export`'s refusals: what is not a train run, a run without checkpoints, a step it did not keep.
The export itself (weights, record, a greedy eval equal to the run's validation) is tested end to end in
tests/test_train_e2e.py::test_warm_start_then_rl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coderl.config import Config
from coderl.config.loader import dump_config
from coderl.errors import ConfigError, ModelError
from coderl.train.export import exported_model, trained_tasks


def _run(tmp_path: Path, steps: list[int]) -> Path:
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(dump_config(Config()))
    for step in steps:
        folder = run / "checkpoints" / f"step-{step:06d}"
        folder.mkdir(parents=True)
        (folder / "trainer.json").write_text(json.dumps({"step": step}))
    return run


def test_export_refuses_what_it_cannot_export(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"has no config.yaml; pass the run directory of a coderl train run"):
        exported_model(tmp_path)
    with pytest.raises(ModelError, match=r"has no complete checkpoint"):
        exported_model(_run(tmp_path, []))
    kept = _run(tmp_path / "b", [7, 8])
    (kept / "checkpoints" / ".step-000009.tmp").mkdir()  # a checkpoint being written is not one
    with pytest.raises(ModelError, match=r"has no checkpoint of step 3; it keeps steps 7, 8 \(train.keep_checkpoints"):
        exported_model(kept, step=3)


def test_the_trained_tasks_are_those_rolled_out_up_to_the_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"task_id": f"t{i}", "step": i} for i in (1, 2, 3)]
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert trained_tasks(run, 2) == {"t1", "t2"}
