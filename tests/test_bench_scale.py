"""`coderl bench scale`: a quick real run (scripted engine; real sandboxes, grading and actor)."""

from __future__ import annotations

import json

import pytest

from coderl.cli.main import main

pytestmark = pytest.mark.slow


def test_bench_scale_quick_times_sync_and_async_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "scale", "--quick", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    sync, async1, async2 = r["runs"]
    assert [x["mode"] for x in r["runs"]] == ["sync", "async", "async"]
    assert (async1["max_staleness"], async2["max_staleness"]) == (1, 2) and sync["max_staleness"] is None
    for run in r["runs"]:
        assert run["steps_timed"] == 1 and run["steps_per_s"] > 0 and run["update_s_mean"] > 0
        assert 0 <= run["engine_idle_fraction"] <= 1 and 0 <= run["trainer_idle_fraction"] <= 1
    assert async1["policy_lag_max"] <= 1 and async2["policy_lag_max"] <= 2
    assert r["async_speedup_staleness_1"] == pytest.approx(async1["steps_per_s"] / sync["steps_per_s"])
    # sync waits for the whole rollout; async took groups rolled out while step 1 trained
    assert async1["rollout_wait_s_mean"] < sync["rollout_wait_s_mean"]
