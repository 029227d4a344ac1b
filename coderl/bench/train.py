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
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

from coderl import allocator, signals
from coderl.bench.report import machine_info
from coderl.config import Config
from coderl.progress import progress_bars
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
    with progress_bars(console, TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()) as progress:
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
        "lora_rank": cfg.actor.lora_rank,
    }
    result["peak_memory_mb"] = peak_packed
    result["peak_memory_mb_with_padded"] = peak_memory_mb()
    result["micro_batch_tokens"] = cfg.actor.micro_batch_tokens
    with console.status("prefix sharing: a group of samples of one prompt, shared and not"):
        result["prefix_sharing"] = _prefix_sharing(actors["packed"], vocab, quick, cfg.run.seed)
    result["prefix_sharing_speedup"] = result["prefix_sharing"]["prefix_sharing_speedup"]
    del actors
    with console.status("peak memory of a train step per micro-batch size, each in a process of its own"):
        result["peak_rss_mb"] = _peak_by_micro_batch(cfg, quick)
    with console.status("an RL batch through the actor before and after (full float32 / the configured actor)"):
        result["rl_update"] = _rl_update(cfg, quick)
    if default_step:
        result["default_step"] = _one_default_step(cfg, console)
        if not quick:
            result["rl_steps"] = {
                name: _one_default_step(step_cfg, console) for name, step_cfg in _before_and_after(cfg).items()
            }
    return result


PEAK_SIZES = (1024, 2048, 4096)
"""``actor.micro_batch_tokens`` values whose peak memory is measured (with and without gradient
checkpointing at the configured size)."""


def _peak_by_micro_batch(cfg: Config, quick: bool) -> list[dict[str, Any]]:
    """Peak RSS and the steady step's seconds of two train steps of the configured actor
    (:mod:`coderl.bench.train_peak`) at each micro-batch size, and with gradient checkpointing flipped
    at the configured size; then (not ``quick``, when the run warm-starts under LoRA) the same for the
    warm start's full-weight actor, whose AdamW state is the largest a run holds."""
    import subprocess
    import sys

    actors = {"RL" if cfg.actor.lora_rank else "full weights": cfg.actor}
    if not quick and cfg.actor.lora_rank and cfg.sft.before_rl:
        actors["warm start (full weights)"] = cfg.actor.model_copy(update={"lora_rank": 0})
    base = cfg.actor.micro_batch_tokens
    mine = allocator.active()  # what `coderl train` runs on here; the largest actor also on the other one
    other = next((a for a in allocator.CHOICES if a != mine), None) if allocator.jemalloc_library() else None
    rows = []
    for name, configured in actors.items():
        plans = [(n, configured.gradient_checkpointing, mine) for n in ((base,) if quick else sorted({*PEAK_SIZES, base}))]
        plans.append((base, not configured.gradient_checkpointing, mine))
        if other and name == list(actors)[-1]:
            plans.append((base, configured.gradient_checkpointing, other))
        for tokens, checkpointing, malloc in plans:
            actor = configured.model_copy(update={"micro_batch_tokens": tokens, "gradient_checkpointing": checkpointing})
            command = [sys.executable, "-m", "coderl.bench.train_peak", actor.model_dump_json(), str(cfg.model.path or ""), str(cfg.run.seed)]
            done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800, env=allocator.env_for(malloc))
            if done.returncode != 0:
                raise RuntimeError(f"bench train: the peak-memory run failed: {done.stderr[-1500:]}")
            rows.append({"actor": name, "micro_batch_tokens": tokens, "gradient_checkpointing": checkpointing,
                         "allocator": malloc, **json.loads(done.stdout.strip().splitlines()[-1])})  # fmt: skip
    return rows


BEFORE = {"lora_rank": 0, "dtype": "float32"}
"""The RL phase's actor before issue 33: full weights in float32 (and 1 task x 4 samples a step)."""


def _before_and_after(cfg: Config) -> dict[str, Config]:
    """The RL step as the main job ran it before (one task x 4 samples, full float32 actor and engine)
    and as the configuration runs it now; neither refills a group (dynamic sampling off), so each step
    is one round of rollouts and one update, whatever the untrained model scores."""
    one_round = cfg.algo.model_copy(update={"dynamic_sampling": False})  # each: one rollout round, one update
    before = cfg.model_copy(
        update={
            "actor": cfg.actor.model_copy(update=BEFORE),
            "model": cfg.model.model_copy(update={"dtype": "float32"}),
            "train": cfg.train.model_copy(update={"tasks_per_step": 1, "group_size": 4}),
            "algo": one_round,
        }
    )
    return {"before": before, "after": cfg.model_copy(update={"algo": one_round})}


def _rl_update(cfg: Config, quick: bool) -> dict[str, Any]:
    """One GRPO-shaped batch — groups of G samples of one prompt, responses of model turns with
    environment tokens between them (mask 0) — through ``Actor.train_step`` with the RL loss's
    needs (entropy), in the actor of before (full float32) and the configured one, alternating rounds;
    trained (mask-1) tokens per second and samples per minute of update."""
    import random as _random

    from coderl.train.batch import BatchLoss, build_batch
    from coderl.types import Trajectory

    groups, group, prompt_len, rounds = (1, 2, 64, 1) if quick else (2, 8, 470, 2)
    rng = _random.Random(cfg.run.seed)
    trajs = []
    for g in range(groups):
        prompt = [rng.randrange(100, 40000) for _ in range(prompt_len)]
        for i in range(group):
            resp: list[int] = []
            mask: list[int] = []
            for turn in range(3):  # a model turn, then the tool's output (none after the last)
                n = rng.randrange(20, 200) if not quick else 8
                resp += [rng.randrange(100, 40000) for _ in range(n)]
                mask += [1] * n
                if turn < 2:
                    m = rng.randrange(20, 150) if not quick else 8
                    resp += [rng.randrange(100, 40000) for _ in range(m)]
                    mask += [0] * m
            trajs.append(
                Trajectory(task_id=f"t{g}", group_id=f"t{g}#0", prompt_ids=prompt, response_ids=resp,
                           response_mask=mask, logprobs=[-1.0 if b else 0.0 for b in mask], reward=float(i % 2))
            )  # fmt: skip
    batch = build_batch(trajs, cfg.algo, max(len(t.response_ids) for t in trajs))
    trained = int(batch.mask.sum())
    actors = {
        "before": Actor(cfg.actor.model_copy(update=BEFORE), cfg.model.path, cfg.model.cache_dir),
        "after": Actor(cfg.actor, cfg.model.path, cfg.model.cache_dir),
    }
    seconds: dict[str, list[float]] = {name: [] for name in actors}
    for actor in actors.values():
        actor.setup()
    for _ in range(rounds):
        for name, actor in actors.items():
            t0 = time.perf_counter()
            actor.train_step(batch.sequences, batch.starts, 1.0, BatchLoss(batch, cfg.algo), True)
            seconds[name].append(time.perf_counter() - t0)
    out: dict[str, Any] = {"samples": len(trajs), "trained_tokens": trained, "rounds": rounds}
    for name, times in seconds.items():
        step = statistics.median(times)
        out[name] = {
            "settings": {k: getattr(actors[name].cfg, k) for k in ("lora_rank", "dtype", "vocab_chunk")},
            "step_s": step,
            "trained_tokens_per_s": trained / step,
            "samples_per_minute": 60 * len(trajs) / step,
        }
    out["speedup"] = out["before"]["step_s"] / out["after"]["step_s"]
    return out


def _one_default_step(cfg: Config, console: Console) -> dict[str, Any]:
    from coderl.train.loop import Trainer

    with tempfile.TemporaryDirectory(prefix="coderl-bench-train-") as tmp:
        run_dir = Path(tmp)
        one = cfg.model_copy(
            update={  # one RL step: no validation, no warm start
                "train": cfg.train.model_copy(
                    update={"steps": 1, "val_tasks": "none", "val_also": [], "dev_size": 0, "calibrate_tasks": 0}
                ),
                "sft": cfg.sft.model_copy(update={"before_rl": False}),
            }
        )
        signals.run(Trainer(one, run_dir, console).run())
        row = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    return {
        "samples": row["samples"],
        "train_tokens": row.get("train_tokens", 0),
        "trained_tokens": row.get("trained_tokens", 0),
        "stage_s": row["stage_s"],
        "step_s": row["step_s"],
        "trainer_tokens_per_s": row.get("tokens_per_s", 0.0),
        "samples_per_minute": 60 * row["samples"] / max(row["step_s"], 1e-9),
    }


def tuning(r: dict[str, Any]) -> str:
    """What the packed and padded actors train: LoRA adapters of the configured rank, or every weight."""
    rank = r.get("lora_rank", 0)
    return f"LoRA adapters of rank {rank}" if rank else "full fine-tuning"


def to_markdown(r: dict[str, Any]) -> str:
    m, b = r["machine"], r["batch"]
    lines = [
        "## Trainer (`coderl bench train`)",
        "",
        f"Command: `{r['command']}` — {m['cpu']}, {m['cores']} cores, torch {m['torch']} "
        f"({m['torch_threads']} threads), actor {r['dtype']}, {tuning(r)}. One batch of "
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
    peaks = r.get("peak_rss_mb")
    if peaks:
        lines += [
            "",
            f"Peak memory of the configured actor (`actor.*` as `coderl train` runs it, {r['dtype']}) over two train "
            "steps of the same batch (8 sequences of 128–1024 tokens), and of the warm start's full-weight actor, "
            "each row in a process of its own (peak RSS, MB; the second step's seconds):",
            "",
            "| actor | micro_batch_tokens | gradient checkpointing | C allocator | after loading | after two steps | step s |",
            "|---|---|---|---|---|---|---|",
            *[
                f"| {p.get('actor', 'RL')} | {p['micro_batch_tokens']} | {'on' if p['gradient_checkpointing'] else 'off'} | "
                f"{p.get('allocator', 'system')} | "
                f"{p['loaded_mb']:.0f} | **{p['peak_mb']:.0f}** | "
                + (f"{p['step_s']:.1f} |" if "step_s" in p else "– |")
                for p in peaks
            ],
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
    u = r.get("rl_update")
    if u:
        lines += [
            "",
            f"An RL update: {u['samples']} samples (groups of one prompt; three model turns with tool output "
            f"between them), {u['trained_tokens']} trained (model) tokens, the RL loss with entropy, median of "
            f"{u['rounds']} rounds, alternating:",
            "",
            "| actor | settings | update (s) | trained tokens/s | samples per minute of update |",
            "|---|---|---|---|---|",
            *[
                f"| {name} | {', '.join(f'{k}={v}' for k, v in u[name]['settings'].items())} | {u[name]['step_s']:.1f} | "
                f"{u[name]['trained_tokens_per_s']:.0f} | {u[name]['samples_per_minute']:.1f} |"
                for name in ("before", "after")
            ],
            "",
            f"Update speed-up: **{u['speedup']:.2f}×**.",
        ]
    steps = r.get("rl_steps")
    if steps:
        lines += [
            "",
            "One whole RL step (rollout, grading, update, sync) of `coderl train` from `model.path`, as the main "
            "job ran it before (one task x 4 samples, full float32 actor and engine) and with this configuration "
            "(neither refilling a group):",
            "",
            "| step | samples | step (s) | samples per RL minute | trained tokens | stage seconds |",
            "|---|---|---|---|---|---|",
            *[
                f"| {name} | {x['samples']} | {x['step_s']:.0f} | **{x['samples_per_minute']:.1f}** | {x['trained_tokens']} | "
                + ", ".join(f"{k} {v:.0f}" for k, v in x["stage_s"].items())
                + " |"
                for name, x in steps.items()
            ],
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
