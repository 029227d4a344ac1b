"""Batch-invariance check of the embedded engine (engine.batch_invariant) on a device; not part of CI.

Random weights with the architecture and tokenizer of --like (a checkpoint folder with config.json and
tokenizer files), bfloat16: 12 greedy prompts each alone, then all together among 12 sampled requests;
prints, per setting (off / greedy, per-sequence attention; on CUDA also off with batched decode rows),
how many came out with the same tokens and the same logprobs bit for bit. On a 2-core CPU (2026-11-28):
off 12/12 tokens, 0/12 logprobs; greedy 12/12 and 12/12.

    python scripts/cuda_invariance_check.py cuda --like /path/to/checkpoint_or_config_dir
"""

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from coderl.config import EngineConfig, ModelConfig
from coderl.engine import SamplingParams
from coderl.engine.embedded import EmbeddedEngine
from scripts.cuda_check import make_checkpoint


async def one(path, device, mode, attention):
    eng = EmbeddedEngine(
        EngineConfig(
            max_batch_size=24,
            speculate=4,
            batch_invariant=mode,
            decode_attention=attention,
            prefill_chunk=256,
        ),
        ModelConfig(path=path, dtype="bfloat16", device=device),
    )
    await eng.start()
    g = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(100, 40000, (int(n),), generator=g).tolist()
        for n in torch.randint(80, 700, (12,), generator=g)
    ]
    sp = SamplingParams(max_tokens=48, temperature=0)
    t = time.time()
    alone = [await eng.generate(p, sp) for p in prompts]
    ta = time.time() - t
    t = time.time()
    busy = await asyncio.gather(
        *(eng.generate(p, sp) for p in prompts),
        *(
            eng.generate(p, SamplingParams(max_tokens=48, temperature=1.0, seed=i))
            for i, p in enumerate(prompts)
        ),
    )
    tb = time.time() - t
    await eng.stop()
    return {
        "device": device,
        "mode": mode,
        "attention": attention,
        "tokens_same": sum(a.token_ids == b.token_ids for a, b in zip(alone, busy, strict=False)),
        "logprobs_bit_same": sum(a.logprobs == b.logprobs for a, b in zip(alone, busy, strict=False)),
        "of": len(prompts),
        "alone_s": round(ta, 1),
        "busy_s": round(tb, 1),
    }


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("device", choices=["cpu", "cuda"])
    parser.add_argument(
        "--like", type=Path, required=True, help="checkpoint folder: config.json and tokenizer files"
    )
    args = parser.parse_args()
    device = args.device
    path = Path(tempfile.mkdtemp()) / "m"
    make_checkpoint(args.like, path)
    runs = [("off", "per_sequence"), ("greedy", "per_sequence")] + (
        [("off", "batched")] if device == "cuda" else []
    )
    for mode, attention in runs:
        print(json.dumps(await one(path, device, mode, attention)), flush=True)


asyncio.run(main())
