"""The supervised warm start: the actor learns to imitate demonstrations, token for token.

The loss is the negative log-likelihood of the demonstrations' model tokens (mask 1: what the
assistant wrote; tool output and prompts are context, never targets), averaged over the batch's
model tokens — through the same actor, packing and chat layer as RL, so what SFT teaches is exactly
what the RL loop will sample in. ``coderl sft`` writes the result as a Hugging Face checkpoint folder
``coderl train model.path=...`` starts from; ``sft.before_rl`` runs it inside ``coderl train``.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from coderl.chat import ChatFormat
from coderl.config import Config
from coderl.errors import CoderlError, ConfigError
from coderl.tasks import load_tasks
from coderl.tasks.overlap import without_overlap
from coderl.tasks.synth.mutate import KINDS
from coderl.train.actor import Policy
from coderl.train.config import SFTConfig
from coderl.train.demos import gold_demonstrations, rollout_demonstrations
from coderl.types import Task, Trajectory


class NllLoss:
    """The actor's loss_fn: -(sum of model-token log-probs) / (model tokens of the whole batch). A
    class, not a closure, so the sharded actor can send it to its ranks."""

    def __init__(self, batch: list[Trajectory]) -> None:
        self.masks = [torch.tensor(t.response_mask, dtype=torch.float32) for t in batch]
        self.total = max(float(sum(m.sum() for m in self.masks)), 1.0)

    def __call__(self, indices: list[int], logprobs: list[torch.Tensor], *_: object) -> torch.Tensor:
        terms = [(lp * self.masks[i].to(lp.device)).sum() for i, lp in zip(indices, logprobs, strict=True)]
        return -torch.stack(terms).sum() / self.total


def nll_loss(batch: list[Trajectory]) -> Callable[..., torch.Tensor]:
    """:class:`NllLoss` of ``batch``."""
    return NllLoss(batch)


async def build_demos(
    cfg: Config, chat: ChatFormat, held_out: list[Task], data: list[str] | None = None
) -> tuple[list[Trajectory], dict[str, Any]]:
    """The demonstrations ``sft.data`` names, and what was made or skipped of each source. Held-out
    tasks, and tasks that fix a function a held-out task fixes (:mod:`coderl.tasks.overlap`), are never
    demonstrated: they are skipped and counted (``held_out_skipped``), so a source may name a whole
    suite whose held-out split the run measures on. With ``sft.max_demos`` each gold source plays
    tasks until it has made that many, and when the sources made more in all, a seeded sample of
    ``sft.max_demos`` of them is what the warm start uses (each source's ``used``)."""
    check_gold_kinds(cfg.sft.gold_kinds)
    held_ids = {t.id for t in held_out}
    demos: list[Trajectory] = []
    origin: list[str] = []  # each demonstration's source
    report: dict[str, Any] = {}
    for source in data if data is not None else cfg.sft.data:
        kind, _, rest = source.partition(":")
        if kind == "gold":
            every = load_tasks(rest)
            tasks, _ = without_overlap(every, held_out)
            other_kind = 0
            if cfg.sft.gold_kinds:
                wanted = [t for t in tasks if synth_kind(t) in cfg.sft.gold_kinds]
                other_kind, tasks = len(tasks) - len(wanted), wanted
            if cfg.sft.max_demos is not None:  # a seeded sample is enough: play tasks until it is made
                random.Random(cfg.run.seed).shuffle(tasks)
            made, counts = await gold_demonstrations(
                tasks, cfg.rollout, cfg.sandbox, chat, cfg.tasks.concurrency, cfg.sft.max_demos
            )
            report[source] = {
                **counts,
                "held_out_skipped": len(every) - len(tasks) - other_kind,
                "other_kind": other_kind,
            }
        elif kind == "runs":
            every_demo = rollout_demonstrations([Path(rest)])
            made = [d for d in every_demo if d.task_id not in held_ids]
            report[source] = {"kept": len(made), "held_out_skipped": len(every_demo) - len(made)}
        else:
            raise ConfigError(f"sft.data: got {source!r}; each source is gold:TASK_SOURCE or runs:RUN_DIR")
        demos += made
        origin += [source] * len(made)
    cap = cfg.sft.max_demos
    if cap is not None and len(demos) > cap:  # several sources made more: the seeded sample used
        picked = sorted(random.Random(cfg.run.seed).sample(range(len(demos)), cap))
        demos, origin = [demos[i] for i in picked], [origin[i] for i in picked]
    for source, counts in report.items():
        counts["used"] = origin.count(source)
    leaked = sorted({d.task_id for d in demos} & held_ids)
    if leaked:  # cannot happen by construction; the guard keeps it so
        raise ConfigError(f"sft.data: demonstrations of held-out tasks {leaked[:5]}")
    return demos, report


DEMONSTRATED = "coderl-demos.json"
"""Beside a warm-started model's weights (and in its run directory): the ids of the tasks it imitated."""


def write_demonstrated(folder: Path, demos: list[Trajectory], before: set[str] | None = None) -> None:
    """Record which tasks a warm start demonstrated, in ``folder`` (a model folder or a run directory);
    ``before``: those the weights it started from had imitated already (kept in the record)."""
    ids = sorted({d.task_id for d in demos} | (before or set()))
    (folder / DEMONSTRATED).write_text(json.dumps({"task_ids": ids}) + "\n")


def read_demonstrated(folder: Path | None) -> set[str]:
    """The tasks a warm start demonstrated, as :func:`write_demonstrated` left them (empty: none known)."""
    path = None if folder is None else Path(folder) / DEMONSTRATED
    if path is None or not path.is_file():
        return set()
    return set(json.loads(path.read_text()).get("task_ids", []))


def check_demos(demos: list[Trajectory], report: dict[str, Any]) -> None:
    """Refuse a warm start with nothing to imitate, saying what each ``sft.data`` source skipped."""
    if not demos:
        why = "; ".join(f"{src}: {', '.join(f'{k} {v}' for k, v in counts.items() if v)}" for src, counts in report.items())
        raise ConfigError(
            f"sft.data gave no demonstrations; nothing to train on ({why or 'no sources'}). A gold demonstration "
            "must fit the loop it is played through: its tools (rollout.tools), rollout.max_turns and "
            "rollout.max_tokens per turn"
        )


def check_sources(data: list[str]) -> None:
    """Refuse (at start, before any work) a source that cannot give demonstrations: a runs: folder that
    is not there, a gold: task source that does not load."""
    for source in data:
        kind, _, rest = source.partition(":")
        if kind == "runs" and not Path(rest).is_dir():
            raise ConfigError(f"sft.data: {source!r}: {rest!r} is not a folder; name a run directory or a folder of runs")
        if kind == "gold":
            try:
                load_tasks(rest)
            except CoderlError as exc:
                raise ConfigError(f"sft.data: {source!r}: {exc}") from None


def check_gold_kinds(kinds: list[str]) -> None:
    """Refuse (at start, before any work) a mutation kind the task synthesiser does not make."""
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ConfigError(f"sft.gold_kinds: unknown mutation kind {unknown[0]!r}; valid kinds: {', '.join(KINDS)}")


def synth_kind(task: Task) -> str | None:
    """The mutation kind a synthesized task was made with (None for other tasks)."""
    synth = task.metadata.get("synth") if isinstance(task.metadata, dict) else None
    return synth.get("kind") if isinstance(synth, dict) else None


def sft_steps(demos: int, sft: SFTConfig) -> int:
    """How many optimizer steps :func:`train_sft` takes over ``demos`` demonstrations."""
    used = min(demos, sft.max_demos) if sft.max_demos is not None else demos
    return sft.epochs * -(-used // sft.batch_size)


def train_sft(
    actor: Policy,
    demos: list[Trajectory],
    sft: SFTConfig,
    seed: int,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """``sft.epochs`` passes over ``demos`` (a seeded order, ``sft.batch_size`` per optimizer step) at
    ``sft.lr``, from a fresh optimizer; one metrics row per step."""
    if not demos:
        raise ConfigError("sft.data gave no demonstrations; nothing to train on")
    rng = random.Random(seed)
    pool = list(demos)
    if sft.max_demos is not None and len(pool) > sft.max_demos:
        pool = rng.sample(pool, sft.max_demos)
    actor.reset_optimizer(lr=sft.lr, frozen_embeddings=sft.freeze_embeddings)
    rows: list[dict[str, Any]] = []
    for epoch in range(sft.epochs):
        order = pool[:]
        rng.shuffle(order)
        for start in range(0, len(order), sft.batch_size):
            batch = order[start : start + sft.batch_size]
            t0 = time.perf_counter()
            stats = actor.train_step(
                [t.prompt_ids + t.response_ids for t in batch],
                [len(t.prompt_ids) for t in batch],
                1.0,
                nll_loss(batch),
                score_masks=[t.response_mask for t in batch],  # tool output is context: no logits for it
            )
            model_tokens = sum(sum(t.response_mask) for t in batch)
            row = {
                "sft_step": len(rows) + 1,
                "epoch": epoch + 1,
                "demos": len(batch),
                "model_tokens": model_tokens,
                "nll": stats["loss"],
                "grad_norm": stats["grad_norm"],
                "micro_batches": int(stats["micro_batches"]),
                "step_s": time.perf_counter() - t0,
            }
            rows.append(row)
            if on_step is not None:
                on_step(row)
    return rows
