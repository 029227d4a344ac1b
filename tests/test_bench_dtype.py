"""`coderl bench dtype --quick`: float32 (on MKL and on oneDNN's packed weights) and bfloat16 measured
side by side (matmuls in process, the engine in processes of its own), what `dtype: auto` picks here,
and the section's tables."""

from __future__ import annotations

import json

import pytest

from coderl.bench.dtype import matmul_ms, to_markdown
from coderl.cli.main import main
from coderl.hardware import auto_dtype
from tests.tiny import tiny_checkpoint


@pytest.mark.slow
def test_bench_dtype_quick_measures_both_dtypes(capsys: pytest.CaptureFixture[str]) -> None:
    # the tiny model (tests/tiny.py): what is checked is the bench's plumbing, not the engine's speed
    assert main(["bench", "dtype", "--quick", "--json", "engine.max_batch_size=8",
                 f"model.path={tiny_checkpoint()}"]) == 0  # fmt: skip
    result = json.loads(capsys.readouterr().out)
    assert result["auto_picks"] == auto_dtype("auto")
    rates = result["engine_tok_s"]
    if not result["setup"]["packs"]:
        pytest.skip("this torch build has no oneDNN linear packing: float32 ran on MKL only")
    assert set(rates) == {"float32", "float32_mkl", "bfloat16"} and all(v > 0 for v in rates.values())
    assert result["engine_ratio"] == pytest.approx(rates["bfloat16"] / rates["float32"])
    assert result["engine_packed_speedup"] == pytest.approx(rates["float32"] / rates["float32_mkl"])
    for label, ms in result["matmul_ms"].items():
        assert ms["float32"] > 0 and ms["bfloat16"] > 0 and ms["float32_packed"] > 0
        assert result["matmul_ratio"][label] == pytest.approx(ms["bfloat16"] / ms["float32"])
        assert result["packed_matmul_ratio"][label] == pytest.approx(ms["float32_packed"] / ms["float32"])


def test_a_matmul_is_timed_in_the_dtype_asked() -> None:
    assert 0 < matmul_ms(4, (64, 32), "float32", 2) < 1000
    assert 0 < matmul_ms(4, (64, 32), "bfloat16", 2) < 1000
    assert 0 < matmul_ms(4, (64, 32), "float32", 2, packed=True) < 1000


def test_the_section_gives_each_ratio_and_the_choice() -> None:
    result = {
        "auto_picks": "float32", "native_bf16_flag": None,
        "matmul_ms": {"decode (24 rows)": {"float32": 2.0, "bfloat16": 16.0}},
        "matmul_ratio": {"decode (24 rows)": 8.0},
        "engine_tok_s": {"float32": 100.0, "bfloat16": 25.0}, "engine_ratio": 0.25,
        "setup": {"requests": 24, "out_len": 48, "rounds": 2, "batch_invariant": "greedy", "speculate": 4},
        "machine": {"cpu": "AMD EPYC", "cores": 2, "torch": "2.13.0"},
    }  # fmt: skip
    table = to_markdown(result)
    assert "**8.00×**" in table and "**0.25×**" in table and "picks **float32**" in table and "**none**" in table
    assert "oneDNN packed" not in table  # no packed figures measured: no such table
    result["matmul_ms"]["decode (24 rows)"]["float32_packed"] = 1.5
    result |= {"packed_matmul_ratio": {"decode (24 rows)": 0.75}, "engine_packed_speedup": 1.25}
    result["engine_tok_s"]["float32_mkl"] = 80.0
    table = to_markdown(result)
    assert "| 2.00 | 1.50 | **0.75×** |" in table and "| 80.0 | 100.0 | **1.25×** (speed-up) |" in table
