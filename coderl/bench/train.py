"""``coderl bench train``: the trainer's throughput with sequence packing against padded batches, its
peak memory, and the time of each stage of one default training step.

Packing: the same variable-length batch (lengths spread evenly over ``[min_len, max_len]``, like a
group of agent trajectories) goes through ``Actor.train_step`` with ``actor.packing`` on and off,
alternating, several rounds; tokens/s counts real (non-padding) tokens, so the ratio is the speed-up
a user sees. Prefix sharing: a GRPO-shaped batch (G samples of one prompt, responses of different
lengths) through the packed actor with ``actor.share_prefix`` on and off, alternating; the ratio of
step times is ``prefix_sharing_speedup``. One default step: ``coderl train`` with the packaged defaults, ``train.steps=1``, in a
temporary run directory; its ``stage_s`` row is reported as is.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import Progress

from coderl.bench.report import machine_info
from coderl.config import Config
from coderl.train.actor import Actor


def variable_batch(
    vocab: int, size: int, min_len: int, max_len: int, seed: int
) -> tuple[list[list[int]], list[int]]:
    """``size`` sequences with lengths spread evenly over [min_len, max_len]; scoring starts at a quarter."""
    rng = random.Random(seed)
    lengths = [round(min_len + (max_len - min_len) * i / max(size - 1, 1)) for i in range(size)]
    rng.shuffle(lengths)
    seqs = [[rng.randrange(vocab) for _ in range(n)] for n in lengths]
    return seqs, [max(1, n // 4) for n in lengths]


def group_batch(
    vocab: int, group: int, prompt_len: int, min_resp: int, max_resp: int, seed: int
) -> tuple[list[list[int]], list[int]]:
    """``group`` samples of one prompt of ``prompt_len`` tokens with responses spread over [min, max]."""
    rng = random.Random(seed)
    prompt = [rng.randrange(vocab) for _ in range(prompt_len)]
    lengths = [round(min_resp + (max_resp - min_resp) * i / max(group - 1, 1)) for i in range(group)]
    return [prompt + [rng.randrange(vocab) for _ in range(n)] for n in lengths], [prompt_len] * group


def _prefix_sharing(actor: Actor, vocab: int, quick: bool, seed: int) -> dict[str, Any]:
    group, prompt_len, lo, hi, rounds = (4, 300, 32, 128, 1) if quick else (4, 900, 64, 256, 3)
    seqs, starts = group_batch(vocab, group, prompt_len, lo, hi, seed)
    loss = _nll(sum(len(s) - st for s, st in zip(seqs, starts, strict=True)))
    times: dict[bool, list[float]] = {True: [], False: []}
    base = actor.cfg
    for _ in range(rounds):
        for share in (True, False):
            actor.cfg = base.model_copy(update={"share_prefix": share})
            t0 = time.perf_counter()
            actor.train_step(seqs, starts, 1.0, loss)
            times[share].append(time.perf_counter() - t0)
    actor.cfg = base
    shared, unshared = statistics.median(times[True]), statistics.median(times[False])
    return {
        "group": group,
        "prompt_tokens": prompt_len,
        "response_tokens": [len(s) - prompt_len for s in seqs],
        "shared_step_s": shared,
        "unshared_step_s": unshared,
        "prefix_sharing_speedup": unshared / shared,
    }


def _nll(total: int) -> Any:
    def loss_fn(
        indices: list[int], logprobs: list[torch.Tensor], entropies: list[torch.Tensor] | None
    ) -> torch.Tensor:
        return -torch.cat(logprobs).sum() / total

    return loss_fn


def peak_memory_mb() -> float:
    """Peak resident memory of this process (CPU), or peak allocated CUDA memory when on a GPU."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def bench_train(
    cfg: Config, quick: bool = False, default_step: bool = True, console: Console | None = None
) -> dict[str, Any]:
    console = console or Console(stderr=True)
    size, lo, hi, rounds = (3, 32, 192, 1) if quick else (8, 128, 1024, 3)
    actors = {
        mode: Actor(
            cfg.actor.model_copy(update={"packing": mode == "packed"}),
            cfg.model.path,
            cfg.model.cache_dir,
        )
        for mode in ("packed", "padded")
    }
    with console.status("loading the actor (twice: packed and padded)"):
        for actor in actors.values():
            actor.setup()
    vocab = int(actors["packed"].model.config.vocab_size)
    seqs, starts = variable_batch(vocab, size, lo, hi, seed=cfg.run.seed)
    real_tokens = sum(len(s) - 1 for s in seqs)
    loss = _nll(sum(len(s) - st for s, st in zip(seqs, starts, strict=True)))
    rates: dict[str, list[float]] = {"packed": [], "padded": []}
    peak_packed = 0.0
    with Progress(console=console) as progress:
        bar = progress.add_task("packed, then padded train steps", total=2 * rounds)
        for mode, actor in actors.items():  # packed first: the peak memory after it is the trainer's own
            for _ in range(rounds):
                t0 = time.perf_counter()
                actor.train_step(seqs, starts, 1.0, loss)
                rates[mode].append(real_tokens / (time.perf_counter() - t0))
                progress.advance(bar)
            if mode == "packed":
                peak_packed = peak_memory_mb()
    packed, padded = statistics.median(rates["packed"]), statistics.median(rates["padded"])
    result: dict[str, Any] = {
        "machine": machine_info(),
        "batch": {
            "sequences": size,
            "min_len": lo,
            "max_len": hi,
            "real_tokens": real_tokens,
            "padded_tokens": size * (max(len(s) for s in seqs) - 1),
        },
        "rounds": rounds,
        "packed_tokens_per_s": packed,
        "padded_tokens_per_s": padded,
        "packing_speedup": packed / padded,
        "dtype": cfg.actor.dtype,
    }
    result["peak_memory_mb"] = peak_packed
    result["peak_memory_mb_with_padded"] = peak_memory_mb()
    result["micro_batch_tokens"] = cfg.actor.micro_batch_tokens
    with console.status("prefix sharing: a group of samples of one prompt, shared and not"):
        result["prefix_sharing"] = _prefix_sharing(actors["packed"], vocab, quick, cfg.run.seed)
    result["prefix_sharing_speedup"] = result["prefix_sharing"]["prefix_sharing_speedup"]
    del actors
    if default_step:
        result["default_step"] = _one_default_step(cfg, console)
    return result


def _one_default_step(cfg: Config, console: Console) -> dict[str, Any]:
    from coderl.train.loop import Trainer

    with tempfile.TemporaryDirectory(prefix="coderl-bench-train-") as tmp:
        run_dir = Path(tmp)
        one = cfg.model_copy(
            update={  # one RL step: no validation, no warm start
                "train": cfg.train.model_copy(update={"steps": 1, "val_tasks": "none", "val_also": ""}),
                "sft": cfg.sft.model_copy(update={"before_rl": False}),
            }
        )
        asyncio.run(Trainer(one, run_dir, console).run())
        row = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    return {
        "samples": row["samples"],
        "train_tokens": row.get("train_tokens", 0),
        "stage_s": row["stage_s"],
        "step_s": row["step_s"],
        "trainer_tokens_per_s": row.get("tokens_per_s", 0.0),
    }


def to_markdown(r: dict[str, Any]) -> str:
    m, b = r["machine"], r["batch"]
    lines = [
        "## Trainer (`coderl bench train`)",
        "",
        f"Command: `{r['command']}` — {m['cpu']}, {m['cores']} cores, torch {m['torch']} "
        f"({m['torch_threads']} threads), actor {r['dtype']}, full fine-tuning. One batch of "
        f"{b['sequences']} sequences of {b['min_len']}–{b['max_len']} tokens ({b['real_tokens']} real tokens; "
        f"{b['padded_tokens']} when padded), forward + backward + AdamW step, median of {r['rounds']} rounds.",
        "",
        "| batch layout | trainer tokens/s (real tokens) |",
        "|---|---|",
        f"| padded (HF batch, attention mask) | {r['padded_tokens_per_s']:.1f} |",
        f"| packed (one flat row, no padding) | {r['packed_tokens_per_s']:.1f} |",
        "",
        f"`packing_speedup`: **{r['packing_speedup']:.2f}×** (target ≥ 1.5×). Micro-batches of "
        f"{r['micro_batch_tokens']} tokens (padded micro-batches count their padding). `peak_memory_mb` (peak "
        f"RSS of the process after the packed steps: two actors with their AdamW state, the batch): "
        f"**{r['peak_memory_mb']:.0f}**; after the padded steps too: {r['peak_memory_mb_with_padded']:.0f}.",
    ]
    ps = r.get("prefix_sharing")
    if ps:
        lines += [
            "",
            f"Prefix sharing (`actor.share_prefix`, on by default): {ps['group']} samples of one "
            f"{ps['prompt_tokens']}-token prompt with responses of {ps['response_tokens']} tokens, one train step: "
            f"{ps['unshared_step_s']:.2f} s with every sample forwarding the prompt, {ps['shared_step_s']:.2f} s "
            f"with the prompt forwarded once — `prefix_sharing_speedup` **{ps['prefix_sharing_speedup']:.2f}×**.",
        ]
    step = r.get("default_step")
    if step:
        lines += [
            "",
            f"One RL step of `coderl train` with the packaged defaults, the warm start and validation off "
            f"({step['samples']} samples, {step['train_tokens']:.0f} trained-on tokens incl. prompts, "
            f"{step['step_s']:.0f} s). The model is the untrained one, whose answers mostly run to their "
            "token limits, so its rollout stage is longer than a step's after the warm start (the README "
            "gives the main job's own step times):",
            "",
            "| stage | seconds |",
            "|---|---|",
            *[f"| {name} | {sec:.2f} |" for name, sec in step["stage_s"].items()],
        ]
    return "\n".join(lines)
