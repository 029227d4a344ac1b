"""`coderl bench load --quick`: the engine measured in processes of its own, alone and beside a hog
process, per OpenMP policy; the hogs are gone afterwards and the section names every policy."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from coderl.bench import load
from coderl.bench.load import to_markdown
from coderl.cli.main import main
from tests.tiny import tiny_checkpoint

pytestmark = pytest.mark.slow


def _hogs_running() -> int:
    out = subprocess.run(["pgrep", "-f", "coderl.bench.load hog"], capture_output=True, text=True)
    return len(out.stdout.split())


def test_bench_load_quick_measures_a_policy_alone_and_beside_a_hog(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load, "POLICIES", {"coderl": {}})  # one policy: each measurement is a process of its own
    # the tiny model (tests/tiny.py): what is checked is the bench's plumbing, not the engine's speed
    assert main(["bench", "load", "--quick", "--hogs", "1", "--json", "engine.max_batch_size=8",
                 f"model.path={tiny_checkpoint()}"]) == 0  # fmt: skip
    result = json.loads(capsys.readouterr().out)
    assert result["hogs"] == 1 and set(result["policies"]) == {"coderl"}
    p = result["policies"]["coderl"]
    assert len(p["runs"]["alone"]) == len(p["runs"]["loaded"]) == 1
    assert p["alone_tok_s"] > 0 and p["loaded_tok_s"] > 0
    assert p["loaded_ratio"] == pytest.approx(p["loaded_tok_s"] / p["alone_tok_s"])
    assert p["vs_first_alone"] == 1.0
    assert _hogs_running() == 0  # every hog was stopped


def test_the_section_names_every_policy_and_its_ratio() -> None:
    policy = {"alone_tok_s": 40.0, "loaded_tok_s": 10.0, "loaded_ratio": 0.25, "vs_first_alone": 1.0}
    result = {
        "policies": {"libgomp": policy, "coderl": {**policy, "loaded_ratio": 0.4, "vs_first_alone": 0.95},
                     "passive": {**policy, "loaded_ratio": 0.5, "loaded_tok_s": 20.0}},
        "hogs": 2,
        "setup": {"concurrency": 8, "requests": 16, "out_len": 48, "dtype": "bfloat16", "rounds": 2, "quick": False},
        "machine": {"cpu": "a CPU", "cores": 2, "torch": "2.13.0", "date": "2026-11-27"},
    }
    table = to_markdown(result)
    assert "OMP_WAIT_POLICY=PASSIVE" in table and "GOMP_SPINCOUNT=300000" in table and "GOMP_SPINCOUNT=1000" in table
    assert "**0.25×**" in table and "**0.40×**" in table and "**0.50×**" in table and "40.0 (0.95×)" in table


def test_a_failed_measurement_says_why() -> None:
    with pytest.raises(RuntimeError, match="measurement failed"):
        load._measure({"config": {"engine": {"max_batch_size": 0}}}, dict(os.environ))
