"""One forward pass of a Hugging Face decoder over a ragged batch, with per-sequence KV caches.

All new tokens of a step (whole or partial prompts being prefilled, and one token per decoding
sequence) are flattened into one ``[N, hidden]`` matrix, so every projection and MLP runs as one
matmul. Attention runs per prompt chunk against that sequence's cache; decoding sequences attend
either one by one (their caches are tensors of their own) or, when their caches are rows of one
:class:`~coderl.engine.kv_cache.KVRows`, all in one attention call over the padded rows. A step in
which every sequence decodes can then be replayed as a CUDA graph (:mod:`coderl.engine.cuda_graphs`).
Requests join and leave the batch at every step either way.

Supported: the Llama family as implemented in transformers (:mod:`coderl.engine.decoder`, whose
projection and rotary embedding the trainer's packed forward shares). The model's own modules are
used, so the numerics match the Hugging Face forward pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from coderl.engine.decoder import AttentionShape, project_qkv, rotary, unsupported_reason
from coderl.engine.kv_cache import KVLayout, KVRows, SequenceKV
from coderl.engine.packed import PackedLinear
from coderl.engine.row_probe import Linear, distinct_shapes, least_rows
from coderl.errors import EngineError


@dataclass
class Chunk:
    """New tokens of one sequence in this step; their KV is written at ``kv.length`` onwards."""

    kv: SequenceKV
    token_ids: list[int]
    want_logits: bool
    logit_rows: int = 1
    """With ``want_logits``: logits of this many last tokens (a speculative draft's verification
    wants one row per draft token and one after it)."""


Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""Attention of one layer: (layer index, q ``[N, H, D]``, k, v ``[N, KVH, D]``) -> output ``[N, H, D]``."""


class DecodeStep(Protocol):
    """Runs a decode-only step (a CUDA graph replay, say) in place of the eager forward."""

    def __call__(self, ids: list[int], positions: list[int], rows: list[int]) -> torch.Tensor: ...


class ModelRunner:
    """Stateless forward over chunks; the caches it writes belong to the caller."""

    def __init__(self, model: Any) -> None:
        """``model``: a transformers causal LM of a supported family (weights are used in place)."""
        cfg = model.config
        reason = unsupported_reason(cfg)
        if reason is not None:
            raise EngineError(
                f"the embedded engine cannot run this model: {reason} (serve it with vLLM or SGLang: engine.type=http)"
            )
        self.model = model
        inner = model.model
        self.embed = inner.embed_tokens
        self.layers = list(inner.layers)
        self.norm = inner.norm
        self.lm_head = model.lm_head
        self.shape = AttentionShape.of(model)
        self.vocab_size = int(cfg.vocab_size)
        self.max_position = int(getattr(cfg, "max_position_embeddings", 4096))
        param = next(model.parameters())
        self.dtype = param.dtype
        self.device = param.device
        packed = any(isinstance(m, PackedLinear) for m in model.modules())  # a row the same bits at any count
        self.least_rows = 1 if packed else LEAST_ROWS.get(self.dtype, ROW_BLOCK)  # an invariant segment's fewest
        self.row_block = PACKED_ROW_BLOCK if packed else ROW_BLOCK  # and its most
        # (until measure_invariance() measures this machine's kernels: the engine does, batch-invariant)

    def measure_invariance(self) -> bool:
        """Set :attr:`least_rows` to what this machine's kernels need (:mod:`coderl.engine.row_probe`):
        the fewest rows from which each projection gives a row the same bits at every count up to
        :attr:`row_block` (the vocabulary projection: up to :data:`ROW_BLOCK`). False where no padding
        does; then :attr:`least_rows` is :data:`ROW_BLOCK` and a row's bits may still depend on the step."""
        projections: list[torch.nn.Linear | PackedLinear] = [
            m for layer in self.layers for m in layer.modules() if isinstance(m, torch.nn.Linear | PackedLinear)
        ]
        probed: list[tuple[Linear, int, int]] = [
            (m, int(m.weight.shape[1]), self.row_block) for m in distinct_shapes(projections)
        ]
        probed.append((_vocab_probe(self.lm_head), int(self.lm_head.weight.shape[1]), ROW_BLOCK))
        least = least_rows(probed, self.dtype, self.device)
        self.least_rows = ROW_BLOCK if least is None else least
        return least is not None

    def layout(self) -> KVLayout:
        return KVLayout(len(self.layers), self.shape.kv_heads, self.shape.head_dim, self.dtype, self.device)

    @torch.inference_mode()
    def forward(
        self, chunks: list[Chunk], decode_step: DecodeStep | None = None, invariant: bool = False
    ) -> torch.Tensor:
        """Run the chunks, append their tokens to their caches, return float32 logits ``[S, vocab]``
        for the last ``logit_rows`` tokens of each chunk with ``want_logits`` (in chunk order).

        ``decode_step``, when given, runs the steps in which every chunk decodes one token of a
        sequence living in the KV rows (and wants its logits). ``invariant``: the projections one
        call per row segment (:func:`_invariant_segments`), so each token's numbers are the same bits
        whatever other chunks share the step (``engine.batch_invariant``; the caller keeps each sequence's
        prefill pieces the same).
        """
        for chunk in chunks:
            chunk.kv.reserve(chunk.kv.length + len(chunk.token_ids))
        if decode_step is not None and not invariant and chunks and all(_batched(c) and c.want_logits for c in chunks):
            logits = decode_step(
                [c.token_ids[0] for c in chunks], [c.kv.length for c in chunks], [c.kv.row for c in chunks]
            )
            for chunk in chunks:
                chunk.kv.tokens.extend(chunk.token_ids)
            return logits
        flat: list[int] = []
        positions: list[int] = []
        spans: list[tuple[int, int, int]] = []  # (start, end, past) per chunk
        for chunk in chunks:
            past = chunk.kv.length
            start = len(flat)
            flat.extend(chunk.token_ids)
            positions.extend(range(past, past + len(chunk.token_ids)))
            spans.append((start, len(flat), past))
        dev = self.device
        ids = torch.tensor(flat, dtype=torch.long, device=dev)  # [N]
        pos = torch.tensor(positions, dtype=torch.long, device=dev)  # [N]
        alone = [(c, span) for c, span in zip(chunks, spans, strict=True) if not _batched(c)]
        together = [(c, span) for c, span in zip(chunks, spans, strict=True) if _batched(c)]
        rows = together[0][0].kv.rows if together else None
        if together:
            idx = torch.tensor([start for _, (start, _, _) in together], dtype=torch.long, device=dev)  # [B]
            row_ids = torch.tensor([c.kv.row for c, _ in together], dtype=torch.long, device=dev)  # [B]
            row_pos = pos[idx]  # [B]
            span_t = max(past for _, (_, _, past) in together) + 1
            row_mask = _row_mask(row_pos, span_t)  # [B, 1, 1, T]
        shape = self.shape
        masks = [
            _few_mask(end - start, past, shape.heads // shape.kv_heads, dev)
            if past and 1 < end - start <= FEW
            else self._mask(end - start, past)
            for _, (start, end, past) in alone
        ]

        def attend(li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(q)  # [N, H, D]
            if rows is not None:
                assert rows.data is not None
                out[idx] = _attend_rows(
                    rows.data[li], q[idx], k[idx], v[idx], row_ids, row_pos, row_mask, shape
                )
            for (chunk, (start, end, past)), mask in zip(alone, masks, strict=True):
                data = chunk.kv.data
                assert data is not None
                total = past + end - start
                data[li, 0, :, past:total] = k[start:end].transpose(0, 1)  # [KVH, n, D]
                data[li, 1, :, past:total] = v[start:end].transpose(0, 1)  # [KVH, n, D]
                if end - start == 1:  # one decoding token: its query heads as G queries per KV head
                    out[start] = _attend_one(q[start], data[li, 0, :, :total], data[li, 1, :, :total], shape)
                    continue
                if past and end - start <= FEW:  # a draft being verified, or a short continuation
                    assert mask is not None
                    out[start:end] = _attend_few(
                        q[start:end], data[li, 0, :, :total], data[li, 1, :, :total], mask, shape
                    )
                    continue
                # 4-D, as the trainer's call: the CPU takes its flash kernel (3-D inputs take the math
                # kernel, which copies bf16 to float32 and builds the scores: 7-14x slower on 2 cores)
                out[start:end] = F.scaled_dot_product_attention(
                    q[start:end].transpose(0, 1)[None],  # [1, H, n, D]
                    data[li, 0, :, :total][None],  # [1, KVH, T, D]
                    data[li, 1, :, :total][None],  # [1, KVH, T, D]
                    attn_mask=mask,
                    is_causal=mask is None and end - start > 1,
                    scale=shape.scale,
                    enable_gqa=shape.heads != shape.kv_heads,
                )[0].transpose(0, 1)  # [n, H, D]
            return out

        segments = _invariant_segments([end - start for start, end, _ in spans], self.row_block) if invariant else None
        hidden = self._layers(self.embed(ids), pos, attend, segments)  # [N, E]
        rows_out = [
            row
            for chunk, (start, end, _) in zip(chunks, spans, strict=True)
            if chunk.want_logits
            for row in range(max(start, end - chunk.logit_rows), end)
        ]
        for chunk in chunks:
            chunk.kv.tokens.extend(chunk.token_ids)
        if not rows_out:
            return torch.empty((0, self.vocab_size), dtype=torch.float32, device=dev)
        last = hidden[torch.tensor(rows_out, dtype=torch.long, device=dev)]  # [S, E]
        return self.vocab_logits(self.norm(last), invariant)  # [S, V]

    def vocab_logits(self, hidden: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        """float32 logits ``[S, V]`` of normed hidden states ``[S, E]``; ``invariant``: in blocks of at
        most :data:`ROW_BLOCK` rows, each of at least the dtype's :data:`LEAST_ROWS` (:meth:`forward`)."""
        if not invariant or self.least_rows <= hidden.shape[0] <= ROW_BLOCK:
            return self.lm_head(hidden).float()
        return torch.cat([_at_least(self.lm_head, self.least_rows, part)[0].float() for part in hidden.split(ROW_BLOCK)])

    def decode_rows(
        self, rows: KVRows, ids: torch.Tensor, pos: torch.Tensor, row_ids: torch.Tensor, span: int
    ) -> torch.Tensor:
        """One decode step of ``B`` sequences living in ``rows``: token ``ids[b]`` at position
        ``pos[b]`` of row ``row_ids[b]``, attending over the first ``span`` positions of the rows.
        Only fixed-shape tensor work (no host sync), so a CUDA graph can capture it. Returns float32
        logits ``[B, V]``; the caller appends the tokens to their sequences."""
        mask = _row_mask(pos, span)  # [B, 1, 1, T]
        shape = self.shape

        def attend(li: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            assert rows.data is not None
            return _attend_rows(rows.data[li], q, k, v, row_ids, pos, mask, shape)

        hidden = self._layers(self.embed(ids), pos, attend)  # [B, E]
        return self.lm_head(self.norm(hidden)).float()  # [B, V]

    def _layers(
        self, hidden: torch.Tensor, pos: torch.Tensor, attend: Attend, segments: list[int] | None = None
    ) -> torch.Tensor:
        """The decoder layers over flat tokens ``hidden`` ``[N, E]`` at positions ``pos`` ``[N]``;
        ``segments``: the row-wise work (rotary tables, projections, norms, MLP) one call per segment
        of rows (:func:`_invariant_segments`), not one over all of them."""
        least = self.least_rows
        rows = segments if segments is not None and (len(segments) > 1 or segments[0] < least) else None
        if rows is not None:  # element-wise, but split among threads by the whole count: per segment too
            cos, sin = _in_segments(partial(rotary, self.model), rows, hidden, pos, least=least)
        else:
            cos, sin = rotary(self.model, hidden, pos)  # [N, 1, D] each
        for li, layer in enumerate(self.layers):
            if rows is not None:
                q, k, v = _in_segments(partial(self._qkv, layer), rows, hidden, cos, sin, least=least)
                (hidden,) = _in_segments(
                    partial(self._after_attention, layer), rows, hidden, attend(li, q, k, v), least=least
                )
            else:
                q, k, v = self._qkv(layer, hidden, cos, sin)
                hidden = self._after_attention(layer, hidden, attend(li, q, k, v))
        return hidden

    def _qkv(self, layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """A layer's queries, keys and values of rows ``x`` ``[n, E]``: ``[n, H|KVH, D]``."""
        return project_qkv(layer.self_attn, layer.input_layernorm(x), cos, sin, self.shape)

    def _after_attention(self, layer: Any, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """A layer's output projection and MLP, with their residuals, for rows ``x`` ``[n, E]`` given
        their attention output ``[n, H, D]``."""
        shape = self.shape
        x = x + layer.self_attn.o_proj(attended.reshape(x.shape[0], shape.heads * shape.head_dim))  # [n, E]
        return x + layer.mlp(layer.post_attention_layernorm(x))  # [n, E]

    def _mask(self, n_new: int, past: int) -> torch.Tensor | None:
        """Attention mask of ``n_new`` queries over ``past + n_new`` keys; None where SDPA's own
        (no mask for one query, is_causal for a fresh prompt) is exact."""
        if n_new == 1 or past == 0:
            return None
        q_pos = torch.arange(past, past + n_new, device=self.device)[:, None]  # [n, 1]
        k_pos = torch.arange(past + n_new, device=self.device)[None, :]  # [1, T]
        return k_pos <= q_pos  # [n, T]


ROW_BLOCK = 32
"""Most rows a projection takes at once in a batch-invariant step (:meth:`ModelRunner.forward`).
Measured on one CPU (oneDNN, bfloat16, each of SmolLM2-135M's projection shapes): a row's result is the
same bits at 1 to 32 rows as alone, and past 32 some rows' differ with the row count (at 513 rows, 34
of the down projection's; the vocabulary projection's at 33 to 301)."""


PACKED_ROW_BLOCK = 2048
"""Most rows a projection takes at once in a batch-invariant step when the linear layers are packed for
oneDNN (:mod:`coderl.engine.packed`): there a row came out the same bits at every count up to 2,100 (on
an AVX2 and an AVX-512 CPU, from the padding :meth:`ModelRunner.measure_invariance` finds: 1 and 2), so
the decoding tokens and drafts of a whole step go in one call, not per 32."""


def _invariant_segments(lengths: list[int], block: int = ROW_BLOCK) -> list[int]:
    """Row segments of a batch-invariant step whose chunks have ``lengths`` new tokens, in order: a
    chunk longer than ``block`` (a prefill piece, the same rows whatever shares the step) is a
    segment of its own; runs of shorter ones (decoding tokens, drafts, packed: prefill pieces) go in
    blocks of at most ``block`` rows, where every row comes out as it would alone."""
    segments: list[int] = []
    run = 0
    for n in [*lengths, None]:
        if n is not None and n <= block:
            run += n
            continue
        segments += [block] * (run // block) + ([run % block] if run % block else [])
        run = 0
        if n is not None:
            segments.append(n)
    return segments


LEAST_ROWS = {torch.bfloat16: 1}
"""The fewest rows a batch-invariant segment's projections take, by dtype, until
:meth:`ModelRunner.measure_invariance` measures this machine's kernels (the embedded engine does when it
starts batch-invariant on the CPU); a shorter segment is padded with zero rows (its own rows' results
kept). What was measured (each of SmolLM2-135M's projection shapes) differs by CPU: on an AVX2 CPU (AMD
EPYC, Zen 3) oneDNN gave a row the same bits from 1 row up in bfloat16 and packed float32, MKL's float32
from 12 rows (2 threads; not at 1, a matrix-vector kernel); on an AVX-512 CPU (AMD EPYC, Zen 4) the down
projection's lone row took other bits in both oneDNN dtypes, 2 rows and more matched. Unmeasured, float32
on MKL (and any other dtype) pads to :data:`ROW_BLOCK`, packed layers take 1."""


VOCAB_PROBE_ROWS = 4096
"""Output rows of the vocabulary projection's weight its invariance probe uses: the whole of it (49,152
rows at SmolLM2's size) would make the probe ~10x slower, and a row's bits follow the reduction over the
inputs, which the output count does not change."""


def _vocab_probe(lm_head: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """A projection like ``lm_head`` (packed where it is) over the first :data:`VOCAB_PROBE_ROWS` rows of
    its weight, for :meth:`ModelRunner.measure_invariance`."""
    weight = lm_head.weight.detach()[:VOCAB_PROBE_ROWS]
    part = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device=weight.device, dtype=weight.dtype)
    part.weight = torch.nn.Parameter(weight, requires_grad=False)
    return PackedLinear(part) if isinstance(lm_head, PackedLinear) else part


def _at_least(fn: Callable[..., Any], least: int, *parts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``fn(*parts)`` (tensors of the same rows) with fewer than ``least`` rows padded by zero rows; the
    outputs of the real rows, as a tuple."""
    n = parts[0].shape[0]
    if n < least:
        parts = tuple(torch.cat([p, p.new_zeros((least - n, *p.shape[1:]))]) for p in parts)
    out = fn(*parts)
    outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
    return outs if n >= least else tuple(o[:n] for o in outs)


def _in_segments(
    fn: Callable[..., Any], segments: list[int], *xs: torch.Tensor, least: int = 1
) -> tuple[torch.Tensor, ...]:
    """``fn`` over the row ``segments`` of ``xs`` (the same rows of each; a segment of fewer than
    ``least`` rows padded to it, :func:`_at_least`), its outputs concatenated."""
    outs = [_at_least(fn, least, *parts) for parts in zip(*(x.split(segments) for x in xs), strict=True)]
    return tuple(torch.cat(list(parts)) for parts in zip(*outs, strict=True))


FEW = 32
"""Most new tokens of a sequence with a cache that attend through :func:`_attend_few` (the query heads
grouped per key/value head, one mask per step) rather than SDPA with ``enable_gqa``, which on the CPU
repeats the cache per query head."""


def _batched(chunk: Chunk) -> bool:
    """Whether this chunk decodes one token of a sequence living in the batch's KV rows."""
    return chunk.kv.rows is not None and len(chunk.token_ids) == 1


def _row_mask(pos: torch.Tensor, span: int) -> torch.Tensor:
    """``[B, 1, 1, span]``: key position ``t`` is visible to the query at ``pos[b]`` iff ``t <= pos[b]``."""
    keys = torch.arange(span, device=pos.device)  # [T]
    return (keys[None, :] <= pos[:, None])[:, None, None, :]


def _attend_one(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, shape: AttentionShape) -> torch.Tensor:
    """Attention of one new token over its whole cache: q ``[H, D]``, keys / values ``[KVH, T, D]`` ->
    ``[H, D]``. The ``G = H / KVH`` query heads sharing a key/value head go in as ``G`` queries of it
    (HF's ``repeat_kv`` order), so the cache is read once instead of repeated G times (SDPA's
    ``enable_gqa`` on the CPU copies it, and its math kernel copies bf16 to float32: 7x slower at 1,000
    cached tokens for SmolLM2's 9 / 3 heads in float32, 8x in bf16)."""
    groups = shape.heads // shape.kv_heads
    queries = q.view(1, shape.kv_heads, groups, shape.head_dim)  # [1, KVH, G, D]
    out = F.scaled_dot_product_attention(  # 4-D without a mask: the CPU's flash kernel, no float32 copies of bf16
        queries, keys[None], values[None], scale=shape.scale
    )  # [1, KVH, G, D]
    return out.reshape(shape.heads, shape.head_dim)  # [H, D]


def _few_mask(n: int, past: int, groups: int, device: torch.device) -> torch.Tensor:
    """:func:`_attend_few`'s mask: ``[1, 1, n * G, past + n]``, query ``i * G + g`` (new token ``i``)
    sees keys ``0 .. past + i``."""
    q_pos = torch.arange(past, past + n, device=device).repeat_interleave(groups)  # [nG]
    return (torch.arange(past + n, device=device)[None, :] <= q_pos[:, None])[None, None]


def _attend_few(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, shape: AttentionShape
) -> torch.Tensor:
    """Attention of ``n`` new tokens at positions ``past ..`` over their cache, causal among
    themselves (``mask`` from :func:`_few_mask`): q ``[n, H, D]``, keys / values ``[KVH, past + n, D]``
    -> ``[n, H, D]``. The query heads sharing a key/value head go in together (``n * G`` queries per
    key/value head, as in :func:`_attend_one`), so the cache is read once, and SDPA takes the 4-D
    grouped shape with its mask without repeating the cache (with n up to 5 on 2 CPU cores it cost
    about what one decoding token's attention does)."""
    n = q.shape[0]
    groups = shape.heads // shape.kv_heads
    queries = q.view(n, shape.kv_heads, groups, shape.head_dim).permute(1, 0, 2, 3)  # [KVH, n, G, D]
    queries = queries.reshape(1, shape.kv_heads, n * groups, shape.head_dim)  # [1, KVH, nG, D]
    out = F.scaled_dot_product_attention(
        queries, keys[None], values[None], attn_mask=mask, scale=shape.scale
    )  # [1, KVH, nG, D]
    out = out.view(shape.kv_heads, n, groups, shape.head_dim).permute(1, 0, 2, 3)  # [n, KVH, G, D]
    return out.reshape(n, shape.heads, shape.head_dim)


def _attend_rows(
    layer_kv: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    row_ids: torch.Tensor,
    pos: torch.Tensor,
    mask: torch.Tensor,
    shape: AttentionShape,
) -> torch.Tensor:
    """One new token per row: write its key/value at ``pos`` of its row of ``layer_kv``
    ``[2, rows, KVH, capacity, D]``, then attend over the first ``T`` positions of those rows in one
    call. q ``[B, H, D]``, k / v ``[B, KVH, D]`` -> ``[B, H, D]``.

    The ``G = H / KVH`` query heads that share a key/value head are passed as ``G`` queries of that
    head (head ``h`` reads key/value head ``h // G``, as Hugging Face's ``repeat_kv`` orders them), so
    no key/value is repeated and any SDPA kernel that takes a mask applies."""
    b = q.shape[0]
    span = mask.shape[-1]
    layer_kv[0, row_ids, :, pos] = k  # [B, KVH, D] into each row's slot
    layer_kv[1, row_ids, :, pos] = v
    keys = layer_kv[0, :, :, :span].index_select(0, row_ids)  # [B, KVH, T, D]
    values = layer_kv[1, :, :, :span].index_select(0, row_ids)  # [B, KVH, T, D]
    groups = shape.heads // shape.kv_heads
    queries = q.view(b, shape.kv_heads, groups, shape.head_dim)  # [B, KVH, G, D]
    if q.device.type == "cpu":
        return _explicit_attention(queries, keys, values, mask, shape.scale).reshape(b, shape.heads, shape.head_dim)
    out = F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=mask, scale=shape.scale
    )  # [B, KVH, G, D]
    return out.reshape(b, shape.heads, shape.head_dim)


def _explicit_attention(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention of a few queries per row as two batched matmuls: queries ``[B, KVH, G, D]`` over keys /
    values ``[B, KVH, T, D]`` where ``mask`` ``[B, 1, 1, T]`` is True -> ``[B, KVH, G, D]``. Scores in
    the model's dtype and the softmax in float32, as Hugging Face's eager attention computes them. On
    the CPU, SDPA with a mask over G = 3 queries per row costs more than the work it does (its kernels
    block long query runs; ``coderl bench engine`` compares the two decode attentions)."""
    scores = torch.matmul(queries, keys.transpose(-1, -2)) * scale  # [B, KVH, G, T]
    scores = scores.masked_fill(~mask, float("-inf"))  # every row sees its position 0: no row all -inf
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
    return torch.matmul(weights, values)  # [B, KVH, G, D]
