"""One forward pass of a Hugging Face decoder over a ragged batch, with per-sequence KV caches.

All new tokens of a step (whole or partial prompts being prefilled, and one token per decoding
sequence) are flattened into one ``[N, hidden]`` matrix, so every projection and MLP runs as one
matmul; only attention runs per sequence, against that sequence's own cache. This is what lets
requests join and leave the batch at every step without padding.

Supported: the Llama family as implemented in transformers (:mod:`coderl.engine.decoder`, whose
projection and rotary embedding the trainer's packed forward shares). The model's own modules are
used, so the numerics match the Hugging Face forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from coderl.engine.decoder import AttentionShape, project_qkv, rotary, unsupported_reason
from coderl.engine.kv_cache import KVLayout, SequenceKV
from coderl.errors import EngineError


@dataclass
class Chunk:
    """New tokens of one sequence in this step; their KV is written at ``kv.length`` onwards."""

    kv: SequenceKV
    token_ids: list[int]
    want_logits: bool


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

    def layout(self) -> KVLayout:
        return KVLayout(len(self.layers), self.shape.kv_heads, self.shape.head_dim, self.dtype, self.device)

    @torch.inference_mode()
    def forward(self, chunks: list[Chunk]) -> torch.Tensor:
        """Run the chunks, append their tokens to their caches, return float32 logits ``[S, vocab]``
        for the last token of each chunk with ``want_logits`` (in chunk order)."""
        flat: list[int] = []
        positions: list[int] = []
        spans: list[tuple[int, int, int]] = []  # (start, end, past) per chunk
        for chunk in chunks:
            past = chunk.kv.length
            start = len(flat)
            flat.extend(chunk.token_ids)
            positions.extend(range(past, past + len(chunk.token_ids)))
            spans.append((start, len(flat), past))
            chunk.kv.reserve(past + len(chunk.token_ids))
        n_tok = len(flat)
        dev = self.device
        ids = torch.tensor(flat, dtype=torch.long, device=dev)  # [N]
        pos = torch.tensor(positions, dtype=torch.long, device=dev)  # [N]
        hidden = self.embed(ids)  # [N, E]
        cos, sin = rotary(self.model, hidden, pos)  # [N, 1, D] each
        masks = [self._mask(end - start, past) for start, end, past in spans]
        shape = self.shape
        for li, layer in enumerate(self.layers):
            attn = layer.self_attn
            q, k, v = project_qkv(attn, layer.input_layernorm(hidden), cos, sin, shape)  # [N, H|KVH, D]
            out = torch.empty_like(q)  # [N, H, D]
            for chunk, (start, end, past), mask in zip(chunks, spans, masks, strict=True):
                data = chunk.kv.data
                assert data is not None
                total = past + end - start
                data[li, 0, :, past:total] = k[start:end].transpose(0, 1)  # [KVH, n, D]
                data[li, 1, :, past:total] = v[start:end].transpose(0, 1)  # [KVH, n, D]
                out[start:end] = F.scaled_dot_product_attention(
                    q[start:end].transpose(0, 1),  # [H, n, D]
                    data[li, 0, :, :total],  # [KVH, T, D]
                    data[li, 1, :, :total],  # [KVH, T, D]
                    attn_mask=mask,
                    is_causal=mask is None and end - start > 1,
                    scale=shape.scale,
                    enable_gqa=shape.heads != shape.kv_heads,
                ).transpose(0, 1)  # [n, H, D]
            hidden = hidden + attn.o_proj(out.view(n_tok, shape.heads * shape.head_dim))  # [N, E]
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))  # [N, E]
        rows = [end - 1 for chunk, (_, end, _) in zip(chunks, spans, strict=True) if chunk.want_logits]
        for chunk in chunks:
            chunk.kv.tokens.extend(chunk.token_ids)
        if not rows:
            return torch.empty((0, self.vocab_size), dtype=torch.float32, device=dev)
        last = hidden[torch.tensor(rows, dtype=torch.long, device=dev)]  # [S, E]
        return self.lm_head(self.norm(last)).float()  # [S, V]

    def _mask(self, n_new: int, past: int) -> torch.Tensor | None:
        """Attention mask of ``n_new`` queries over ``past + n_new`` keys; None where SDPA's own
        (no mask for one query, is_causal for a fresh prompt) is exact."""
        if n_new == 1 or past == 0:
            return None
        q_pos = torch.arange(past, past + n_new, device=self.device)[:, None]  # [n, 1]
        k_pos = torch.arange(past + n_new, device=self.device)[None, :]  # [1, T]
        return k_pos <= q_pos  # [n, T]
