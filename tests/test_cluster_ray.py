"""``cluster.backend=ray``: rollout workers as Ray actors on a real two-node Ray cluster on this machine
(tests/ray_cluster_check.py, run with a Python that has Ray: this one or .venv-verl), and the clear
errors of the ray backend."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from coderl.config import load_config
from coderl.errors import ClusterError, ConfigError
from coderl.rollout.store import read_trajectories
from tests.extra_python import python_with

ROOT = Path(__file__).resolve().parents[1]


def ray_python() -> str:
    return python_with("ray")


@pytest.mark.slow
def test_train_and_eval_on_a_two_node_ray_cluster_lose_no_rollout_when_a_worker_dies(tmp_path: Path) -> None:
    done = subprocess.run(
        [ray_python(), "-m", "tests.ray_cluster_check", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    log = (tmp_path / "train.log").read_text() if (tmp_path / "train.log").exists() else ""
    assert done.returncode == 0, done.stderr[-3000:] + log[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    print("ray cluster check, seconds by phase:", got.get("phase_s"))  # shown with -rP / on failure
    assert got["train_exit"] == 0, log[-3000:]
    assert got["nodes"] == 2 and got["killed"]["node"] != got["other"]["node"]  # one worker per node
    ranks = got["ranks"]  # the actor on two Ray rank actors, one per node, updates as one process does
    assert len(ranks["nodes"]) == 2, ranks
    assert ranks["loss"][1] == pytest.approx(ranks["loss"][0], abs=1e-5) and ranks["update_diff"] < 1e-5, ranks
    assert ranks["resume_diff"] == 0.0 and ranks["reload_diff"] == 0.0 and ranks["resumed_step"] == 1, ranks
    assert got["killed"]["finished"] >= 1 and got["killed"]["running"] >= 1  # killed mid-rollout
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert sum(r["rollout_retries"] for r in rows) >= 1  # the killed worker's rollout ran again elsewhere
    for r in rows:  # every sample of every group, checked token by token against what the engine sampled
        assert r["samples"] == 4 and r["token_mismatch"] == 0 and r["trained_samples"] == 4
        # the launched server samples from the actor's weights: after the first update too (fanned out)
        assert r["logprob_mismatch"] < 1e-3 and r["policy_version"] == r["step"]
    trajs = read_trajectories(run)
    assert len(trajs) == 8  # nothing finished was lost, nothing ran twice into the record
    by_group: dict[str, list[int]] = {}
    for t in trajs:
        by_group.setdefault(t["group_id"], []).append(int(t["metrics"]["sample"]))
    assert sorted(sorted(s) for s in by_group.values()) == [[0, 1]] * 4
    assert "rollout worker 0 lost a rollout" in log and "engine replicas (coderl): http://" in log
    assert "actor: 2 rank(s), gloo, Ray actors: rank 0 on node" in log  # the trainer's ranks on the cluster
    assert (run / "checkpoints").is_dir() and any((run / "checkpoints").glob("*/actor/model/model.safetensors"))
    assert sorted({(t["step"], t["policy_version"]) for t in trajs}) == [(1, 0), (2, 1)]
    assert got["eval_exit"] == 0, got["eval_log"]
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["total_instances"] == 2 and len(read_trajectories(tmp_path / "eval")) == 2
    assert "rollout workers (Ray namespace" in got["eval_log"]
    assert "engine replicas (coderl): http://" in got["eval_log"]  # eval sampled from a launched server
    # a cluster too small for the workers asked for: a clear error naming what it has, not a hang
    assert "cannot hold 3 rollout workers" in got["too_many"] and "second_node" in got["too_many"]


def test_the_ray_backend_without_ray_names_the_package() -> None:
    if importlib.util.find_spec("ray") is not None:
        pytest.skip("Ray is installed in this Python")
    from coderl.cluster.ray_rollouts import import_ray

    with pytest.raises(ClusterError, match=r"pip install 'coderl\[ray\]'"):
        import_ray()


def test_the_launched_servers_report_the_sampling_distributions_logprobs() -> None:
    from coderl.cli.main import _split_config, build_parser
    from coderl.cluster.launcher import server_command

    def command(*overrides: str) -> tuple[list[str], dict[str, str]]:
        cfg = load_config(overrides=["cluster.backend=ray", "cluster.engine_replicas=2", *overrides])
        return server_command(cfg, Path("/ckpt/policy"), "10.0.0.7", 8123, "sekret")

    cmd, _ = command("model.dtype=bfloat16", "engine.max_batch_size=32")
    ns = build_parser().parse_args(cmd[3:])  # python -m coderl engine serve ...
    path, overrides = _split_config(ns)
    served = load_config(path, overrides, env={})
    assert (ns.command, served.server.host, served.server.port, served.server.api_key) == (
        "engine", "10.0.0.7", 8123, "sekret",
    )  # fmt: skip
    assert served.model.dtype == "bfloat16" and served.engine.max_batch_size == 32
    cmd, env = command(
        "cluster.engine_server=vllm", "actor.lora_rank=8", "cluster.engine_args=[--enforce-eager]"
    )
    assert cmd[:3] == ["vllm", "serve", "/ckpt/policy"] and cmd[-1] == "--enforce-eager"
    assert cmd[cmd.index("--logprobs-mode") + 1] == "processed_logprobs"  # not vLLM's raw default
    assert "--enable-lora" in cmd and env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    cmd, env = command("cluster.engine_server=sglang")
    assert "sglang.launch_server" in cmd and env["SGLANG_RETURN_ORIGINAL_LOGPROB"] == "0"
    assert cmd[cmd.index("--api-key") + 1] == "sekret" and "--enable-lora" not in cmd


def test_cluster_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"cluster\.backend"):
        load_config(overrides=["cluster.backend=slurm"])
    with pytest.raises(ConfigError, match=r"cluster\.rollout_workers"):
        load_config(overrides=["cluster.rollout_workers=0"])
    with pytest.raises(ConfigError, match=r"cluster\.placement"):
        load_config(overrides=["cluster.placement=ANYWHERE"])
    with pytest.raises(ConfigError, match="engine replicas are Ray actors"):
        load_config(overrides=["cluster.engine_replicas=1"])
    with pytest.raises(ConfigError, match="vLLM servers have no stable HTTP endpoint"):
        load_config(
            overrides=["cluster.backend=ray", "cluster.engine_replicas=1", "cluster.engine_server=vllm"]
        )
    with pytest.raises(ConfigError, match=r"ranks on Ray train full weights"):
        load_config(overrides=["cluster.backend=ray", "cluster.actor=ray", "actor.lora_rank=8"])
    with pytest.raises(ConfigError, match=r"cluster\.actor_placement"):
        load_config(overrides=["cluster.backend=ray", "cluster.actor=ray", "cluster.actor_placement=NEAR"])


def test_a_cluster_address_nobody_answers_at_fails_at_once() -> None:
    from coderl.cluster.ray_rollouts import _check_answers
    from coderl.train.ranks import free_port

    port = free_port()  # nothing listens there (Ray itself would retry for minutes)
    with pytest.raises(ClusterError, match=rf"nothing answers at '127\.0\.0\.1:{port}'"):
        _check_answers(f"127.0.0.1:{port}")
    with pytest.raises(ClusterError, match=r"nothing answers at 'ray://127\.0\.0\.1"):
        _check_answers(f"ray://127.0.0.1:{port}")
    with pytest.raises(ClusterError, match=r"got 'headnode'; give a head's host:port"):
        _check_answers("headnode")
    import socket

    with socket.socket() as server:  # something listening: passes
        server.bind(("127.0.0.1", 0))
        server.listen()
        _check_answers(f"127.0.0.1:{server.getsockname()[1]}")
