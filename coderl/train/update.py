"""The update stages of an RL step: reference -> values -> advantages -> update, over trainable rollouts.

Owns: the no-grad scoring passes (the KL reference policy when ``algo.kl_coef > 0``, the value head's
predictions for ``algo.advantage=gae``, every mini-batch's old policy when ``algo.mini_batches > 1``),
the training batch with its shaped rewards and advantages (:func:`coderl.train.batch.build_batch`),
one optimizer step of the actor per mini-batch, and the metrics of all of it. Must not roll out, sync
weights or save: the trainer does those around it.
"""

from __future__ import annotations

from typing import Any

import torch
from rich.progress import Progress
from torch import Tensor

from coderl.rl import AlgoConfig
from coderl.threads import in_own_thread
from coderl.train.actor import Policy, Scored
from coderl.train.batch import BatchLoss, build_batch, merged_metrics, mini_batches, padded, sequences_of
from coderl.train.metrics import StageTimer
from coderl.types import Trajectory

NOTHING_TRAINED: dict[str, Any] = {
    "logprob_mismatch": 0.0, "grad_norm": 0.0, "update_skipped": 1.0, "advantage_abs_mean": 0.0, "advantage_from_unsolved": 0.0,
    "trained_tokens": 0, "optimizer_steps": 0,
}  # fmt: skip
"""The update metrics of a step with nothing to train on."""


async def score_rows(
    actor: Policy, rows: list[Trajectory], temperature: float, reference: bool = False, with_values: bool = False
) -> list[Scored]:
    """The actor's (or its reference's) scores of every row's response, in a thread of its own."""
    return await in_own_thread(
        actor.score, [x.prompt_ids + x.response_ids for x in rows], [len(x.prompt_ids) for x in rows],
        temperature, reference=reference, with_values=with_values,
    )  # fmt: skip


async def update_policy(
    actor: Policy,
    algo: AlgoConfig,
    temperature: float,
    max_response: int,
    rollouts: list[Trajectory],
    timer: StageTimer,
    progress: Progress,
    label: str,
) -> dict[str, Any]:
    """The stages of the module doc over ``rollouts`` (a bar named ``label`` counts the optimizer steps);
    returns the step row's update metrics."""
    rows = sequences_of(rollouts)
    ref = values = None
    if algo.kl_coef > 0:
        with timer("reference"):
            ref = [s.logprobs for s in await score_rows(actor, rows, temperature, reference=True)]
    if algo.advantage == "gae":  # the critic's predictions before the update
        with timer("values"):
            scored = await score_rows(actor, rows, temperature, with_values=True)
            values = [s.values for s in scored if s.values is not None]
    with timer("advantages"):
        batch = build_batch(rollouts, algo, max_response, ref, values)
        trained = batch.mask.sum(dim=1) > 0  # [B] rows algo.mask_exits left out are not forwarded
        parts = [[i for i in part if trained[i]] for part in mini_batches(batch, algo.mini_batches)]
        parts = [part for part in parts if part]
    if not parts:  # every sample was left out of the loss
        return {**NOTHING_TRAINED, "left_out_samples": batch.left_out}
    if len(parts) > 1:  # every mini-batch's old policy: the weights before the first update
        with timer("old_logprobs"):
            batch.old_logp = padded([s.logprobs for s in await score_rows(actor, rows, temperature)], batch.mask.shape[1])
    losses: list[BatchLoss] = []
    updates: list[dict[str, float]] = []
    bar = progress.add_task(label, total=len(parts), info="")
    with timer("update"):
        for part in parts:
            sub = batch.subset(part) if len(part) < batch.size else batch
            loss = BatchLoss(sub, algo, None if ref is None else [ref[i] for i in part])
            kept = [t.response_mask for t in sub.trajectories]  # tool output is context: no logits for it
            updates.append(
                await in_own_thread(actor.train_step, sub.sequences, sub.starts, temperature, loss, True, kept)
            )
            losses.append(loss)
            progress.advance(bar)
    progress.remove_task(bar)
    mask = batch.mask
    step_s = sum(u["step_s"] for u in updates)
    return {
        **merged_metrics(losses),
        "grad_norm": max(u["grad_norm"] for u in updates),
        "lr": updates[0]["lr"],
        "tokens_per_s": sum(u["tokens"] for u in updates) / max(step_s, 1e-9),
        "train_tokens": sum(u["tokens"] for u in updates),
        "update_skipped": sum(u["skipped"] for u in updates),
        "optimizer_steps": len(updates),
        "advantage_abs_mean": float((batch.advantages.abs() * mask).sum() / mask.sum().clamp(min=1)),
        "advantage_from_unsolved": unsolved_share(batch.advantages, mask, batch.rollout_index, rollouts),
        "trained_tokens": int(mask.sum()),
        "left_out_samples": batch.left_out,
        "shaped_reward_mean": float(batch.rewards[batch.counted > 0].mean()),
    }


def unsolved_share(advantages: Tensor, mask: Tensor, rollout_index: Tensor, rollouts: list[Trajectory]) -> float:
    """The share of the batch's |advantage| mass (over trained tokens; ``[B, T]``, ``[B, T]``, ``[B]``)
    in groups where no sample solved its task: what the patch credit and the format bonus teach, not the
    hidden tests (0 when nothing is trained). Group estimators that divide by the group's spread (grpo)
    give a group of near misses a few thousandths apart the weight of a solved group."""
    solved = {r.group_id for r in rollouts if r.reward >= 1.0}  # the hidden tests' full reward: solved
    mass = (advantages.abs() * mask).sum(dim=1)  # [B]
    unsolved = torch.tensor(
        [rollouts[i].group_id not in solved for i in rollout_index.tolist()], device=mass.device
    )  # [B]
    total = float(mass.sum())
    return float(mass[unsolved].sum()) / total if total > 0 else 0.0
