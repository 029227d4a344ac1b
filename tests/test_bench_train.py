"""`coderl bench train` and `coderl bench learn`: their arithmetic, and a quick real run of the former."""

from __future__ import annotations

import json

import pytest

from coderl.bench.learn import summarise
from coderl.bench.train import variable_batch
from coderl.cli.main import main


def test_variable_batch_spreads_lengths_evenly() -> None:
    seqs, starts = variable_batch(vocab=100, size=5, min_len=10, max_len=50, seed=0)
    assert sorted(len(s) for s in seqs) == [10, 20, 30, 40, 50]
    assert all(0 < st < len(s) for s, st in zip(seqs, starts, strict=True))
    assert all(0 <= t < 100 for s in seqs for t in s)


def test_learn_summary_compares_first_and_last_windows() -> None:
    rows = [{"pass_rate": p, "shaped_reward_mean": r, "format_errors_mean": 3.0 - r}
            for p, r in [(0.0, 0.1), (0.0, 0.2), (0.5, 0.2), (0.0, 0.4), (0.25, 0.5), (0.5, 0.6)]]  # fmt: skip
    got = summarise(rows, window=2)
    assert got["window"] == 2 and got["steps"] == 6
    assert got["first_pass_rate"] == 0.0 and got["last_pass_rate"] == pytest.approx(0.375)
    assert got["pass_rate_rose"] and got["reward_rose"]
    assert got["first_reward"] == pytest.approx(0.15) and got["last_format_errors"] == pytest.approx(2.45)
    assert summarise(rows[:3], window=5)["window"] == 1  # never more than half the run per end


@pytest.mark.slow
def test_bench_train_quick_measures_packing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "train", "--quick", "--no-step", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["packed_tokens_per_s"] > 0 and result["padded_tokens_per_s"] > 0
    assert result["packing_speedup"] == pytest.approx(
        result["packed_tokens_per_s"] / result["padded_tokens_per_s"]
    )
    assert result["peak_memory_mb"] > 100  # a 135M-parameter model and its optimizer state live here
    assert result["batch"]["padded_tokens"] > result["batch"]["real_tokens"]
    sharing = result["prefix_sharing"]
    assert sharing["shared_step_s"] > 0 and result["prefix_sharing_speedup"] == pytest.approx(
        sharing["unshared_step_s"] / sharing["shared_step_s"]
    )
