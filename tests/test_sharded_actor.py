"""The sharded actor (actor.ranks=2, FSDP2 over gloo on this machine's CPU) against the one-process
actor on the real model: same scores, same update, and checkpoints that resume on another rank count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from coderl.engine.weights import read_weights
from coderl.errors import ConfigError
from coderl.rl import AlgoConfig
from coderl.train.actor import Actor
from coderl.train.batch import BatchLoss, build_batch
from coderl.train.config import ActorConfig
from coderl.train.forward import micro_batch_groups
from coderl.train.sharded import ShardedActor, build_actor
from coderl.types import Trajectory

TOL = 1e-5


def _trajectories(tokenizer: Any) -> list[Trajectory]:
    """Three GRPO groups of two samples on real text; prompts shared within a group (prefix sharing)."""
    texts = [
        ("def add(a, b):\n    return a - b\n# fix the bug", [" return a + b", " return b - a"]),
        ("The test test_parse fails: expected 3, got 2.", [" Open parse.py and look at", " I will run pytest"]),
        ("Rename the helper and keep the tests green.", [" grep -n helper src", " sed -i s/a/b/ x.py"]),
    ]
    out = []
    for g, (prompt, responses) in enumerate(texts):
        for s, response in enumerate(responses):
            ids = tokenizer.encode(response)
            out.append(
                Trajectory(
                    task_id=f"t{g}",
                    group_id=f"t{g}",
                    prompt_ids=tokenizer.encode(prompt),
                    response_ids=ids,
                    response_mask=[1] * len(ids),
                    logprobs=[-1.0] * len(ids),
                    reward=float(s == 0),
                )
            )
    return out


def _step(actor: Any, trajs: list[Trajectory], algo: AlgoConfig) -> tuple[dict[str, float], dict[str, float]]:
    batch = build_batch(trajs, algo, max_response=16)
    loss = BatchLoss(batch, algo)
    stats = actor.train_step(batch.sequences, batch.starts, 1.0, loss, True)
    return stats, loss.metrics()


def _weights(actor: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().float() for k, v in actor.state_dict_for_engine().items()}


def test_two_ranks_update_as_one_and_resume_on_one(tiny_model: Path, tokenizer: Any, tmp_path: Path) -> None:
    """On the tiny model (tests/tiny.py): sharding, gathering and checkpoints do not depend on its size."""
    checkpoint = tiny_model
    trajs = _trajectories(tokenizer)
    algo = AlgoConfig(advantage="grpo")
    # a budget that splits the batch into 3 micro-batches: rank 1 also runs a zero-loss dummy pass
    cfg = ActorConfig(device="cpu", lr=1e-5, micro_batch_tokens=40, seed=0)
    one = Actor(cfg, checkpoint)
    one.setup()
    two = ShardedActor(cfg.model_copy(update={"ranks": 2}), checkpoint)
    two.setup()
    try:
        batch = build_batch(trajs, algo, max_response=16)
        assert len(micro_batch_groups(one.cfg, batch.sequences, batch.starts)) == 3
        seqs = [t.prompt_ids + t.response_ids for t in trajs]
        starts = [len(t.prompt_ids) for t in trajs]
        for a, b in zip(one.score(seqs, starts, 1.0, with_entropy=True), two.score(seqs, starts, 1.0, with_entropy=True), strict=True):
            assert a.entropy is not None and b.entropy is not None
            assert (a.logprobs - b.logprobs).abs().max() < TOL
            assert (a.entropy - b.entropy).abs().max() < 1e-4

        stats_one, metrics_one = _step(one, trajs, algo)
        stats_two, metrics_two = _step(two, trajs, algo)
        assert stats_one["micro_batches"] == stats_two["micro_batches"] == 3
        assert stats_two["tokens"] == stats_one["tokens"]
        assert stats_two["loss"] == pytest.approx(stats_one["loss"], abs=TOL)
        assert stats_two["grad_norm"] == pytest.approx(stats_one["grad_norm"], rel=1e-4)  # fp32 sums in another order
        assert stats_one["grad_norm"] > 0
        for key in ("pg_loss", "entropy", "logprob_mismatch", "logprob_mismatch_max"):
            assert metrics_two[key] == pytest.approx(metrics_one[key], abs=TOL), key
        w1, w2 = _weights(one), _weights(two)
        assert set(w2) == set(w1)
        assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < TOL
        moved = max(float((w1[k] - v.float()).abs().max()) for k, v in read_weights(checkpoint).items())
        assert moved > 1e-6  # the update did change the weights

        # a checkpoint written by the two ranks resumes on one, and the next steps agree
        two.save(tmp_path / "ckpt")
        assert (tmp_path / "ckpt" / "model" / "model.safetensors").is_file()
        resumed = Actor(cfg, checkpoint)
        resumed.load(tmp_path / "ckpt")
        assert resumed.step == 1 and two.step == 1
        w3 = _weights(resumed)
        assert max(float((w2[k] - w3[k]).abs().max()) for k in w2) == 0.0
        _step(one, trajs, algo)
        _step(resumed, trajs, algo)
        w1, w3 = _weights(one), _weights(resumed)
        assert max(float((w1[k] - w3[k]).abs().max()) for k in w1) < TOL
    finally:
        two.close()


def test_rank_counts_the_machine_cannot_run_are_refused_before_any_process() -> None:
    with pytest.raises(ValueError, match=r"actor\.ranks: got 2 with actor\.lora_rank=8"):
        ActorConfig(ranks=2, lora_rank=8)
    gpus = torch.cuda.device_count()
    with pytest.raises(ConfigError, match=f"needs a GPU per rank with nccl; this machine has {gpus}"):
        ShardedActor(ActorConfig(ranks=max(gpus + 1, 2), device="cuda", dist_backend="nccl")).setup()
    with pytest.raises(ConfigError, match=r"needs actor\.ranks >= 2, got 1"):
        ShardedActor(ActorConfig(ranks=1))
    assert isinstance(build_actor(ActorConfig(), None, None), Actor)
    assert isinstance(build_actor(ActorConfig(ranks=2), None, None), ShardedActor)
