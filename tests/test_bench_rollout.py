"""`coderl bench rollout --quick`: real bwrap sandboxes against a scripted engine, figures and keys."""

from __future__ import annotations

import json

import pytest

from coderl.bench.rollout import to_markdown
from coderl.cli.main import main

pytestmark = pytest.mark.slow


def test_bench_rollout_quick_measures_efficiency_and_its_cpu_ceiling(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "rollout", "--quick", "--no-model-eval", "--latency", "0.3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for n in ("1", "16"):
        level = result["levels"][n]
        assert level["completed_as_scripted"] == int(n)  # every rollout really edited and submitted
        assert level["ideal_s"] == pytest.approx(5 * 0.3)
        assert result[f"efficiency_{n}"] == pytest.approx(level["ideal_s"] / level["wall_s"])
        assert 0 < result[f"efficiency_{n}"] <= 1.0
        assert level["cpu_ms_per_rollout"] > 0 and 0 < result[f"cpu_bound_efficiency_{n}"] <= 1.0
    assert 0 < result["turn_overhead_p50_ms"] < 50
    assert result["burst_gate_ms"] == 20.0  # the default, recorded beside the figures
    table = to_markdown(result)
    assert "| 16 |" in table and "CPU-bound ceiling" in table and "a turn held at most 20 ms" in table
    assert "take turns in bursts (`sandbox.burst_gate_ms`): no (0)" in to_markdown({**result, "burst_gate_ms": 0.0})
