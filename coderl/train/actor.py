"""The actor: the policy being trained, with packed log-prob recomputation and an AdamW step.

Its rooms: :mod:`coderl.train.policy_model` loads the modules (LoRA, reference, value head, sharding),
:mod:`coderl.train.forward` runs one micro-batch, :mod:`coderl.train.actor_files` writes and reads
checkpoints and the engine's weights. The :class:`Actor` ties them to the optimizer: scoring, gradient
accumulation over micro-batches, clipping and the step; it must not grow a forward or a file layout.

Log-probs use exactly the engine's definition (:func:`coderl.engine.sampler.token_logprobs`:
``log_softmax(logits / T)`` over the full vocabulary, T = 1 for greedy), always in float32, so the
trainer scores the distribution the rollout sampled from. A batch is split into micro-batches of at
most ``micro_batch_tokens`` forwarded tokens; gradients accumulate over them and one optimizer step
follows. With ``packing`` each micro-batch is one flat token matrix (see :mod:`coderl.train.packing`)
and only the scored (response) rows reach the vocabulary projection; without it, padded batches go
through the plain HF forward (the baseline of the packing benchmark).

Memory: a step allocates and frees gigabytes (activations per micro-batch, the gradients), and glibc
keeps what it freed resident in its heap, fragmented, so that the next micro-batch adds to it rather
than reusing it. The C heap's free pages go back to the system after each micro-batch and after the
optimizer step (``malloc_trim``, milliseconds): the warm start's full-weight actor alone, with gradient
checkpointing, peaked at 4.9 GB in its sixth step without that and 4.3 GB with it (2 cores,
2026-11-27), its steps as fast.

LoRA uses peft; the reference policy is then the same model with its adapters disabled. With full
fine-tuning the reference is a frozen copy. With ``dtype=bfloat16`` the forward runs under autocast
and trainable weights stay float32 (bf16 weights would round away updates of lr ~1e-5); frozen LoRA
base weights are stored in bf16.

With a value head (``Actor(..., value_head=True)``, what GAE needs) a linear layer maps the policy's
final hidden state at each scored position to a scalar value: one shared trunk, one forward for both
(the classic PPO-for-LMs layout); it trains with the policy's optimizer and is saved in checkpoints,
never synced to the engine.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from coderl.errors import ConfigError, ModelError
from coderl.threads import cancel_point, release_free_memory
from coderl.train import actor_files
from coderl.train.config import ActorConfig
from coderl.train.forward import Forwarded, forward_micro_batch, micro_batch_groups, rank_share
from coderl.train.optim import LeanAdamW
from coderl.train.packing import PackedDecoder, check_batch
from coderl.train.policy_model import PolicyModel, load_policy_model

log = logging.getLogger(__name__)

LossFn = Callable[..., torch.Tensor]
"""loss_fn(indices into the batch, logprobs per sequence, entropies per sequence or None) -> scalar,
already normalised for the whole batch (it is summed over micro-batches by backward). An actor with a
value head passes a fourth argument: the values per sequence (with grad)."""

DUMMY = [0, 0]
"""The sequence a rank with no micro-batch left forwards (scored, then multiplied by 0)."""


@dataclass
class Scored:
    """Per-token float32 log-probs (and entropies when asked) of one sequence's scored tokens."""

    logprobs: torch.Tensor  # [n]
    entropy: torch.Tensor | None  # [n]
    values: torch.Tensor | None = None  # [n] value head predictions (actors with a value head)


class Policy(Protocol):
    """What the trainer, the warm start and weight sync call on an actor: :class:`Actor` (in this
    process) and :class:`coderl.train.sharded.ShardedActor` (FSDP2 over rank processes) both are one."""

    cfg: ActorConfig

    @property
    def step(self) -> int: ...

    def setup(self) -> None: ...

    def reset_optimizer(self, lr: float | None = None, frozen_embeddings: bool = False) -> None: ...

    def snapshot_reference(self) -> None: ...

    def score(
        self,
        sequences: list[list[int]],
        starts: list[int],
        temperature: float,
        *,
        reference: bool = False,
        with_entropy: bool = False,
        with_values: bool = False,
    ) -> list[Scored]: ...

    def train_step(
        self,
        sequences: list[list[int]],
        starts: list[int],
        temperature: float,
        loss_fn: LossFn,
        with_entropy: bool = False,
        score_masks: list[list[int]] | None = None,
    ) -> dict[str, float]: ...

    def state_dict_for_engine(self) -> dict[str, torch.Tensor]: ...

    def save_adapter(self, folder: Path) -> None: ...

    def save(self, folder: Path) -> None: ...

    def load(self, folder: Path) -> None: ...

    def close(self) -> None: ...


def lr_factor(cfg: ActorConfig) -> Callable[[int], float]:
    """The learning-rate multiplier after ``step`` optimizer steps: linear warm-up over
    ``warmup_steps``, then constant, linear or cosine decay to ``min_lr_ratio`` at ``total_steps``."""

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.lr_schedule == "constant" or cfg.total_steps is None:
            return 1.0
        progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.total_steps - cfg.warmup_steps))
        shape = 1.0 - progress if cfg.lr_schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape

    return factor


class Actor:
    """The trainable policy. Construction is cheap; :meth:`setup` loads the model."""

    def __init__(
        self,
        cfg: ActorConfig,
        model_path: Path | None = None,
        cache_dir: Path | None = None,
        value_head: bool = False,
        sharded: bool = False,
    ) -> None:
        self.cfg = cfg
        self.with_value_head = value_head
        self.sharded = sharded
        """One rank of a sharded actor (:mod:`coderl.train.ranks`): the process group is initialised,
        the model is sharded with FSDP2 and this rank forwards its share of each batch's micro-batches."""
        self.rank = 0
        self.world = 1
        self.model_path = model_path
        self.cache_dir = cache_dir
        self._step = 0
        self._policy: PolicyModel | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: torch.optim.lr_scheduler.LambdaLR | None = None
        self._thaw: torch.nn.Parameter | None = None  # the embedding a phase froze (reset_optimizer)

    # ------------------------------------------------------------------ set-up

    def setup(self) -> None:
        """Load the model, wrap LoRA (peft) when lora_rank > 0, build AdamW and the LR schedule."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        policy = load_policy_model(cfg, self.model_path, self.cache_dir, self.with_value_head)
        self._policy = policy
        if self.sharded:
            self.rank, self.world = policy.shard()
        self.reset_optimizer()
        log.info(
            "actor: %s on %s (%s), %d trainable parameters%s",
            policy.source.name,
            policy.device,
            cfg.dtype,
            sum(p.numel() for p in policy.hf.parameters() if p.requires_grad),
            (f", LoRA rank {cfg.lora_rank}" if cfg.lora_rank else "")
            + (", value head" if policy.value_head is not None else ""),
        )

    def reset_optimizer(self, lr: float | None = None, frozen_embeddings: bool = False) -> None:
        """A fresh AdamW and learning-rate schedule at ``lr`` (default ``actor.lr``), step count 0: a
        new phase of training (supervised warm start, then RL) starts without the last one's moments.

        ``frozen_embeddings``: the input embedding (with tied embeddings also the output projection)
        is not trained in this phase: no gradient, no AdamW moments for it (for SmolLM2-135M 28M of
        its 135M parameters, ~0.45 GB at float32), and where the output projection is tied to it its
        weight gradient is never computed (an untied one is still trained). The next reset without
        it trains the embedding again, unless something else (LoRA) had frozen it."""
        cfg = self.cfg
        policy = self._require()
        embedding = policy.hf.get_input_embeddings().weight
        if frozen_embeddings and embedding.requires_grad:
            embedding.requires_grad_(False)
            self._thaw = embedding
        elif not frozen_embeddings and self._thaw is not None:
            self._thaw.requires_grad_(True)
            self._thaw = None
        groups: list[dict[str, Any]] = [{"params": [p for p in policy.hf.parameters() if p.requires_grad]}]
        if policy.value_head is not None:
            groups.append({"params": list(policy.value_head.parameters()), "lr": cfg.value_lr})
        lr = cfg.lr if lr is None else lr
        if cfg.exp_avg_dtype == "bfloat16":
            self.optimizer = LeanAdamW(groups, lr=lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
        else:
            self.optimizer = torch.optim.AdamW(groups, lr=lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_factor(cfg))
        self._step = 0

    def snapshot_reference(self) -> None:
        """Make the current policy the KL reference (full fine-tuning keeps a frozen copy; with LoRA
        the reference stays the base model with its adapters off)."""
        self._require().snapshot_reference()

    @property
    def step(self) -> int:
        """Optimizer steps taken (the policy version)."""
        return self._step

    @property
    def model(self) -> Any:
        """The HF causal LM being trained (with LoRA layers injected when lora_rank > 0)."""
        return self._require().hf

    @property
    def device(self) -> torch.device:
        return self._require().device

    @property
    def value_head(self) -> torch.nn.Linear | None:
        return self._require().value_head

    def trainable_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """(name, parameter) of every parameter the optimizer updates."""
        return [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]

    def _require(self) -> PolicyModel:
        if self._policy is None:
            raise ModelError("the actor is not set up; call actor.setup() first")
        return self._policy

    # ------------------------------------------------------------------ forward

    def _forward(
        self,
        model: Any,
        decoder: PackedDecoder,
        indices: list[int],
        sequences: list[list[int]],
        starts: list[int],
        temperature: float,
        with_entropy: bool,
        with_values: bool = False,
        score_masks: list[list[int]] | None = None,
    ) -> Forwarded:
        """The micro-batch ``indices`` of the batch (an empty one: the dummy pass of a rank with fewer)."""
        if not indices:
            policy = self._require()
            return forward_micro_batch(policy, self.cfg, model, decoder, [DUMMY], [1], temperature, False, with_values)
        return forward_micro_batch(
            self._require(), self.cfg, model, decoder,
            [sequences[i] for i in indices], [starts[i] for i in indices], temperature, with_entropy, with_values,
            None if score_masks is None else [score_masks[i] for i in indices],
        )  # fmt: skip

    # ------------------------------------------------------------------ public API

    @torch.no_grad()
    def score(
        self,
        sequences: list[list[int]],
        starts: list[int],
        temperature: float,
        *,
        reference: bool = False,
        with_entropy: bool = False,
        with_values: bool = False,
    ) -> list[Scored]:
        """Float32 logprobs of ``sequences[i][starts[i]:]``, each given all tokens before it (no grad).

        Tensors are on the actor's device. ``reference=True`` scores with the reference policy;
        ``with_values`` also returns the value head's predictions (an actor with a value head).
        """
        scored = self.score_share(
            sequences, starts, temperature, reference=reference, with_entropy=with_entropy, with_values=with_values
        )
        return [scored[i] for i in range(len(sequences))]

    @torch.no_grad()
    def score_share(
        self,
        sequences: list[list[int]],
        starts: list[int],
        temperature: float,
        *,
        reference: bool = False,
        with_entropy: bool = False,
        with_values: bool = False,
    ) -> dict[int, Scored]:
        """:meth:`score` of the sequences this rank forwards, by index (all of them with one rank)."""
        check_batch(sequences, starts)
        policy = self._require()
        if with_values and (policy.value_head is None or reference):
            raise ConfigError("score(with_values=True) needs an actor built with value_head=True (policy only)")
        scored: dict[int, Scored] = {}
        with policy.forwarded(reference) as (model, decoder):
            for group in rank_share(micro_batch_groups(self.cfg, sequences, starts), self.rank, self.world):
                cancel_point()
                out = self._forward(
                    model, decoder, group, sequences, starts, temperature, with_entropy, with_values and bool(group)
                )
                for j, i in enumerate(group):
                    scored[i] = Scored(
                        out.logprobs[j],
                        out.entropy[j] if out.entropy is not None else None,
                        out.values[j] if out.values is not None else None,
                    )
        return scored

    def compute_grads(
        self,
        sequences: list[list[int]],
        starts: list[int],
        temperature: float,
        loss_fn: LossFn,
        with_entropy: bool = False,
        score_masks: list[list[int]] | None = None,
    ) -> dict[str, float]:
        """Forward + backward over micro-batches, accumulating into ``.grad`` (no optimizer step)."""
        check_batch(sequences, starts)
        policy = self._require()
        groups = micro_batch_groups(self.cfg, sequences, starts)
        with_values = policy.value_head is not None
        loss_total = 0.0
        tokens = 0
        policy.hf.train()
        try:
            for group in rank_share(groups, self.rank, self.world):
                cancel_point()
                out = self._forward(
                    policy.hf, policy.decoder, group, sequences, starts, temperature, with_entropy, with_values,
                    score_masks,
                )  # fmt: skip
                if not group:  # a rank with fewer micro-batches joins the others' collectives
                    values = out.values[0].sum() * 0.0 if out.values is not None else 0.0
                    (out.logprobs[0].sum() * 0.0 + values).backward()
                    continue
                args = (group, out.logprobs, out.entropy) + (() if out.values is None else (out.values,))
                loss = loss_fn(*args)
                if loss.requires_grad:
                    loss.backward()
                loss_total += float(loss.detach())
                tokens += out.tokens
                del out, loss
                release_free_memory()  # the micro-batch's activations: module doc, "Memory"
        finally:
            policy.hf.eval()
        trained = sum(len(s) - st for s, st in zip(sequences, starts, strict=True))
        return {
            "loss": loss_total,
            "tokens": float(tokens),
            "trained_tokens": float(trained),
            "micro_batches": float(len(groups)),
        }

    def train_step(
        self,
        sequences: list[list[int]],
        starts: list[int],
        temperature: float,
        loss_fn: LossFn,
        with_entropy: bool = False,
        score_masks: list[list[int]] | None = None,
    ) -> dict[str, float]:
        """One optimizer step on the batch: accumulate gradients over micro-batches, clip, step.

        ``score_masks`` (one 0/1 per token of ``sequences[i][starts[i]:]``) limits the vocabulary
        projection to the tokens a loss uses (SFT: the model's own); the others reach ``loss_fn`` as 0.

        Returns grad_norm, lr (the one this step used), loss, tokens (forwarded, padding included
        without packing), trained_tokens, tokens_per_s, micro_batches, step_s, skipped (1 when the
        gradient was not finite and the update was skipped).
        """
        policy = self._require()
        assert self.optimizer is not None and self.scheduler is not None
        began = time.perf_counter()
        try:
            metrics = self.compute_grads(sequences, starts, temperature, loss_fn, with_entropy, score_masks)
        except BaseException:  # stopped part-way (an interrupted run): no half-batch gradient stays behind
            self.optimizer.zero_grad(set_to_none=True)
            raise
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else math.inf
        if self.sharded:
            from coderl.train import fsdp

            fsdp.sum_replicated_grads(params)  # the value head: whole on every rank
            grad_norm = fsdp.clip_grad_norm(params, max_norm)
        else:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        lr = float(self.optimizer.param_groups[0]["lr"])
        finite = math.isfinite(grad_norm)
        if finite:
            self.optimizer.step()
        else:
            log.warning("step %d: gradient norm is %s; update skipped", self._step, grad_norm)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        release_free_memory()  # the gradients
        self._step += 1
        if policy.device.type == "cuda":
            torch.cuda.synchronize(policy.device)
        elapsed = time.perf_counter() - began
        metrics.update(
            grad_norm=grad_norm,
            lr=lr,
            step_s=elapsed,
            tokens_per_s=metrics["tokens"] / max(elapsed, 1e-9),
            skipped=0.0 if finite else 1.0,
        )
        return metrics

    # ------------------------------------------------------------------ weights out, checkpoints

    def state_dict_for_engine(self) -> dict[str, torch.Tensor]:
        """Full weights named as the HF model's own ``state_dict`` (LoRA merged on the fly, no peft
        prefixes), for ``engine.update_weights``. Without LoRA the tensors share storage with the
        live model: copy them before the next train_step if you keep them."""
        return actor_files.engine_state(self._require(), self.sharded)

    def save_adapter(self, folder: Path) -> None:
        """Write the LoRA adapter alone in peft's format, what HTTP servers' ``load_lora_adapter`` reads."""
        actor_files.save_adapter(self._require(), folder)

    def save(self, folder: Path) -> None:
        """Write model (the adapter with LoRA), optimizer, scheduler, step and RNG states, atomically
        (layout: :mod:`coderl.train.actor_files`). A sharded actor's ranks all call it; rank 0 writes."""
        assert self.optimizer is not None and self.scheduler is not None
        actor_files.save_checkpoint(
            self._require(), self.optimizer, self.scheduler, self._step, folder, sharded=self.sharded, rank=self.rank
        )

    def close(self) -> None:
        """Nothing to stop: the model lives in this process (the sharded actor stops its ranks)."""

    def load(self, folder: Path) -> None:
        """Restore what :meth:`save` wrote (sets the actor up first if needed); resumes bit-for-bit,
        on this number of ranks or another."""
        if self._policy is None:
            self.setup()
        assert self.optimizer is not None and self.scheduler is not None
        self._step = actor_files.load_checkpoint(
            self._require(), self.optimizer, self.scheduler, folder, sharded=self.sharded
        )
