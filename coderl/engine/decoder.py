"""What the engine's ragged forward and the trainer's packed forward share: the attention shape of a
Llama-family decoder and its query / key / value projection with rotary embeddings.

Both forwards flatten the tokens of many sequences into one ``[N, hidden]`` matrix and call the
model's own modules (``attn.q_proj(x)``, ``attn.q_norm``, the model's rotary embedding), so the
numerics are the Hugging Face forward's and peft's LoRA layers, which wrap those modules, work
unchanged. Supported: llama, mistral without sliding window, qwen2, qwen3 (with its q/k norms).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def unsupported_reason(config: Any) -> str | None:
    """Why a model of this Hugging Face config cannot run through the flat forwards (None if it can)."""
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        return f"model_type {config.model_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
    window = getattr(config, "sliding_window", None)
    max_pos = int(getattr(config, "max_position_embeddings", 4096))
    if window and getattr(config, "use_sliding_window", True) and window < max_pos:
        return f"sliding-window attention (window {window}) is not supported"
    return None


@dataclass(frozen=True)
class AttentionShape:
    """Heads, key/value heads (GQA), head size, softmax scale and whether q/k are normed (qwen3)."""

    heads: int
    kv_heads: int
    head_dim: int
    scale: float
    qk_norm: bool

    @classmethod
    def of(cls, model: Any) -> AttentionShape:
        cfg = model.config
        attn = model.model.layers[0].self_attn
        return cls(
            heads=int(cfg.num_attention_heads),
            kv_heads=int(cfg.num_key_value_heads),
            head_dim=int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads),
            scale=float(attn.scaling),
            qk_norm=hasattr(attn, "q_norm"),
        )


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(model: Any, hidden: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's rotary cos / sin at ``positions`` ``[N]``, shaped ``[N, 1, D]`` to broadcast over heads."""
    cos, sin = model.model.rotary_emb(hidden[None], positions[None])  # [1, N, D] each
    return cos[0, :, None, :], sin[0, :, None, :]  # [N, 1, D] each


def project_qkv(
    attn: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, shape: AttentionShape
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries, keys and values of the flat tokens ``x`` ``[N, E]`` (the layer's normed input), with
    the q/k norms and rotary embeddings applied: ``[N, H, D]``, ``[N, KVH, D]``, ``[N, KVH, D]``."""
    n = x.shape[0]
    q = attn.q_proj(x).view(n, shape.heads, shape.head_dim)  # [N, H, D]
    k = attn.k_proj(x).view(n, shape.kv_heads, shape.head_dim)  # [N, KVH, D]
    v = attn.v_proj(x).view(n, shape.kv_heads, shape.head_dim)  # [N, KVH, D]
    if shape.qk_norm:
        q = attn.q_norm(q)
        k = attn.k_norm(k)
    q = q * cos + rotate_half(q) * sin  # [N, H, D]
    k = k * cos + rotate_half(k) * sin  # [N, KVH, D]
    return q, k, v
