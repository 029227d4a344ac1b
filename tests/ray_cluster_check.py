"""``coderl train cluster.backend=ray`` on a real two-node Ray cluster on this machine (run by
tests/test_cluster_ray.py with a Python that has Ray):

    python -m tests.ray_cluster_check WORKDIR

Starts a head node and a second node (each a raylet process with one CPU and a resource of its own),
first checks that the actor sharded over two Ray rank actors, one per node, updates as the one-process
actor does and writes a checkpoint the one-process actor resumes from; then runs ``coderl train`` in a
process of its own with two rollout workers and two actor ranks, each placed one per node, and its
engine launched as a server by an engine replica actor (``coderl engine serve``), kills one worker
while it is rolling out (after it has finished at least one rollout), waits for the run, then runs
``coderl eval`` there, and asks the cluster for more workers than it can hold. Prints a JSON summary
for the test to check.
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

from coderl.cluster.config import ClusterConfig
from coderl.cluster.ray_rollouts import RayRollouts
from coderl.config import load_config
from coderl.engine.scripted import ScriptedEngine
from coderl.errors import ClusterError
from tests.tiny import tiny_checkpoint

TRAIN = [
    "train.tasks=bundled:warmup", "train.val_tasks=none", "sft.before_rl=false", "train.steps=2",
    "train.tasks_per_step=2", "train.group_size=2", "rollout.agent=single_turn",
    "rollout.tools=null", "rollout.max_tokens=24",
    "rollout.max_sandboxes=1", "cluster.backend=ray", "cluster.rollout_workers=2",
    "cluster.placement=STRICT_SPREAD", "cluster.namespace=coderl-check", "cluster.engine_replicas=1",
    "cluster.engine_cpus=0", "cluster.actor=ray", "actor.ranks=2", "cluster.actor_cpus=0",
    "cluster.actor_resources={rank_slot: 1}", "cluster.actor_placement=STRICT_SPREAD",
    # not the main job's RL recipe: full float32 weights (the sharded actor's), every step an update
    "actor.lora_rank=0", "actor.dtype=float32", "model.dtype=float32", "train.calibrate_tasks=0",
    "algo.dynamic_sampling=false", "train.mode=sync",  # each step samples from the weights it follows
]  # fmt: skip
RANKS = ClusterConfig(
    backend="ray", actor="ray", actor_cpus=0, actor_resources={"rank_slot": 1}, actor_placement="STRICT_SPREAD"
)


def ranks_on_two_nodes(work: Path) -> dict[str, Any]:
    """One GRPO update by two Ray rank actors (one per node) against the one-process actor's, on the
    batch tests/test_sharded_actor.py uses; then a checkpoint written here through Ray, loaded back."""
    import torch

    from coderl.checkpoint import load_tokenizer
    from coderl.engine.weights import read_weights
    from coderl.rl import AlgoConfig
    from coderl.train.actor import Actor
    from coderl.train.config import ActorConfig
    from coderl.train.sharded import ShardedActor
    from tests.test_sharded_actor import _step, _trajectories, _weights

    checkpoint = tiny_checkpoint()
    trajs = _trajectories(load_tokenizer(checkpoint))
    algo = AlgoConfig(advantage="grpo")
    cfg = ActorConfig(device="cpu", lr=1e-5, micro_batch_tokens=40, seed=0)
    one = Actor(cfg, checkpoint)
    one.setup()
    stats_one, _ = _step(one, trajs, algo)
    w1 = _weights(one)
    del one  # its memory back before the ranks load theirs
    gc.collect()
    two = ShardedActor(cfg.model_copy(update={"ranks": 2}), checkpoint, cluster=RANKS)
    two.setup()
    two._ranks.shared_disk = False  # as on nodes without this disk: the files cross in chunks (the run
    # below finds this disk shared and writes in place)
    try:
        where = two.describe()
        stats_two, _ = _step(two, trajs, algo)
        w2 = _weights(two)
        two.save(work / "ckpt")  # written here from rank 0's node (test_sharded_actor resumes such a one)
        saved = {k: v.float() for k, v in read_weights(work / "ckpt" / "model").items()}
        saved_step = int(torch.load(work / "ckpt" / "state.pt")["step"])
        two.load(work / "ckpt")  # back onto the ranks, through the object store
        w4 = _weights(two)
        return {
            "ranks": where,
            "nodes": sorted({str(w["node"]) for w in two._ranks.where}),
            "loss": [stats_one["loss"], stats_two["loss"]],
            "update_diff": max(float((w1[k] - w2[k]).abs().max()) for k in w1),
            "resume_diff": max(float((w2[k] - saved[k]).abs().max()) for k in saved),
            "reload_diff": max(float((w2[k] - w4[k]).abs().max()) for k in w2),
            "resumed_step": saved_step,
        }
    finally:
        two.close()


def kill_a_busy_worker(run: subprocess.Popen[bytes], deadline: float) -> dict[str, Any]:
    """Wait for rollout-0 to have finished a rollout and be running another, then kill its process."""
    while time.monotonic() < deadline and run.poll() is None:
        try:
            worker = ray.get_actor("rollout-0", namespace="coderl-check")
            stats = ray.get(worker.stats.remote(), timeout=10)
        except (ValueError, ray.exceptions.RayError):
            time.sleep(0.5)
            continue
        if stats["finished"] >= 1 and stats["running"] >= 1:
            ray.kill(worker, no_restart=False)  # Ray restarts it; its running rollouts are lost
            other = ray.get(ray.get_actor("rollout-1", namespace="coderl-check").stats.remote(), timeout=30)
            return {"killed": stats, "other": other}
        time.sleep(0.05)
    raise SystemExit(f"rollout-0 was never busy after a finished rollout (train exit code {run.poll()})")


async def placement_error(rollouts: RayRollouts) -> str:
    try:
        await rollouts.start(ScriptedEngine(), "scripted")
        return ""
    except ClusterError as exc:
        return str(exc)
    finally:
        await rollouts.stop()


def main(work: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"head_node": 1, "rank_slot": 1}, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1, resources={"second_node": 1, "rank_slot": 1})
    cluster.wait_for_nodes()
    try:
        ray.init(address=cluster.address, namespace="coderl-check", log_to_driver=False)
        nodes = len([n for n in ray.nodes() if n["Alive"]])
        phase_s = {"cluster": time.monotonic() - t0}
        tiny = f"model.path={tiny_checkpoint()}"  # the cluster's plumbing is checked, not the model
        ranks = ranks_on_two_nodes(work)
        phase_s["ranks"] = time.monotonic() - t0 - sum(phase_s.values())
        log = (work / "train.log").open("wb")
        run = subprocess.Popen(
            [sys.executable, "-m", "coderl", "train", *TRAIN, f"cluster.address={cluster.address}",
             f"run.dir={work / 'run'}", tiny],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        workers = kill_a_busy_worker(run, time.monotonic() + 400)
        code = run.wait(timeout=500)
        log.close()
        phase_s["train"] = time.monotonic() - t0 - sum(phase_s.values())
        # coderl eval on the same cluster, sampling from a launched replica: graded on the workers, stored
        # by the driver
        evaluated = subprocess.run(
            [sys.executable, "-m", "coderl", "eval", "tasks.source=bundled:strkit-001,collkit-002",
             "rollout.agent=single_turn", "rollout.tools=null", "rollout.max_tokens=8", "cluster.backend=ray",
             "cluster.engine_replicas=1", "cluster.engine_cpus=0", f"cluster.address={cluster.address}",
             f"run.dir={work / 'eval'}", tiny],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        phase_s["eval"] = time.monotonic() - t0 - sum(phase_s.values())
        # more workers than the cluster holds: a clear error, not a hang
        cfg = load_config(overrides=[*TRAIN, "cluster.rollout_workers=3", "cluster.placement_timeout_s=3"])
        too_many = asyncio.run(placement_error(RayRollouts(cfg)))
        return {
            "nodes": nodes,
            "ranks": ranks,
            **workers,
            "train_exit": code,
            "eval_exit": evaluated.returncode,
            "eval_log": evaluated.stderr[-2000:],
            "too_many": too_many,
            "phase_s": {**phase_s, "too_many": time.monotonic() - t0 - sum(phase_s.values())},
        }
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
