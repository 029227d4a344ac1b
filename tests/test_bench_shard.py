"""`coderl bench shard --quick`: the sharded actor (2 gloo ranks) against one process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coderl.cli.main import main

pytestmark = pytest.mark.slow


def test_bench_shard_quick_finds_the_same_update_and_times_it(
    capsys: pytest.CaptureFixture[str], tiny_model: Path
) -> None:
    """On the tiny model (tests/tiny.py); tests/test_sharded_actor.py checks the same on the real one."""
    assert main(["bench", "shard", "--quick", "--json", f"model.path={tiny_model}"]) == 0
    r = json.loads(capsys.readouterr().out)
    one, two = r["runs"]
    assert (one["ranks"], two["ranks"]) == (1, 2) and r["steps"] == 2
    assert r["max_weight_diff"] < 1e-5 and r["loss_diff"] < 1e-5 and r["grad_norm_rel_diff"] < 1e-4
    assert one["first_grad_norm"] > 0 and one["step_s"] > 0 and two["step_s"] > 0
    assert r["time_ratio"] == pytest.approx(two["step_s"] / one["step_s"])
