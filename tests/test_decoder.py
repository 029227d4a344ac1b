"""The projection and rotary embedding the engine and the trainer share, against transformers' own."""

from __future__ import annotations

from typing import Any

import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from coderl.engine.decoder import AttentionShape, project_qkv, rotary, unsupported_reason


def test_project_qkv_equals_the_hugging_face_attention_inputs(hf_model: Any) -> None:
    torch.manual_seed(0)
    layer = hf_model.model.layers[3]
    attn = layer.self_attn
    shape = AttentionShape.of(hf_model)
    cfg = hf_model.config
    assert (shape.heads, shape.kv_heads) == (cfg.num_attention_heads, cfg.num_key_value_heads)
    x = torch.randn(7, cfg.hidden_size)  # [N, E]
    positions = torch.tensor([0, 1, 2, 5, 6, 7, 100])
    with torch.no_grad():
        cos, sin = rotary(hf_model, x, positions)
        q, k, v = project_qkv(attn, x, cos, sin, shape)
        # the HF layout: [1, heads, N, D], rotated by apply_rotary_pos_emb with the model's cos / sin
        hf_cos, hf_sin = hf_model.model.rotary_emb(x[None], positions[None])
        hq = attn.q_proj(x).view(1, 7, shape.heads, shape.head_dim).transpose(1, 2)
        hk = attn.k_proj(x).view(1, 7, shape.kv_heads, shape.head_dim).transpose(1, 2)
        hq, hk = apply_rotary_pos_emb(hq, hk, hf_cos, hf_sin)
        hv = attn.v_proj(x).view(1, 7, shape.kv_heads, shape.head_dim).transpose(1, 2)
    torch.testing.assert_close(q, hq[0].transpose(0, 1), rtol=0, atol=1e-6)
    torch.testing.assert_close(k, hk[0].transpose(0, 1), rtol=0, atol=1e-6)
    torch.testing.assert_close(v, hv[0].transpose(0, 1), rtol=0, atol=0)


def test_unsupported_models_are_named(hf_model: Any) -> None:
    assert unsupported_reason(hf_model.config) is None
    gpt2 = type("Cfg", (), {"model_type": "gpt2"})()
    assert "gpt2" in (unsupported_reason(gpt2) or "") and "llama" in (unsupported_reason(gpt2) or "")
    windowed = type("Cfg", (), {"model_type": "mistral", "sliding_window": 256, "max_position_embeddings": 4096})()
    assert "sliding-window" in (unsupported_reason(windowed) or "")
