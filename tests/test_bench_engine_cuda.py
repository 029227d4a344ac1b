"""``coderl bench engine-cuda`` off a GPU: a clear refusal, bad modes named, and its section's shape."""

from __future__ import annotations

import asyncio

import pytest
import torch

from coderl.bench.engine_cuda import bench_engine_cuda, to_markdown
from coderl.config import load_config
from coderl.errors import ConfigError


def test_unknown_modes_are_named() -> None:
    with pytest.raises(ConfigError, match="unknown decode mode 'fast'; modes: graphs, batched, per_sequence"):
        asyncio.run(bench_engine_cuda(load_config(None, []), modes=("graphs", "fast")))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_refuses_without_a_gpu() -> None:
    with pytest.raises(ConfigError, match=r"needs a CUDA GPU.*coderl bench engine"):
        asyncio.run(bench_engine_cuda(load_config(None, [])))


def test_section_tabulates_every_mode_against_hf() -> None:
    result = {
        "tok_s": {"graphs": {"1": 260.0, "8": 1300.0}, "batched": {"1": 40.0, "8": 250.0}},
        "hf_batched_tok_s": {"1": 20.0, "8": 130.0},
        "ratio_vs_hf": {"1": 13.0, "8": 10.0},
        "ratio_mode": "graphs",
        "ttft_p50_ms": {"graphs": 30.0, "batched": 90.0},
        "graphs_captured": 6,
        "setup": {
            "output_tokens_per_request": 32,
            "requests_by_concurrency": {"1": 4, "8": 16},
            "prompt_tokens": [48, 400],
            "dtype": "bfloat16",
            "model": "m",
            "architecture": "LlamaForCausalLM",
            "parameters": 134_515_008,
            "random_weights": True,
            "transformers": "5.17.0",
            "max_batch_size": 64,
            "quick": True,
        },
        "machine": {"cuda": "NVIDIA H100 80GB HBM3", "torch": "2.11.0"},
    }
    text = to_markdown(result)
    assert "model m (LlamaForCausalLM, 134.5M parameters, random weights" in text
    assert "transformers 5.17.0" in text
    assert "| embedded, graphs | 260 | 1300 |" in text
    assert "| embedded, batched | 40 | 250 |" in text
    assert "| HF `generate`, batched | 20 | 130 |" in text
    assert "| embedded (graphs) ÷ HF | **13.00×** | **10.00×** |" in text
