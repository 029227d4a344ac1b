"""From graded trajectories to a training batch, and the loss over one micro-batch of it.

A sample is ``prompt_ids + response_ids``; the actor scores ``response_ids`` (position ``start`` on),
and only mask-1 tokens (what the model sampled) are trained. Everything per token is padded to
``[B, T]`` with T the longest response, the layout of :mod:`coderl.rl`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from coderl.rl import (
    AlgoConfig,
    compute_advantages,
    compute_loss,
    count_normalisers,
    explained_variance,
    format_bonus,
    kl_token_rewards,
    overlong_penalty,
)
from coderl.train.credit import credit_of
from coderl.types import Trajectory


@dataclass
class TrainBatch:
    trajectories: list[Trajectory]  # one row per token sequence: each rollout, then its parts
    sequences: list[list[int]]  # prompt + response ids, one per row
    starts: list[int]  # len(prompt_ids): where scoring starts
    mask: torch.Tensor  # [B, T] 1 = trained (model-sampled) token
    rollout_logp: torch.Tensor  # [B, T] engine logprobs (0 where mask is 0)
    rewards: torch.Tensor  # [B] after shaping: the row's rollout's shaped reward
    group_index: torch.Tensor  # [B] samples of one group share an index
    rollout_index: torch.Tensor  # [B] rows of one rollout share an index
    counted: torch.Tensor  # [B] 1 on the first row of each rollout: the one group baselines count
    max_response: int  # most model tokens a trajectory can hold: the constant of length normalisation
    advantages: torch.Tensor = field(default_factory=lambda: torch.zeros(0))  # [B, T]
    old_values: torch.Tensor | None = None  # [B, T] value head before the update (gae)
    returns: torch.Tensor | None = None  # [B, T] GAE value targets (gae)
    old_logp: torch.Tensor | None = None  # [B, T] trainer log-probs before the step's first update (mini-batches)
    left_out: int = 0  # rollouts algo.mask_exits left out of the loss (their rows' mask is 0)

    @property
    def size(self) -> int:
        return len(self.sequences)

    def subset(self, rows: list[int]) -> TrainBatch:
        """The batch's rows ``rows``, in that order, advantages and all (a PPO mini-batch)."""
        index = torch.tensor(rows, dtype=torch.long)

        def pick(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[index]

        return TrainBatch(
            trajectories=[self.trajectories[i] for i in rows],
            sequences=[self.sequences[i] for i in rows],
            starts=[self.starts[i] for i in rows],
            mask=self.mask[index],
            rollout_logp=self.rollout_logp[index],
            rewards=self.rewards[index],
            group_index=self.group_index[index],
            rollout_index=self.rollout_index[index],
            counted=self.counted[index],
            max_response=self.max_response,
            advantages=self.advantages[index],
            old_values=pick(self.old_values),
            returns=pick(self.returns),
            old_logp=pick(self.old_logp),
        )


def mini_batches(batch: TrainBatch, count: int) -> list[list[int]]:
    """Row indices of ``count`` mini-batches of whole groups (fewer when the batch has fewer groups), their
    trained tokens as even as a greedy split makes them; each list in batch order."""
    tokens = batch.mask.sum(dim=1)  # [B]
    groups: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(batch.group_index.tolist()):
        groups[g].append(i)
    parts: list[list[int]] = [[] for _ in range(min(count, len(groups)))]
    load = [0.0] * len(parts)
    for rows in sorted(groups.values(), key=lambda r: -float(tokens[r].sum())):
        k = load.index(min(load))
        parts[k] += rows
        load[k] += float(tokens[rows].sum())
    return [sorted(p) for p in parts]


def sequences_of(rollouts: list[Trajectory]) -> list[Trajectory]:
    """Every token sequence of the rollouts, in batch row order (a rollout, then its parts)."""
    return [seq for r in rollouts for seq in r.sequences()]


def build_batch(
    rollouts: list[Trajectory],
    algo: AlgoConfig,
    max_response: int,
    ref_logp: list[torch.Tensor] | None = None,
    values: list[torch.Tensor] | None = None,
) -> TrainBatch:
    """Pad the rollouts' sequences into a batch, shape rewards (overlong, format, KL in the reward) and
    compute advantages.

    A rollout that brought several token sequences (:attr:`coderl.types.Trajectory.parts`) is one
    sample: its reward is shaped once, from its first sequence, and every one of its rows gets that
    reward and that group; only its first row counts in group baselines. So each part gets exactly
    the advantage of its rollout's counted row (for the token-level estimators: the same outcome,
    placed on its own last trained token). ``ref_logp`` and ``values`` (one ``[n]`` tensor per row, in
    :func:`sequences_of` order) are the reference policy's log-probs and the value head's predictions
    before the update (GAE); the batch then also carries the values (``old_values``) and the returns
    they regress to. Per-token KL rewards (``kl_in_reward``) are each sequence's own.
    """
    rows = sequences_of(rollouts)
    owner = [i for i, r in enumerate(rollouts) for _ in r.sequences()]
    width = max(len(t.response_ids) for t in rows)
    size = len(rows)
    mask = torch.zeros(size, width)  # [B, T]
    rollout_logp = torch.zeros(size, width)  # [B, T]
    for i, t in enumerate(rows):
        n = len(t.response_ids)
        mask[i, :n] = torch.tensor(t.response_mask, dtype=torch.float32)
        rollout_logp[i, :n] = torch.tensor(t.logprobs, dtype=torch.float32)
    rollout_index = torch.tensor(owner, dtype=torch.long)  # [B]
    counted = torch.tensor([1.0 if i == 0 or owner[i - 1] != owner[i] else 0.0 for i in range(size)])  # [B]
    rewards = _shaped_rewards(rollouts, algo, max_response)[rollout_index]  # [B]
    groups: dict[str, int] = defaultdict(lambda: len(groups))
    group_index = torch.tensor([groups[rollouts[i].group_id] for i in owner], dtype=torch.long)  # [B]
    batch = TrainBatch(
        trajectories=rows,
        sequences=[t.prompt_ids + t.response_ids for t in rows],
        starts=[len(t.prompt_ids) for t in rows],
        mask=mask,
        rollout_logp=rollout_logp,
        rewards=rewards,
        group_index=group_index,
        rollout_index=rollout_index,
        counted=counted,
        max_response=max_response,
    )
    token_rewards = None
    if ref_logp is not None and algo.kl_in_reward and algo.kl_coef > 0:
        ref = padded([r.cpu() for r in ref_logp], width)  # [B, T]
        token_rewards = kl_token_rewards(rollout_logp, ref, mask, algo)  # [B, T]
    padded_values = padded([v.detach().cpu() for v in values], width) * mask if values is not None else None
    batch.advantages, returns = compute_advantages(
        rewards,
        mask,
        group_index,
        algo,
        values=padded_values,
        token_rewards=token_rewards,
        counted=counted,
    )  # [B, T], [B, T]
    if padded_values is not None:
        batch.old_values, batch.returns = padded_values, returns
    left_out = torch.tensor([rollouts[i].exit_status in algo.mask_exits for i in owner])  # [B] bool
    if bool(left_out.any()):  # in the baseline above, out of the loss from here on
        batch.mask[left_out] = 0.0
        batch.advantages[left_out] = 0.0
        batch.left_out = int(left_out[counted > 0].sum())
    return batch


def _shaped_rewards(rollouts: list[Trajectory], algo: AlgoConfig, max_response: int) -> torch.Tensor:
    """Each rollout's reward with its partial credit (train.patch_credit), after DAPO's overlong penalty
    and the format bonus, from its first sequence (the one the agent loop returned); ``[R]``."""
    rewards = torch.tensor([r.reward + credit_of(r.metrics) for r in rollouts], dtype=torch.float32)  # [R]
    if algo.overlong_buffer > 0:
        lengths = torch.tensor([float(sum(r.response_mask)) for r in rollouts])  # [R] model tokens
        rewards = rewards + overlong_penalty(
            lengths, max_response, algo.overlong_buffer, algo.overlong_penalty
        )
    if algo.format_reward > 0:
        errors = torch.tensor([r.metrics.get("format_errors", 0.0) for r in rollouts])  # [R]
        turns = torch.tensor([float(r.num_turns) for r in rollouts])  # [R]
        rewards = rewards + format_bonus(errors, turns, algo.format_reward)
    return rewards  # [R]


_SUMMED = ("loss", "pg_loss")  # already shares of the whole-batch objective; the rest are token means


class BatchLoss:
    """The actor's ``loss_fn`` for one batch: pads a micro-batch's logprobs and applies
    :func:`coderl.rl.compute_loss` with whole-batch normalisers (token and sequence counts of the whole
    batch; for seq-mean-token-sum-norm the run's constant ``algo.loss_norm_len``, else the batch's
    ``max_response``), so gradient accumulation over micro-batches equals one full-batch step, however
    the batch is split. Collects the step's metrics as it goes.

    The "old" policy is ``batch.old_logp`` when the batch has it (PPO mini-batches: the trainer's
    log-probs before the step's first update), else the trainer's own log-probs of this forward
    (detached), so PPO ratios start at 1 (one optimizer step per batch); the rollout-vs-trainer gap is
    reported as ``logprob_mismatch`` and corrected by truncated importance sampling (``algo.tis_cap``).
    """

    def __init__(
        self, batch: TrainBatch, algo: AlgoConfig, ref_logp: list[torch.Tensor] | None = None
    ) -> None:
        self.batch = batch
        self.algo = algo
        self.ref_logp = ref_logp
        tokens, seqs = count_normalisers(batch.mask)
        self.num_tokens, self.num_seqs = float(tokens), float(seqs)
        # seq-mean-token-sum-norm divides by a constant of the run, never by a micro-batch's padded width
        self.norm_len = float(algo.loss_norm_len or batch.max_response)
        self.sums: dict[str, float] = defaultdict(float)
        self.weight = 0.0
        self.mismatch_sum = 0.0
        self.mismatch_max = 0.0

    def __call__(
        self,
        indices: list[int],
        logprobs: list[torch.Tensor],
        entropies: list[torch.Tensor] | None,
        values: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        b = self.batch
        dev = logprobs[0].device
        rows = torch.tensor(indices, dtype=torch.long)
        width = max(len(b.trajectories[i].response_ids) for i in indices)
        mask = b.mask[rows, :width].to(dev)  # [b, T]
        logp = padded(logprobs, width)  # [b, T]
        entropy = padded(entropies, width) if entropies is not None else None  # [b, T]
        ref = padded([self.ref_logp[i] for i in indices], width) if self.ref_logp is not None else None
        rollout = b.rollout_logp[rows, :width].to(dev)  # [b, T]
        value_terms: dict[str, torch.Tensor] = {}
        if values is not None:
            if b.old_values is None or b.returns is None:
                raise ValueError(
                    "the actor has a value head but the batch has no GAE returns (algo.advantage=gae)"
                )
            value_terms = {
                "values": padded(values, width),  # [b, T]
                "old_values": b.old_values[rows, :width].to(dev),  # [b, T]
                "returns": b.returns[rows, :width].to(dev),  # [b, T]
            }
        old = logp.detach() if b.old_logp is None else b.old_logp[rows, :width].to(dev)  # [b, T]
        gap = (old - rollout).abs() * mask  # [b, T]
        self.mismatch_sum += float(gap.sum())
        self.mismatch_max = max(self.mismatch_max, float(gap.max()) if gap.numel() else 0.0)
        loss, metrics = compute_loss(
            logp,
            old,
            b.advantages[rows, :width].to(dev),
            mask,
            self.algo,
            ref_logp=ref,
            entropy=entropy,
            rollout_logp=rollout,
            num_tokens=self.num_tokens,
            num_seqs=self.num_seqs,
            max_len=self.norm_len,
            **value_terms,
        )
        share = float(mask.sum()) / max(self.num_tokens, 1.0)  # this micro-batch's share of tokens
        for key, value in metrics.items():
            self.sums[key] += value * (1.0 if key in _SUMMED else share)
        self.weight += share
        return loss

    def metric_state(self) -> dict[str, Any]:
        """What this copy collected (a rank of the sharded actor sends it back to the driver)."""
        return {"sums": dict(self.sums), "weight": self.weight, "sum": self.mismatch_sum, "max": self.mismatch_max}

    def merge_states(self, states: list[dict[str, Any]]) -> None:
        """Add what other copies collected (each rank's share of the micro-batches) to this one."""
        for state in states:
            for key, value in state["sums"].items():
                self.sums[key] += value
            self.weight += state["weight"]
            self.mismatch_sum += state["sum"]
            self.mismatch_max = max(self.mismatch_max, state["max"])

    def metrics(self) -> dict[str, float]:
        out = {k: v / (1.0 if k in _SUMMED else max(self.weight, 1e-12)) for k, v in self.sums.items()}
        out["logprob_mismatch"] = self.mismatch_sum / max(self.num_tokens, 1.0)
        out["logprob_mismatch_max"] = self.mismatch_max
        b = self.batch
        if b.old_values is not None and b.returns is not None:
            ev = explained_variance(b.old_values, b.returns, b.mask)
            if math.isfinite(ev):  # NaN when the returns do not vary (e.g. all rewards equal)
                out["explained_variance"] = ev
        return out


def merged_metrics(losses: list[BatchLoss]) -> dict[str, float]:
    """One step's metrics from the :class:`BatchLoss` of each of its mini-batches: token means weighted
    by the mini-batches' trained tokens, the objectives (loss, pg_loss) averaged, maxima the largest."""
    if len(losses) == 1:
        return losses[0].metrics()
    rows = [(x.metrics(), x.num_tokens) for x in losses]
    out: dict[str, float] = {}
    for key in {k for m, _ in rows for k in m}:
        present = [(m[key], n) for m, n in rows if key in m]
        if key.endswith("_max"):
            out[key] = max(v for v, _ in present)
        elif key in _SUMMED:
            out[key] = sum(v for v, _ in present) / len(present)
        else:
            out[key] = sum(v * n for v, n in present) / max(sum(n for _, n in present), 1e-12)
    return out


def padded(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """One row per tensor, each cut or zero-padded to ``width``: ``[len(rows), width]`` float32."""
    out = torch.zeros(
        len(rows), width, dtype=torch.float32, device=rows[0].device if rows else None
    )  # [b, T]
    for i, row in enumerate(rows):
        n = min(len(row), width)
        out[i, :n] = row[:n]
    return out
