"""algo.mask_exits: samples a limit or a malformed call ended count in their group's baseline and are
left out of the loss (docs/training.md, "Malformed samples out of the loss")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.progress import Progress

from coderl.config import load_config
from coderl.errors import ConfigError
from coderl.rl import AlgoConfig
from coderl.train.actor import Actor
from coderl.train.batch import build_batch
from coderl.train.config import ActorConfig
from coderl.train.metrics import StageTimer, summary_line
from coderl.train.update import update_policy
from coderl.types import Trajectory


def sample(group: str, reward: float, exit_status: str, tokens: list[int]) -> Trajectory:
    return Trajectory(
        task_id=group, group_id=group, prompt_ids=[1, 2, 3], response_ids=tokens, response_mask=[1] * len(tokens),
        logprobs=[-0.5] * len(tokens), reward=reward, num_turns=1, exit_status=exit_status,
    )  # fmt: skip


def group(malformed: list[int] | None = None) -> list[Trajectory]:
    """Four samples of one task: solved, two unsolved, and one whose call was malformed."""
    return [
        sample("t", 1.0, "submitted", [5, 6, 7]),
        sample("t", 0.0, "submitted", [5, 6, 8]),
        sample("t", 0.0, "submitted", [5, 9, 8, 4]),
        sample("t", 0.0, "format_limit", malformed or [5, 11]),
    ]


def test_a_left_out_sample_keeps_its_place_in_the_baseline_and_gets_no_loss() -> None:
    rollouts = group()
    trained = build_batch(rollouts, AlgoConfig(), max_response=8)
    masked = build_batch(rollouts, AlgoConfig(mask_exits=["format_limit"]), max_response=8)
    # the others' advantages are those of the full group: the malformed sample still lowered its mean
    assert torch.equal(masked.advantages[:3], trained.advantages[:3])
    assert float(trained.advantages[3].abs().sum()) > 0  # trained without the setting...
    assert float(masked.advantages[3].abs().sum()) == 0 and float(masked.mask[3].sum()) == 0  # ...not with it
    assert masked.left_out == 1 and trained.left_out == 0
    assert float(masked.mask[:3].sum()) == float(trained.mask[:3].sum())


def test_a_bad_exit_status_is_refused_with_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["algo.mask_exits=[format_error]"])
    assert "format_error" in str(err.value) and "format_limit" in str(err.value)


def update(actor: Actor, rollouts: list[Trajectory], algo: AlgoConfig) -> tuple[dict[str, Any], list[list[int]]]:
    """One real update of ``actor``; returns its metrics and the sequences the actor forwarded."""
    forwarded: list[list[int]] = []
    real = actor.train_step

    def spy(sequences: list[list[int]], *args: Any) -> dict[str, float]:
        forwarded.extend(sequences)
        return real(sequences, *args)

    actor.train_step = spy  # type: ignore[method-assign,assignment]
    try:
        with Progress(disable=True) as progress:
            metrics = asyncio.run(update_policy(actor, algo, 1.0, 8, rollouts, StageTimer(), progress, "update"))
    finally:
        del actor.train_step
    return metrics, forwarded


def weights_after(tiny_model: Path, rollouts: list[Trajectory], algo: AlgoConfig) -> tuple[torch.Tensor, dict[str, Any], list[list[int]]]:
    actor = Actor(ActorConfig(device="cpu", seed=0, lr=1e-2), tiny_model)
    actor.setup()
    metrics, forwarded = update(actor, rollouts, algo)
    flat = torch.cat([p.detach().flatten() for _, p in actor.trainable_parameters()])
    actor.close()
    return flat, metrics, forwarded


def test_a_left_out_samples_tokens_never_reach_the_update(tiny_model: Path) -> None:
    algo = AlgoConfig(mask_exits=["format_limit"])
    one, metrics, forwarded = weights_after(tiny_model, group([5, 11]), algo)
    other, _, _ = weights_after(tiny_model, group([12, 13, 14]), algo)
    assert torch.equal(one, other)  # whatever the malformed sample said, the update is the same
    assert [1, 2, 3, 5, 11] not in forwarded and len(forwarded) == 3  # and it was never forwarded
    assert metrics["left_out_samples"] == 1 and metrics["optimizer_steps"] == 1
    trained_one, _, _ = weights_after(tiny_model, group([5, 11]), AlgoConfig())
    trained_other, _, _ = weights_after(tiny_model, group([12, 13, 14]), AlgoConfig())
    assert not torch.equal(trained_one, trained_other)  # without the setting its tokens are trained


def test_a_step_whose_every_sample_is_left_out_trains_nothing(tiny_model: Path) -> None:
    actor = Actor(ActorConfig(device="cpu", seed=0), tiny_model)
    actor.setup()
    rollouts = [sample("t", 0.0, "token_limit", [5, 6]), sample("t", 0.5, "format_limit", [5, 7])]
    metrics, forwarded = update(actor, rollouts, AlgoConfig(mask_exits=["format_limit", "token_limit"]))
    actor.close()
    assert forwarded == [] and metrics["optimizer_steps"] == 0 and metrics["left_out_samples"] == 2


def test_the_step_line_says_how_many_samples_were_left_out() -> None:
    row = {"pass_rate": 0.0, "reward_mean": 0.0, "response_len_mean": 9.0, "trained_tokens": 40}
    assert "left out" not in summary_line(row)
    assert "trained 40 tok (left out 3)" in summary_line({**row, "left_out_samples": 3})
