"""``coderl bench shard``: the sharded actor (FSDP2 over ``actor.ranks`` processes) against one process.

The same GRPO batch (groups of sequences of random tokens of the real model's vocabulary, seeded) goes
through ``steps`` optimizer steps on one process and on N ranks (gloo on CPU, each rank with its share of
the cores). Reported: the first step's loss and gradient norm on both, the largest weight difference
after the steps (equal up to float rounding: the ranks sum the same gradients), and the time per step
after the first (the first pays start-up costs). On one CPU machine N ranks share the cores that one
process had, so the time says what sharding costs here; the gain of sharding is memory per rank and,
with one GPU per rank, compute.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

import torch
from rich.console import Console

from coderl.bench.report import machine_info
from coderl.config import Config
from coderl.rl import AlgoConfig
from coderl.train.batch import BatchLoss, build_batch
from coderl.train.sharded import build_actor
from coderl.types import Trajectory


def _batch(
    vocab: int, groups: int, group_size: int, prompt: int, response: int, seed: int
) -> list[Trajectory]:
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        shared = [rng.randrange(vocab) for _ in range(prompt)]
        for s in range(group_size):
            ids = [rng.randrange(vocab) for _ in range(response)]
            mask, logprobs = [1] * len(ids), [-5.0] * len(ids)
            out.append(Trajectory(f"t{g}", f"t{g}", shared, ids, mask, logprobs, reward=float(s % 2)))
    return out


def _run(cfg: Config, ranks: int, trajs: list[Trajectory], steps: int) -> dict[str, Any]:
    actor = build_actor(cfg.actor.model_copy(update={"ranks": ranks}), cfg.model.path, cfg.model.cache_dir)
    algo = AlgoConfig(advantage="grpo")
    began = time.perf_counter()
    actor.setup()
    setup_s = time.perf_counter() - began
    try:
        rows = []
        for _ in range(steps):
            batch = build_batch(trajs, algo, max_response=max(len(t.response_ids) for t in trajs))
            loss = BatchLoss(batch, algo)
            t0 = time.perf_counter()
            stats = actor.train_step(batch.sequences, batch.starts, 1.0, loss, True)
            rows.append(
                {"s": time.perf_counter() - t0, "grad_norm": stats["grad_norm"], "loss": stats["loss"]}
            )
        weights = {k: v.detach().float().clone() for k, v in actor.state_dict_for_engine().items()}
    finally:
        actor.close()
    return {
        "ranks": ranks,
        "setup_s": setup_s,
        "first_loss": rows[0]["loss"],
        "first_grad_norm": rows[0]["grad_norm"],
        "step_s": statistics.fmean(r["s"] for r in rows[1:]) if len(rows) > 1 else rows[0]["s"],
        "weights": weights,
    }


def bench_shard(
    cfg: Config, ranks: int, steps: int, quick: bool, console: Console | None = None
) -> dict[str, Any]:
    console = console or Console(stderr=True)
    if ranks < 2:
        raise ValueError(f"--ranks: got {ranks}; the bench compares N >= 2 ranks with one process")
    from coderl.checkpoint import load_tokenizer, resolve_checkpoint

    vocab = len(load_tokenizer(resolve_checkpoint(cfg.model.path, cfg.model.cache_dir)))
    shape = (2, 2, 64, 32) if quick else (4, 4, 384, 128)  # groups, group size, prompt, response tokens
    trajs = _batch(vocab, *shape, seed=cfg.run.seed)
    runs = []
    for n in (1, ranks):
        console.print(f"[bold]{n} rank{'s' if n > 1 else ''}[/]")
        runs.append(_run(cfg, n, trajs, steps))
    one, many = runs
    diff = max(float((one["weights"][k] - many["weights"][k]).abs().max()) for k in one["weights"])
    for run in runs:
        del run["weights"]
    return {
        "machine": machine_info(),
        "threads": torch.get_num_threads(),
        "sequences": len(trajs),
        "tokens_per_sequence": shape[2] + shape[3],
        "steps": steps,
        "micro_batch_tokens": cfg.actor.micro_batch_tokens,
        "runs": runs,
        "max_weight_diff": diff,
        "loss_diff": abs(one["first_loss"] - many["first_loss"]),
        "grad_norm_rel_diff": abs(one["first_grad_norm"] - many["first_grad_norm"])
        / max(one["first_grad_norm"], 1e-12),
        "time_ratio": many["step_s"] / one["step_s"],
    }


def to_markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    many = r["runs"][1]
    lines = [
        "## Sharded actor: FSDP2 ranks vs one process (`coderl bench shard`)",
        "",
        f"Command: `{r['command']}` — {m['cpu']}, {m['cores']} cores, torch {m['torch']}. The default model, "
        f"one GRPO batch of {r['sequences']} sequences of {r['tokens_per_sequence']} tokens (random ids, "
        f"seeded), {r['steps']} optimizer steps; gloo on CPU, each rank with its share of the cores.",
        "",
        "| ranks | set-up s | first loss | first grad norm | s per step (after the first) |",
        "|---|---|---|---|---|",
    ]
    for run in r["runs"]:
        lines.append(
            f"| {run['ranks']} | {run['setup_s']:.1f} | {run['first_loss']:.6f} | {run['first_grad_norm']:.6f} | "
            f"{run['step_s']:.2f} |"
        )
    lines += [
        "",
        f"Same update: loss differs by {r['loss_diff']:.1e}, gradient norm by {r['grad_norm_rel_diff']:.1e} "
        f"(relative), weights after {r['steps']} steps by at most {r['max_weight_diff']:.1e}. Time per step, "
        f"{many['ranks']} ranks ÷ 1: **{r['time_ratio']:.2f}×** — on one CPU machine the ranks share the cores "
        "one process had and add a gradient all-reduce; sharding pays in memory per rank and with a GPU per rank.",
    ]
    return "\n".join(lines)
