"""`coderl bench invariant --quick`: greedy sessions replayed from a trajectories file in each mode
(off, greedy, and with packed weights 32-row blocks), the same tokens in each, and the section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coderl.bench.invariant import BLOCKS, UNSHARED, to_markdown
from coderl.bench.speculate import trajectory_sessions
from coderl.cli.main import main
from coderl.errors import ConfigError
from tests.tiny import tiny_checkpoint


def _trajectories(path: Path) -> Path:
    rows = [  # two model turns with a tool's output between them, then a one-turn trajectory
        {"prompt_ids": [5, 6, 7, 8], "response_ids": [9, 10, 11, 40, 41, 12, 13], "response_mask": [1, 1, 1, 0, 0, 1, 1]},
        {"prompt_ids": [20, 21], "response_ids": [22, 23, 24], "response_mask": [1, 1, 1]},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_trajectorys_model_turns_become_one_session_with_their_contexts(tmp_path: Path) -> None:
    sessions = trajectory_sessions(_trajectories(tmp_path / "t.jsonl"), 24)
    assert sessions == [
        [([5, 6, 7, 8], 3), ([5, 6, 7, 8, 9, 10, 11, 40, 41], 2)],
        [([20, 21], 3)],
    ]
    assert trajectory_sessions(tmp_path / "t.jsonl", 1) == sessions[:1]
    with pytest.raises(ConfigError, match="no such file"):
        trajectory_sessions(tmp_path / "missing.jsonl", 4)


@pytest.mark.slow
def test_bench_invariant_quick_replays_the_sessions_in_each_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the tiny model (tests/tiny.py): the bench's plumbing is checked, not the engine's speed
    path = _trajectories(tmp_path / "t.jsonl")
    assert main(["bench", "invariant", "--quick", "--json", "--trajectories", str(path),
                 f"model.path={tiny_checkpoint()}", "model.dtype=float32"]) == 0  # fmt: skip
    r = json.loads(capsys.readouterr().out)
    assert r["modes"][:3] == ["greedy", "off", UNSHARED] and (BLOCKS in r["modes"]) == r["setup"]["packed"]
    assert r["setup"]["sessions"] == 2 and r["setup"]["turns"] == 3
    for mode in r["modes"]:
        (run,) = r["runs"][mode]
        assert run["tokens"] == 3 + 2 + 3 and run["steps"] > 0  # every turn wrote its recorded length
        assert r["same_tokens"][mode] == 2
        assert run["prefill_tokens"] > 0 and run["shared_prompt_tokens"] == 0  # prompts too short to share
    assert r["greedy_vs_off"] == pytest.approx(r["tok_s"]["greedy"] / r["tok_s"]["off"])
    table = to_markdown(r)
    assert "| greedy | **" in table and "greedy ÷ off" in table and "2 of 2 |" in table
    assert r["shared_vs_unshared"] == pytest.approx(r["tok_s"]["greedy"] / r["tok_s"][UNSHARED])
    assert "unshared pieces: **" in table
