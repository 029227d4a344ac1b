"""A tiny model for the tests that check orchestration, not learning: the default model's tokenizer and
chat template on a two-layer Llama of width 64, randomly initialised (seeded), built once per machine.

Owns: making that checkpoint folder (atomically, beside the converted default model) and the flag that
points a run at it. It must not stand in where a test checks what a model computes (token-exact
logprobs against Hugging Face, learning, the engine's figures): those use the real default model.

Why: a ``coderl train`` subprocess on the 135M model spends most of its seconds in the model; the tests
of exits, interrupts, resumes, staleness, clusters and benchmarks' plumbing need every code path a run
takes (real engine, real actor, real sandboxes), which this model takes at a thirtieth of the cost.
Its samples are random tokens: tool calls rarely parse and no task is solved, which those tests allow.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from coderl.checkpoint import cache_root, resolve_checkpoint
from coderl.tasks.snapshot import materialised_at

TINY_NAME = "tiny-llama-2x64-v1"
SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}
"""What differs from the default model's config.json (vocabulary, chat template, rope: the same)."""


def tiny_checkpoint() -> Path:
    """The tiny checkpoint folder, made on first use (seed 0, float32 safetensors)."""
    return materialised_at(cache_root() / "models" / TINY_NAME, _build)


def _build(folder: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    source = resolve_checkpoint()
    config = AutoConfig.from_pretrained(source)
    for key, value in SHAPE.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(folder, safe_serialization=True)
    for item in source.iterdir():
        if item.name.startswith(("tokenizer", "chat_template", "special_tokens")):
            shutil.copy2(item, folder / item.name)
    (folder / "coderl-tiny.json").write_text(json.dumps({"shape": SHAPE, "seed": 0}))


def tiny_flag() -> str:
    """The config override that runs a ``coderl`` command on the tiny model."""
    return f"model.path={tiny_checkpoint()}"
