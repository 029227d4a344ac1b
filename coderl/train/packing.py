"""Packed (padding-free) forward of a Hugging Face decoder with autograd, and micro-batch splitting.

All tokens of a micro-batch are flattened into one ``[N, hidden]`` matrix, so every projection and
MLP runs as one matmul over exactly the N real tokens; only attention runs per sequence (causal).
The projections and rotary embeddings are the engine's (:mod:`coderl.engine.decoder`, shared with
:class:`coderl.engine.runner.ModelRunner`, whose inference forward this mirrors without the KV
cache): the model's own modules are called, so the numerics match the HF forward and peft's LoRA
layers, which wrap those modules, work unchanged.

A sequence of L tokens with scoring start s is forwarded as its first L - 1 tokens (the last token
predicts nothing that is scored); the hidden states at positions s - 1 .. L - 2 predict tokens
s .. L - 1, and only those rows ever reach the vocabulary projection.

Shared prefixes (``share_prefix``): the samples of one task (a GRPO group) repeat the same prompt,
samples of different tasks its system prompt, and the sequences of one rollout whose agent rewrote its
history (each a sequence of its own, :mod:`coderl.proxy.merge`) the history up to the rewrite. Within a
micro-batch, a sequence reuses the longest prefix it has in common with one of the sequences before it
(at most its own unscored tokens 0 .. s - 2): those tokens are not forwarded again, and its remaining
tokens form a segment that attends to the reused rows (wherever the earlier sequence's layout holds
them: its own segment, or rows it reused in turn) and causally to itself, at the positions they would
have had. Autograd sums the gradients the sequences send through the shared rows, so the result is the
unshared computation's, up to float rounding; for a group of G samples with prompt P and responses R,
the forward shrinks from G (P + R) to P + G R tokens, and a rollout of K sequences each rewriting the
last message of a growing history forwards that history about once instead of K times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from coderl.engine.decoder import AttentionShape, project_qkv, rotary
from coderl.errors import ConfigError
from coderl.tokens import common_prefix
from coderl.train.vocab import DEFAULT_CHUNK, chunked_logprobs

Range = tuple[int, int]
Span = tuple[int, int, tuple[Range, ...] | None]


@dataclass
class PackedBatch:
    """One micro-batch, flattened. ``spans[i]`` is sequence i's [start, end) in the flat tokens."""

    input_ids: torch.Tensor  # [N]
    positions: torch.Tensor  # [N]
    spans: list[Span]
    """(start, end, prefix): a segment's flat rows, and the flat [start, end) ranges of the shared
    prefix it attends to (in position order; None: none)."""
    scored_rows: torch.Tensor  # [M]  flat rows whose hidden state predicts a scored token
    targets: torch.Tensor  # [M]  the scored tokens
    counts: list[int]  # scored tokens per sequence (sum = M)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])


def check_batch(sequences: list[list[int]], starts: list[int]) -> None:
    """Raise ConfigError unless every start is in [1, len(sequence)]."""
    if len(sequences) != len(starts):
        raise ConfigError(
            f"got {len(sequences)} sequences but {len(starts)} starts; pass one start per sequence"
        )
    for i, (seq, start) in enumerate(zip(sequences, starts, strict=True)):
        if not 1 <= start <= len(seq):
            raise ConfigError(
                f"sequence {i} has {len(seq)} tokens and start {start}; a start must be in [1, len] "
                "(the first token has no context to be scored from)"
            )


MIN_SHARED_PREFIX = 16
"""Shortest prefix worth reusing."""
WINDOW = 32
"""How many sequences before it a sequence looks back at for a prefix to reuse."""

Source = tuple[int, int]
"""(j, n): a sequence's first n tokens are those of the earlier sequence j (-1, 0: none)."""


def prefix_sources(sequences: list[list[int]], starts: list[int]) -> list[Source]:
    """For each sequence, the earlier sequence (among the :data:`WINDOW` before it) with which it
    shares the longest prefix, and that prefix's length: within its own unscored tokens (before
    ``start - 1``) and the other's forwarded ones (all but its last); (-1, 0) under
    :data:`MIN_SHARED_PREFIX`. The nearest wins a tie."""
    out: list[Source] = []
    for i, seq in enumerate(sequences):
        best: Source = (-1, 0)
        for j in range(i - 1, max(i - 1 - WINDOW, -1), -1):
            other = sequences[j]
            n = min(common_prefix(seq, other), starts[i] - 1, len(other) - 1)
            if n > best[1]:
                best = (j, n)
        out.append(best if best[1] >= MIN_SHARED_PREFIX else (-1, 0))
    return out


def _first(ranges: list[Range], n: int) -> list[Range]:
    """The flat ranges that hold the first ``n`` tokens of a sequence laid out as ``ranges``."""
    out: list[Range] = []
    for a, b in ranges:
        if n <= 0:
            break
        out.append((a, min(b, a + n)))
        n -= b - a
    return out


def pack(
    sequences: list[list[int]], starts: list[int], device: torch.device, share_prefix: bool = False
) -> PackedBatch:
    """Flatten sequences (each without its last token) and index the rows that predict scored tokens;
    with ``share_prefix``, a prefix a sequence shares with one before it is not laid out again (module doc)."""
    flat: list[int] = []
    positions: list[int] = []
    spans: list[Span] = []
    rows: list[int] = []
    targets: list[int] = []
    counts: list[int] = []
    sources = prefix_sources(sequences, starts) if share_prefix else [(-1, 0)] * len(sequences)
    layout: list[list[Range]] = []  # per sequence: the flat ranges holding its forwarded tokens, in order
    for (seq, start), (j, n) in zip(zip(sequences, starts, strict=True), sources, strict=True):
        prefix = _first(layout[j], n) if j >= 0 else []
        begin = len(flat)
        flat.extend(seq[n:-1])
        positions.extend(range(n, len(seq) - 1))
        spans.append((begin, len(flat), tuple(prefix) or None))
        layout.append([*prefix, (begin, len(flat))])
        rows.extend(range(begin + start - 1 - n, begin + len(seq) - 1 - n))
        targets.extend(seq[start:])
        counts.append(len(seq) - start)
    return PackedBatch(
        input_ids=torch.tensor(flat, dtype=torch.long, device=device),
        positions=torch.tensor(positions, dtype=torch.long, device=device),
        spans=spans,
        scored_rows=torch.tensor(rows, dtype=torch.long, device=device),
        targets=torch.tensor(targets, dtype=torch.long, device=device),
        counts=counts,
    )


def split_micro_batches(
    lengths: list[int], budget: int, padded: bool = False, sources: list[Source] | None = None
) -> list[list[int]]:
    """Group consecutive sequence indices so each group's forwarded tokens fit ``budget``.

    Packed groups count real tokens (less the prefix a sequence reuses from one before it in the same
    group, ``sources`` from :func:`prefix_sources`); padded groups count rows x longest row (what is
    computed). A sequence longer than the budget gets a group of its own.
    """
    groups: list[list[int]] = []
    current: list[int] = []
    used = longest = 0
    for i, length in enumerate(lengths):
        full = max(length - 1, 0)  # the last token is not forwarded
        # a sequence whose prefix is already in this micro-batch adds only the rest
        j, shared = sources[i] if sources is not None else (-1, 0)
        n = full - shared if current and j >= current[0] else full
        cost = (len(current) + 1) * max(longest, n) if padded else used + n
        if current and cost > budget:
            groups.append(current)
            current, used, longest, n = [], 0, 0, full
        current.append(i)
        used += n
        longest = max(longest, full)
    if current:
        groups.append(current)
    return groups


def padded_logits(
    model: Any, sequences: list[list[int]], starts: list[int], device: torch.device
) -> tuple[torch.Tensor, int]:
    """The baseline: one right-padded plain HF forward (logits at every position, padding included).

    Returns the logits of the scored rows ``[M, V]`` (same rows as :func:`pack`) and the tokens computed.
    """
    width = max(len(s) - 1 for s in sequences)
    ids = torch.zeros((len(sequences), width), dtype=torch.long)  # [B, W]
    mask = torch.zeros((len(sequences), width), dtype=torch.long)  # [B, W]
    for i, seq in enumerate(sequences):
        ids[i, : len(seq) - 1] = torch.tensor(seq[:-1], dtype=torch.long)
        mask[i, : len(seq) - 1] = 1
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)
    rows = [
        out.logits[i, start - 1 : len(seq) - 1]  # [n_i, V]
        for i, (seq, start) in enumerate(zip(sequences, starts, strict=True))
    ]
    return torch.cat(rows, dim=0), len(sequences) * width  # [M, V]


class PackedDecoder:
    """Forward of a transformers Llama-family causal LM over a :class:`PackedBatch`, keeping autograd.

    ``model`` is the plain HF model (``LlamaForCausalLM``), possibly with peft LoRA layers injected.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.layers = list(model.model.layers)
        self.shape = AttentionShape.of(model)
        self.calls: list[Callable[..., torch.Tensor]] = [partial(self._layer, layer) for layer in self.layers]
        """What forwards each decoder layer, ``(hidden, cos, sin, spans) -> hidden``: the layer's own
        computation, or (sharded actor) the same wrapped in FSDP's gather/reshard hooks."""
        self.entry: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = self.scored
        """What the actor calls: :meth:`scored`, or (sharded actor) the same wrapped in FSDP's hooks of
        the root unit (embeddings, final norm, lm_head)."""

    def scored(
        self,
        batch: PackedBatch,
        keep: torch.Tensor | None,
        gradient_checkpointing: bool,
        temperature: float,
        with_entropy: bool,
        chunk: int = DEFAULT_CHUNK,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Hidden states of the scored rows ``[M, E]``, and the float32 log-probs of their targets (and
        entropies, ``with_entropy``) ``[K]`` for the rows ``keep`` selects (``[M]`` booleans; None: all M
        rows), through the lm_head ``chunk`` rows at a time (:mod:`coderl.train.vocab`)."""
        hidden = self.hidden(batch, gradient_checkpointing)  # [M, E]
        rows, targets = (hidden, batch.targets) if keep is None else (hidden[keep], batch.targets[keep])
        head = self.model.lm_head
        if getattr(head, "bias", None) is not None or not isinstance(head, torch.nn.Linear):
            raise ConfigError("the packed forward needs a plain linear lm_head without bias")
        logprobs, entropy = chunked_logprobs(rows, head.weight, targets, temperature, with_entropy, chunk)
        return hidden, logprobs, entropy  # [M, E], [K], [K] or None

    def hidden(self, batch: PackedBatch, gradient_checkpointing: bool = False) -> torch.Tensor:
        """Final-normed hidden states of the scored rows ``[M, E]`` (input of the lm_head)."""
        inner = self.model.model
        hidden = inner.embed_tokens(batch.input_ids)  # [N, E]
        cos, sin = rotary(self.model, hidden, batch.positions)  # [N, 1, D] each
        for call in self.calls:
            if gradient_checkpointing and torch.is_grad_enabled():
                hidden = checkpoint(call, hidden, cos, sin, batch.spans, use_reentrant=False)
            else:
                hidden = call(hidden, cos, sin, batch.spans)
        return inner.norm(hidden[batch.scored_rows])  # [M, E]

    def _layer(
        self,
        layer: Any,
        hidden: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        spans: list[Span],
    ) -> torch.Tensor:
        n_tok = hidden.shape[0]
        attn = layer.self_attn
        q, k, v = project_qkv(attn, layer.input_layernorm(hidden), cos, sin, self.shape)  # [N, H|KVH, D]
        outs = [self._attend(q, k, v, start, end, prefix) for start, end, prefix in spans if end > start]
        out = (
            torch.cat(outs, dim=0) if outs else q.new_zeros((0, self.shape.heads, self.shape.head_dim))
        )  # [N, H, D]
        hidden = hidden + attn.o_proj(out.reshape(n_tok, self.shape.heads * self.shape.head_dim))  # [N, E]
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))  # [N, E]

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        start: int,
        end: int,
        prefix: tuple[Range, ...] | None,
    ) -> torch.Tensor:
        """Attention of one segment's rows ``[n, H, D]``: causal over itself, after a shared prefix
        (every prefix key visible) when it has one."""
        keys, values = k[start:end], v[start:end]  # [n, KVH, D]
        mask: torch.Tensor | None = None
        if prefix is not None:
            keys = torch.cat([*(k[a:b] for a, b in prefix), keys])  # [P + n, KVH, D]
            values = torch.cat([*(v[a:b] for a, b in prefix), values])  # [P + n, KVH, D]
            n, p = end - start, sum(b - a for a, b in prefix)
            mask = torch.ones(n, p + n, dtype=torch.bool, device=q.device)  # [n, P + n]
            mask[:, p:] = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        return F.scaled_dot_product_attention(  # 4-D like HF's call: the 3-D kernel rounds differently
            q[None, start:end].transpose(1, 2),  # [1, H, n, D]
            keys[None].transpose(1, 2),  # [1, KVH, S, D]
            values[None].transpose(1, 2),  # [1, KVH, S, D]
            attn_mask=mask,
            is_causal=mask is None and end - start > 1,
            scale=self.shape.scale,
            enable_gqa=self.shape.heads != self.shape.kv_heads,
        )[0].transpose(0, 1)  # [n, H, D]
