"""One micro-batch through the policy, and how a batch splits into micro-batches and over ranks.

Owns: packing a micro-batch (:func:`coderl.train.packing.pack`), the forward that yields per-sequence
float32 log-probs (entropies, values) of the scored tokens — the packed forward with the vocabulary
projected a chunk of rows at a time, or the plain HF forward with full ``[M, V]`` logits — and the
split of a batch into micro-batches of at most ``actor.micro_batch_tokens``. Log-probs use exactly the
engine's definition (:func:`coderl.engine.sampler.token_logprobs`). Must not own parameters, an
optimizer or a loss: gradients follow the caller's grad mode.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from coderl.engine.sampler import effective_temperature, token_logprobs
from coderl.errors import ConfigError
from coderl.rl import entropy_from_logits
from coderl.train.config import ActorConfig
from coderl.train.packing import PackedDecoder, pack, padded_logits, prefix_sources, split_micro_batches
from coderl.train.policy_model import PolicyModel


class Forwarded(NamedTuple):
    """Per-sequence tensors of one micro-batch's scored tokens, and the tokens it forwarded."""

    logprobs: list[torch.Tensor]  # [n_i] each
    entropy: list[torch.Tensor] | None
    values: list[torch.Tensor] | None
    tokens: int  # forwarded, padding included without packing


def forward_micro_batch(
    policy: PolicyModel,
    cfg: ActorConfig,
    model: Any,
    decoder: PackedDecoder,
    sequences: list[list[int]],
    starts: list[int],
    temperature: float,
    with_entropy: bool,
    with_values: bool = False,
    score_masks: list[list[int]] | None = None,
) -> Forwarded:
    """``model`` (the policy or its reference, see :meth:`PolicyModel.forwarded`) over one micro-batch.
    With ``score_masks`` only the masked-in tokens reach the vocabulary projection; the others get 0."""
    device = policy.device
    batch = pack(sequences, starts, device, share_prefix=cfg.packing and cfg.share_prefix)
    keep = kept_rows(score_masks, batch.counts, device)
    if batch.scored_rows.numel() == 0:
        empty = [torch.zeros(0, device=device) for _ in sequences]
        return Forwarded(
            empty,
            [e.clone() for e in empty] if with_entropy else None,
            [e.clone() for e in empty] if with_values else None,
            batch.num_tokens,
        )
    values: torch.Tensor | None = None
    targets = batch.targets if keep is None else batch.targets[keep]  # [M or K]
    with policy.autocast():
        if cfg.packing:  # the vocabulary projection a chunk of rows at a time (coderl.train.vocab)
            checkpointing = cfg.gradient_checkpointing and model is policy.hf
            hidden, logprobs, entropy = decoder.entry(
                batch, keep, checkpointing, temperature, with_entropy, cfg.vocab_chunk
            )  # [M, E], [M or K], [M or K] or None
            forwarded = batch.num_tokens
        else:  # the plain HF forward: full [M, V] logits (the packing benchmark's baseline)
            logits, forwarded = padded_logits(model, sequences, starts, device)  # [M, V]
            logits = (logits if keep is None else logits[keep]).float()  # [M or K, V]
            logprobs = token_logprobs(logits, targets, temperature)  # [M or K]
            entropy = (  # [M or K]
                entropy_from_logits(logits / effective_temperature(temperature)) if with_entropy else None
            )
    if with_values:  # float32, outside autocast: a scalar regression head is cheap and precision-hungry
        assert policy.value_head is not None and cfg.packing
        values = policy.value_head(hidden.float())[:, 0]  # [M]
    if keep is not None:  # back to one value per scored token, 0 where masked out
        zeros = torch.zeros(keep.shape[0], device=device)  # [M]
        logprobs = zeros.masked_scatter(keep, logprobs)
        entropy = zeros.masked_scatter(keep, entropy) if entropy is not None else None
    return Forwarded(
        list(logprobs.split(batch.counts)),
        list(entropy.split(batch.counts)) if entropy is not None else None,
        list(values.split(batch.counts)) if values is not None else None,
        forwarded,
    )


def kept_rows(score_masks: list[list[int]] | None, counts: list[int], device: torch.device) -> torch.Tensor | None:
    """The ``[M]`` boolean mask of scored rows ``score_masks`` keeps (None: all of them)."""
    if score_masks is None:
        return None
    lengths = [len(m) for m in score_masks]
    if lengths != counts:
        raise ConfigError(
            f"score_masks: lengths {lengths[:4]} do not match the scored tokens {counts[:4]}; give one "
            "0/1 per token of sequences[i][starts[i]:]"
        )
    return torch.tensor([bool(b) for m in score_masks for b in m], dtype=torch.bool, device=device)


def micro_batch_groups(cfg: ActorConfig, sequences: list[list[int]], starts: list[int]) -> list[list[int]]:
    """The batch's micro-batches (indices into it) of at most ``cfg.micro_batch_tokens`` forwarded tokens
    (sequences sharing a prompt stay together when ``share_prefix`` forwards it once)."""
    lengths = [len(s) for s in sequences]
    sharing = cfg.packing and cfg.share_prefix
    sources = prefix_sources(sequences, starts) if sharing else None
    return split_micro_batches(lengths, cfg.micro_batch_tokens, padded=not cfg.packing, sources=sources)


def rank_share(groups: list[list[int]], rank: int, world: int) -> list[list[int]]:
    """Rank ``rank``'s micro-batches: every world-th, from its rank on; ranks with one fewer get an
    empty group at the end (a dummy pass: FSDP's gathers and reductions are collectives)."""
    if world == 1:
        return groups
    mine = groups[rank::world]
    return mine + [[]] * (-(-len(groups) // world) - len(mine))
