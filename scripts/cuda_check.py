"""CUDA check of the embedded engine (run on a GPU machine; not part of CI).

Builds a model with the default model's architecture and tokenizer (from --like, a checkpoint folder
holding config.json and tokenizer files) and random weights, then checks on CUDA, in fp32 and bf16:
logprobs against a plain Hugging Face forward pass, greedy against HF greedy, batched-vs-alone
determinism and the prefix cache, for each decode mode (CUDA graphs, batched eager, per sequence).
Prints one JSON object. Throughput: ``coderl bench engine-cuda``.

    python scripts/cuda_check.py --like /path/to/checkpoint_or_config_dir
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from coderl.bench.engine_cuda import MODES, RANDOM_WEIGHTS_MARKER
from coderl.config import EngineConfig, ModelConfig
from coderl.engine import SamplingParams
from coderl.engine.embedded import EmbeddedEngine


def make_checkpoint(like: Path, out: Path) -> None:
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(like)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # sharper logits than the default init, so greedy has clear winners
        model.lm_head.weight.mul_(8.0)
    model.save_pretrained(out)
    (out / RANDOM_WEIGHTS_MARKER).write_text(f"random weights with {like}'s architecture (torch seed 0)\n")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (like / name).exists():
            shutil.copy(like / name, out / name)


def hf_logprobs(model: Any, prompt: list[int], completion: list[int], temperature: float) -> list[float]:
    ids = torch.tensor([prompt + completion], device=model.device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(1, torch.tensor(completion, device=model.device)[:, None]).squeeze(1).tolist()


async def check(path: Path, dtype: str, mode: str) -> dict[str, Any]:
    eng = EmbeddedEngine(
        EngineConfig(max_batch_size=64, prefix_cache_mb=4096, **MODES[mode]),
        ModelConfig(path=path, dtype=dtype, device="cuda"),
    )
    await eng.start()
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).cuda().eval()
    g = torch.Generator().manual_seed(1)
    # the 250-token prompt grows the KV rows past their first capacity (256) mid-request
    prompts = [torch.randint(200, 40000, (n,), generator=g).tolist() for n in (7, 60, 250, 31)]
    out: dict[str, Any] = {"dtype": dtype, "mode": mode, "device": torch.cuda.get_device_name(0)}
    together = await asyncio.gather(
        *(
            eng.generate(p, SamplingParams(max_tokens=16 + 8 * i, temperature=0.8, seed=i))
            for i, p in enumerate(prompts)
        )
    )
    diffs = []
    for p, c in zip(prompts, together, strict=True):
        r = hf_logprobs(ref, p, c.token_ids, 0.8)
        diffs.append(max(abs(a - b) for a, b in zip(c.logprobs, r, strict=True)))
    out["max_logprob_diff_vs_hf_fp32"] = max(diffs)
    greedy = await eng.generate(prompts[1], SamplingParams(max_tokens=32, temperature=0, ignore_eos=True))
    hf = ref.generate(
        torch.tensor([prompts[1]], device="cuda"),
        max_new_tokens=32,
        min_new_tokens=32,
        do_sample=False,
        pad_token_id=0,
    )
    out["greedy_equals_hf"] = greedy.token_ids == hf[0, len(prompts[1]) :].tolist()
    out["greedy"] = greedy.token_ids
    params = [SamplingParams(max_tokens=24, temperature=1.0, seed=50 + i) for i in range(len(prompts))]
    alone = [await eng.generate(p, sp) for p, sp in zip(prompts, params, strict=True)]
    together = await asyncio.gather(*(eng.generate(p, sp) for p, sp in zip(prompts, params, strict=True)))
    out["batched_equals_alone"] = all(
        a.token_ids == b.token_ids for a, b in zip(alone, together, strict=True)
    )
    first = await eng.generate(prompts[2], SamplingParams(max_tokens=8, temperature=0), session_id="s")
    follow = prompts[2] + first.token_ids + prompts[0]
    second = await eng.generate(follow, SamplingParams(max_tokens=8, temperature=0), session_id="s")
    fresh = await eng.generate(follow, SamplingParams(max_tokens=8, temperature=0))
    out["prefix_cached_tokens"] = second.cached_tokens
    out["prefix_equals_fresh"] = second.token_ids == fresh.token_ids
    out["stats"] = {
        k: eng.stats()[k] for k in ("decode_attention", "cuda_graphs", "kv_rows_capacity", "steps")
    }
    await eng.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--like", type=Path, required=True)
    ap.add_argument("--save", type=Path, help="only write the random-weight checkpoint to this folder")
    args = ap.parse_args()
    if args.save:
        make_checkpoint(args.like, args.save)
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model"
        make_checkpoint(args.like, path)
        results = []
        for dtype in ("float32", "bfloat16"):
            for mode in MODES:
                try:
                    results.append(asyncio.run(check(path, dtype, mode)))
                except Exception as exc:  # report every mode, not only the first failure
                    results.append({"dtype": dtype, "mode": mode, "error": repr(exc), "greedy": None})
    for dtype in ("float32", "bfloat16"):  # the modes decode the same greedy tokens
        greedy = [r["greedy"] for r in results if r["dtype"] == dtype]
        print(dtype, "greedy tokens equal across modes:", all(g == greedy[0] for g in greedy))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
