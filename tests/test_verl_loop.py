"""What needs verl or Ray, run with a Python that has them: this one, or the ``.venv-verl`` that
scripts/test.sh makes (verl 0.9.1, Ray and what verl's agent-loop code imports, beside this Python's
torch, transformers and coderl): the registered ``coderl`` agent loop through verl's own agent-loop code
on CPU (tests/verl_check.py), the example's overrides against verl's config, and the recording proxy as
a named Ray actor (tests/ray_proxy_check.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import hf_logprobs
from tests.extra_python import python_with

ROOT = Path(__file__).resolve().parents[1]


def verl_python() -> str:
    return python_with("verl")


@pytest.mark.slow
def test_the_registered_loop_through_verls_agent_loop_code(tmp_path: Path, hf_model: Any) -> None:
    done = subprocess.run(
        [verl_python(), "-m", "tests.verl_check", str(tmp_path), *example_overrides()],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["task_id"] == "spanlib-s005" and got["index"] == 1  # the row verl's RLHFDataset read back
    assert got["calls"] == got["turns"] == 2 and len(got["request_ids"]) == 1  # one sticky request id
    assert got["reward_score"] == got["grade_reward"]  # the grader's reward, as coderl eval grades the patch
    assert got["padded_response_mask"] == got["model_tokens"] > 0 and got["env_tokens"] > 0
    assert got["padded_shape"] == [1, 4096]  # verl's own padding: prompt_length + response_length
    for prompt, tokens, logprobs in got["logprobs"]:  # the server's logprobs, against an independent forward
        ref = hf_logprobs(hf_model, prompt, tokens)
        assert sum(abs(a - b) for a, b in zip(ref, logprobs, strict=True)) / len(ref) < 1e-3
    assert "over actor_rollout_ref.rollout.prompt_length=64; raise it to at least" in got["prompt_error"]
    rows, served = got["batch_rows"], got["batch_served"]  # AgentLoopWorker.generate_sequences' DataProto
    assert {"prompts", "responses", "response_mask", "rollout_log_probs", "rm_scores", "input_ids"} <= set(
        got["batch_keys"]
    )
    assert sorted(r["task_id"] for r in rows) == ["collkit-001", "spanlib-s005"] and len(served) == 2
    assert sorted(r["model_ids"] for r in rows) == sorted(
        ids for ids, _ in served
    )  # mask 1 = sampled, per sample
    for row in rows:
        assert any(
            row["model_logprobs"] == pytest.approx(lp, abs=1e-6)
            for ids, lp in served
            if ids == row["model_ids"]
        )
    rewards = {
        r["task_id"]: (r["reward"], r["resolved"]) for r in rows
    }  # rm_scores carry the grader's verdict
    assert rewards == {
        "spanlib-s005": (1.0, True),
        "collkit-001": (0.0, False),
    }  # its gold moves fix only its own
    assert got["example"] == {"composed": len(example_overrides()), "rollout_name": "vllm"}  # examples/verl
    assert got["gold_reward_score"] == 1.0 and got["gold_resolved"] and got["gold_rm_scores_last"] == 1.0
    # three samples made from examples/verl/agent_loops.yaml's registry entry all run its settings
    assert got["registry_turns"] == [8, 8, 8]


def example_overrides() -> list[str]:
    """The verl overrides examples/verl/run_grpo.sh passes, its shell variables filled in."""
    script = (ROOT / "examples" / "verl" / "run_grpo.sh").read_text()
    block = script.split("python3 -m verl.trainer.main_ppo \\\n", 1)[1].split('  "$@"', 1)[0]
    values = {"$DATA": "runs/verl-data", "$MODEL": "Qwen/Qwen3-0.6B"}
    out = []
    for line in block.splitlines():
        item = line.strip().removesuffix("\\").strip().replace('"', "")
        for var, value in values.items():
            item = item.replace(var, value)
        out.append(item)
    return out


def test_the_examples_agent_loop_entry_is_a_valid_coderl_config() -> None:
    import yaml

    from coderl.config import load_config
    from coderl.config.packaged import default_train_config

    (entry,) = yaml.safe_load((ROOT / "examples" / "verl" / "agent_loops.yaml").read_text())
    assert entry["name"] == "coderl" and entry["_target_"] == "coderl.integrations.verl.CoderlAgentLoop"
    cfg = load_config(
        entry["coderl_config"], overrides=entry["coderl_overrides"], defaults=default_train_config()
    )
    assert (cfg.rollout.agent, cfg.rollout.max_turns) == ("swe", 8)
    assert cfg.rollout.tools is None and cfg.rollout.response_prefix == "" and cfg.model.tool_format == "auto"


@pytest.mark.slow
def test_the_proxy_as_a_named_ray_actor_on_its_engine_or_on_verls_server_client(tmp_path: Path) -> None:
    done = subprocess.run(  # ray comes with verl in .venv-verl
        [verl_python(), "-m", "tests.ray_proxy_check", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["same_url"] and got["same_actor"]  # the second caller found the first proxy by name
    assert got["calls"] == 1 and got["completion_tokens"] == 4 and got["reply"]  # recorded, real model
    assert got["admin_token"] == "ray-admin" and got["url"].startswith("http://127.0.0.1:")
    # the second proxy forwarded through verl's LLMServerClient and router to two rollout servers
    assert got["verl_calls"] == {"server-0": 2, "server-1": 2}
    (a,), (b,) = got["verl_servers_by_session"].values()
    assert a != b  # each session stayed on one server (sticky), and the router spread the two
    assert got["verl_recorded_is_sampled"]  # the record holds exactly the ids and logprobs sampled
    assert got["verl_policy_versions"] == [3]  # the servers' weight step reached the record
