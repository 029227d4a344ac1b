"""The actor: the policy being trained, with packed log-prob recomputation and an AdamW step.

Log-probs use exactly the engine's definition (:func:`coderl.engine.sampler.token_logprobs`:
``log_softmax(logits / T)`` over the full vocabulary, T = 1 for greedy), always in float32, so the
trainer scores the distribution the rollout sampled from. A batch is split into micro-batches of at
most ``micro_batch_tokens`` forwarded tokens; gradients accumulate over them and one optimizer step
follows. With ``packing`` each micro-batch is one flat token matrix (see :mod:`coderl.train.packing`)
and only the scored (response) rows reach the vocabulary projection; without it, padded batches go
through the plain HF forward (the baseline of the packing benchmark).

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

import contextlib
import copy
import logging
import math
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from coderl.checkpoint import load_model, load_tokenizer, resolve_checkpoint, torch_device, torch_dtype
from coderl.engine.decoder import unsupported_reason
from coderl.engine.sampler import effective_temperature, token_logprobs
from coderl.errors import ConfigError, ModelError
from coderl.rl import entropy_from_logits
from coderl.threads import cancel_point
from coderl.train.config import ActorConfig
from coderl.train.packing import (
    PackedDecoder,
    check_batch,
    pack,
    padded_logits,
    prefix_sources,
    split_micro_batches,
)

log = logging.getLogger(__name__)

LossFn = Callable[..., torch.Tensor]
"""loss_fn(indices into the batch, logprobs per sequence, entropies per sequence or None) -> scalar,
already normalised for the whole batch (it is summed over micro-batches by backward). An actor with a
value head passes a fourth argument: the values per sequence (with grad)."""

ADAPTER = "default"  # peft's adapter name
DUMMY = [0, 0]
"""The sequence a rank with no micro-batch left forwards (scored, then multiplied by 0)."""


@dataclass
class Scored:
    """Per-token float32 log-probs (and entropies when asked) of one sequence's scored tokens."""

    logprobs: torch.Tensor  # [n]
    entropy: torch.Tensor | None  # [n]
    values: torch.Tensor | None = None  # [n] value head predictions (actors with a value head)


def delta_weight(layer: Any) -> torch.Tensor:
    """The LoRA update ``scaling * B @ A`` of one peft LoRA layer (shape of its base weight)."""
    return layer.get_delta_weight(ADAPTER).float()


class Policy(Protocol):
    """What the trainer, the warm start and weight sync call on an actor: :class:`Actor` (in this
    process) and :class:`coderl.train.ranks.ShardedActor` (FSDP2 over rank processes) both are one."""

    cfg: ActorConfig

    @property
    def step(self) -> int: ...

    def setup(self) -> None: ...

    def reset_optimizer(self, lr: float | None = None) -> None: ...

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


def replace_folder(tmp: Path, folder: Path) -> None:
    """Put the finished ``tmp`` folder in ``folder``'s place: a reader sees the old checkpoint or the new
    one, never half of one (the old one moves aside first and goes once the new one is there)."""
    old = folder.parent / f".{folder.name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


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
        self.value_head: torch.nn.Linear | None = None
        self.model_path = model_path
        self.cache_dir = cache_dir
        self._step = 0
        self._hf: Any = None  # the HF causal LM (LoRA layers injected in place when lora_rank > 0)
        self._peft: Any = None  # the PeftModel wrapping _hf, or None
        self._reference: Any = None  # frozen copy (full fine-tuning with reference=True)
        self._decoder: PackedDecoder | None = None
        self._ref_decoder: PackedDecoder | None = None
        self._source: Path | None = None
        self.device = torch.device("cpu")
        self.compute_dtype = torch.float32
        self.optimizer: torch.optim.AdamW | None = None
        self.scheduler: torch.optim.lr_scheduler.LambdaLR | None = None

    # ------------------------------------------------------------------ set-up

    def setup(self) -> None:
        """Load the model, wrap LoRA (peft) when lora_rank > 0, build AdamW and the LR schedule."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        self.device = torch_device(cfg.device)
        self.compute_dtype = torch_dtype(cfg.dtype)
        self._source = resolve_checkpoint(self.model_path, self.cache_dir)
        hf = load_model(self._source, torch.float32, self.device)  # float32 master weights
        reason = unsupported_reason(hf.config) if cfg.packing else None
        if reason is not None:
            raise ModelError(
                f"the packed forward cannot run this model: {reason} (set actor.packing=false to use the plain HF forward)"
            )
        if self.with_value_head and not cfg.packing:
            raise ConfigError(
                "a value head (algo.advantage=gae) reads the packed forward's hidden states; "
                "got actor.packing=false, set actor.packing=true"
            )
        if cfg.reference and cfg.lora_rank == 0:
            reference: Any = copy.deepcopy(hf)
            self._reference = reference.to(self.compute_dtype).eval().requires_grad_(False)
            self._ref_decoder = PackedDecoder(self._reference)
        if cfg.lora_rank > 0:
            from peft import LoraConfig, get_peft_model

            layers = int(hf.config.num_hidden_layers)
            if cfg.lora_layers is not None and cfg.lora_layers > layers:
                raise ConfigError(
                    f"actor.lora_layers: got {cfg.lora_layers}, but the model has {layers} decoder layers; give at "
                    f"most {layers} (or leave it empty for every layer)"
                )
            lora = LoraConfig(
                r=cfg.lora_rank,
                lora_alpha=cfg.lora_alpha,
                lora_dropout=cfg.lora_dropout,
                target_modules=list(cfg.lora_targets),
                bias="none",
                layers_to_transform=(
                    None if cfg.lora_layers is None else list(range(layers - cfg.lora_layers, layers))
                ),
            )
            self._peft = get_peft_model(hf, lora)  # injects LoRA layers into hf in place
            for p in hf.parameters():
                if not p.requires_grad:
                    p.data = p.data.to(self.compute_dtype)
        if cfg.gradient_checkpointing and not cfg.packing:
            hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self._hf = hf.eval()
        self._decoder = PackedDecoder(hf)
        if self.sharded:
            self._shard()
        params = [p for p in hf.parameters() if p.requires_grad]
        if self.with_value_head:
            self.value_head = torch.nn.Linear(hf.config.hidden_size, 1, device=self.device)
            torch.nn.init.zeros_(self.value_head.weight)  # V = 0 at the start: advantages = returns
            torch.nn.init.zeros_(self.value_head.bias)
        self._holder = torch.nn.ModuleDict({"policy": hf})  # names the optimizer state by parameter
        if self.value_head is not None:
            self._holder["value_head"] = self.value_head
        self.reset_optimizer()
        log.info(
            "actor: %s on %s (%s), %d trainable parameters%s",
            self._source.name,
            self.device,
            cfg.dtype,
            sum(p.numel() for p in params),
            (f", LoRA rank {cfg.lora_rank}" if cfg.lora_rank else "")
            + (", value head" if self.with_value_head else ""),
        )

    def _shard(self) -> None:
        import torch.distributed as dist

        from coderl.train import fsdp

        if not dist.is_initialized():
            raise ConfigError("a sharded actor needs torch.distributed initialised first (coderl.train.ranks does it)")
        if self._peft is not None:
            raise ConfigError("the sharded actor trains full weights only; set actor.lora_rank=0 or actor.ranks=1")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        assert self._decoder is not None
        fsdp.shard(self._hf, self._decoder)

    def reset_optimizer(self, lr: float | None = None) -> None:
        """A fresh AdamW and learning-rate schedule at ``lr`` (default ``actor.lr``), step count 0: a
        new phase of training (supervised warm start, then RL) starts without the last one's moments."""
        cfg = self.cfg
        hf = self._require()
        groups: list[dict[str, Any]] = [{"params": [p for p in hf.parameters() if p.requires_grad]}]
        if self.value_head is not None:
            groups.append({"params": list(self.value_head.parameters()), "lr": cfg.value_lr})
        self.optimizer = torch.optim.AdamW(
            groups,
            lr=cfg.lr if lr is None else lr,
            betas=cfg.betas,
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_lambda())
        self._step = 0

    @torch.no_grad()
    def snapshot_reference(self) -> None:
        """Make the current policy the KL reference (full fine-tuning keeps a frozen copy; with LoRA
        the reference stays the base model with its adapters off)."""
        if self._reference is not None:
            for ref, live in zip(self._reference.parameters(), self._require().parameters(), strict=True):
                ref.copy_(live.to(ref.dtype))

    def _lr_lambda(self) -> Callable[[int], float]:
        cfg = self.cfg

        def factor(step: int) -> float:  # step = optimizer steps taken so far
            if step < cfg.warmup_steps:
                return (step + 1) / cfg.warmup_steps
            if cfg.lr_schedule == "constant" or cfg.total_steps is None:
                return 1.0
            progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.total_steps - cfg.warmup_steps))
            if cfg.lr_schedule == "linear":
                shape = 1.0 - progress
            else:
                shape = 0.5 * (1.0 + math.cos(math.pi * progress))
            return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape

        return factor

    @property
    def step(self) -> int:
        """Optimizer steps taken (the policy version)."""
        return self._step

    @property
    def model(self) -> Any:
        """The HF causal LM being trained (with LoRA layers injected when lora_rank > 0)."""
        return self._require()

    def trainable_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """(name, parameter) of every parameter the optimizer updates."""
        return [(n, p) for n, p in self._require().named_parameters() if p.requires_grad]

    def _require(self) -> Any:
        if self._hf is None:
            raise ModelError("the actor is not set up; call actor.setup() first")
        return self._hf

    # ------------------------------------------------------------------ forward

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.compute_dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.compute_dtype)

    @contextlib.contextmanager
    def _policy(self, reference: bool) -> Iterator[tuple[Any, PackedDecoder]]:
        """The (HF model, packed decoder) to forward: the policy, or the reference policy."""
        hf = self._require()
        assert self._decoder is not None
        if not reference:
            yield hf, self._decoder
        elif self._peft is not None:
            with self._peft.disable_adapter():
                yield hf, self._decoder
        elif self._reference is not None:
            assert self._ref_decoder is not None
            yield self._reference, self._ref_decoder
        else:
            raise ConfigError(
                "score(reference=True) needs a reference policy; set reference=true in the actor config "
                "(free with LoRA, a frozen copy of the model with full fine-tuning)"
            )

    def _forward(
        self,
        model: Any,
        decoder: PackedDecoder,
        sequences: list[list[int]],
        starts: list[int],
        temperature: float,
        with_entropy: bool,
        with_values: bool = False,
        score_masks: list[list[int]] | None = None,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None, list[torch.Tensor] | None, int]:
        """Per-sequence float32 logprobs (entropies, values) of one micro-batch; grad follows the caller.
        With ``score_masks`` only the masked-in tokens reach the vocabulary projection; the others get 0."""
        batch = pack(sequences, starts, self.device, share_prefix=self.cfg.packing and self.cfg.share_prefix)
        keep = self._kept_rows(score_masks, batch.counts)
        if batch.scored_rows.numel() == 0:
            empty = [torch.zeros(0, device=self.device) for _ in sequences]
            return (
                empty,
                [e.clone() for e in empty] if with_entropy else None,
                [e.clone() for e in empty] if with_values else None,
                batch.num_tokens,
            )
        values: torch.Tensor | None = None
        targets = batch.targets if keep is None else batch.targets[keep]  # [M or K]
        with self._autocast():
            if self.cfg.packing:  # the vocabulary projection a chunk of rows at a time (coderl.train.vocab)
                checkpointing = self.cfg.gradient_checkpointing and model is self._hf
                hidden, logprobs, entropy = decoder.entry(
                    batch, keep, checkpointing, temperature, with_entropy, self.cfg.vocab_chunk
                )  # [M, E], [M or K], [M or K] or None
                forwarded = batch.num_tokens
            else:  # the plain HF forward: full [M, V] logits (the packing benchmark's baseline)
                logits, forwarded = padded_logits(model, sequences, starts, self.device)  # [M, V]
                logits = (logits if keep is None else logits[keep]).float()  # [M or K, V]
                logprobs = token_logprobs(logits, targets, temperature)  # [M or K]
                entropy = (  # [M or K]
                    entropy_from_logits(logits.float() / effective_temperature(temperature)) if with_entropy else None
                )
        if with_values:  # float32, outside autocast: a scalar regression head is cheap and precision-hungry
            assert self.value_head is not None and self.cfg.packing
            values = self.value_head(hidden.float())[:, 0]  # [M]
        if keep is not None:  # back to one value per scored token, 0 where masked out
            zeros = torch.zeros(keep.shape[0], device=self.device)  # [M]
            logprobs = zeros.masked_scatter(keep, logprobs)
            entropy = zeros.masked_scatter(keep, entropy) if entropy is not None else None
        lps = list(logprobs.split(batch.counts))
        ents = list(entropy.split(batch.counts)) if entropy is not None else None
        vals = list(values.split(batch.counts)) if values is not None else None
        return lps, ents, vals, forwarded

    def _kept_rows(self, score_masks: list[list[int]] | None, counts: list[int]) -> torch.Tensor | None:
        """The ``[M]`` boolean mask of scored rows ``score_masks`` keeps (None: all of them)."""
        if score_masks is None:
            return None
        lengths = [len(m) for m in score_masks]
        if lengths != counts:
            raise ConfigError(
                f"score_masks: lengths {lengths[:4]} do not match the scored tokens {counts[:4]}; give one "
                "0/1 per token of sequences[i][starts[i]:]"
            )
        return torch.tensor([bool(b) for m in score_masks for b in m], dtype=torch.bool, device=self.device)

    def _share(self, groups: list[list[int]]) -> list[list[int]]:
        """This rank's micro-batches: every world-th, from its rank on; ranks with one fewer get an
        empty group at the end (a dummy pass: FSDP's gathers and reductions are collectives)."""
        if self.world == 1:
            return groups
        mine = groups[self.rank :: self.world]
        return mine + [[]] * (-(-len(groups) // self.world) - len(mine))

    def _groups(self, sequences: list[list[int]], starts: list[int]) -> list[list[int]]:
        lengths = [len(s) for s in sequences]
        sharing = self.cfg.packing and self.cfg.share_prefix
        sources = prefix_sources(sequences, starts) if sharing else None
        return split_micro_batches(
            lengths, self.cfg.micro_batch_tokens, padded=not self.cfg.packing, sources=sources
        )

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
        if with_values and (self.value_head is None or reference):
            raise ConfigError(
                "score(with_values=True) needs an actor built with value_head=True (policy only)"
            )
        scored: dict[int, Scored] = {}
        with self._policy(reference) as (model, decoder):
            for group in self._share(self._groups(sequences, starts)):
                cancel_point()
                if not group:  # a rank with fewer micro-batches joins the others' collectives
                    self._forward(model, decoder, [DUMMY], [1], temperature, False)
                    continue
                lps, ents, vals, _ = self._forward(
                    model,
                    decoder,
                    [sequences[i] for i in group],
                    [starts[i] for i in group],
                    temperature,
                    with_entropy,
                    with_values,
                )
                for j, i in enumerate(group):
                    scored[i] = Scored(
                        lps[j], ents[j] if ents is not None else None, vals[j] if vals is not None else None
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
        hf = self._require()
        assert self._decoder is not None
        groups = self._groups(sequences, starts)
        loss_total = 0.0
        tokens = 0
        hf.train()
        try:
            for group in self._share(groups):
                cancel_point()
                if not group:  # a rank with fewer micro-batches joins the others' collectives
                    lps, _, vals, _ = self._forward(
                        hf, self._decoder, [DUMMY], [1], temperature, False, self.value_head is not None
                    )
                    (lps[0].sum() * 0.0 + (vals[0].sum() * 0.0 if vals is not None else 0.0)).backward()
                    continue
                lps, ents, vals, forwarded = self._forward(
                    hf,
                    self._decoder,
                    [sequences[i] for i in group],
                    [starts[i] for i in group],
                    temperature,
                    with_entropy,
                    with_values=self.value_head is not None,
                    score_masks=None if score_masks is None else [score_masks[i] for i in group],
                )
                loss = loss_fn(group, lps, ents) if vals is None else loss_fn(group, lps, ents, vals)
                if loss.requires_grad:
                    loss.backward()
                loss_total += float(loss.detach())
                tokens += forwarded
        finally:
            hf.eval()
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
        self._require()
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
        self._step += 1
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - began
        metrics.update(
            grad_norm=grad_norm,
            lr=lr,
            step_s=elapsed,
            tokens_per_s=metrics["tokens"] / max(elapsed, 1e-9),
            skipped=0.0 if finite else 1.0,
        )
        return metrics

    # ------------------------------------------------------------------ weights out

    @torch.no_grad()
    def state_dict_for_engine(self) -> dict[str, torch.Tensor]:
        """Full weights named as the HF model's own ``state_dict`` (LoRA merged on the fly, no peft
        prefixes), for ``engine.update_weights``. Without LoRA the tensors share storage with the
        live model: copy them before the next train_step if you keep them."""
        hf = self._require()
        if self.sharded:
            from coderl.train import fsdp

            return fsdp.full_model_state(hf)  # whole on rank 0, empty on the others
        if self._peft is None:
            return {name: t.detach() for name, t in hf.state_dict().items()}
        from peft.tuners.lora import LoraLayer

        state: dict[str, torch.Tensor] = {}
        for name, tensor in hf.state_dict().items():
            if ".lora_" in name:
                continue
            state[name.replace(".base_layer.", ".")] = tensor.detach()
        for name, module in hf.named_modules():
            if isinstance(module, LoraLayer) and ADAPTER in module.lora_A:
                key = f"{name}.weight"
                merged = state[key].float() + delta_weight(module)
                state[key] = merged
        return state

    def save_adapter(self, folder: Path) -> None:
        """Write the LoRA adapter alone in peft's format (``adapter_config.json`` +
        ``adapter_model.safetensors``), what HTTP servers' ``load_lora_adapter`` reads; atomic."""
        if self._peft is None:
            raise ConfigError("save_adapter needs a LoRA actor (lora_rank > 0); sync full weights instead")
        folder = Path(folder)
        tmp = folder.parent / f".{folder.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        self._peft.save_pretrained(tmp)
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)

    # ------------------------------------------------------------------ checkpoints

    def save(self, folder: Path) -> None:
        """Write model (the adapter with LoRA), optimizer, scheduler, step and RNG states, atomically.

        Layout: ``model/`` (a complete HF checkpoint with tokenizer) or ``adapter/`` (peft format),
        ``optimizer.pt`` (keyed by parameter name, whole tensors: any number of ranks resumes from it),
        ``state.pt``. Written to a temporary sibling, then renamed into place. A sharded actor's ranks
        all call it (the gathers are collectives); rank 0 writes.
        """
        from coderl.train import fsdp

        hf = self._require()
        assert self.optimizer is not None and self.scheduler is not None and self._source is not None
        folder = Path(folder)
        tmp = folder.parent / f".{folder.name}.tmp"
        weights = fsdp.full_model_state(hf) if self.sharded else None
        optimizer = fsdp.full_optimizer_state(self._holder, self.optimizer)
        if self.rank != 0:
            return
        folder.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        if self._peft is not None:
            self._peft.save_pretrained(tmp / "adapter")
        elif weights is not None:
            fsdp.save_model_folder(hf, weights, tmp / "model")
            load_tokenizer(self._source).save_pretrained(tmp / "model")
        else:
            hf.save_pretrained(tmp / "model")
            load_tokenizer(self._source).save_pretrained(tmp / "model")
        if self.value_head is not None:
            torch.save(self.value_head.state_dict(), tmp / "value_head.pt")
        torch.save(optimizer, tmp / "optimizer.pt")
        rng: dict[str, Any] = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        state = {"step": self._step, "scheduler": self.scheduler.state_dict(), "rng": rng}
        torch.save(state, tmp / "state.pt")
        replace_folder(tmp, folder)

    def close(self) -> None:
        """Nothing to stop: the model lives in this process (the sharded actor stops its ranks)."""

    def load(self, folder: Path) -> None:
        """Restore what :meth:`save` wrote (sets the actor up first if needed); resumes bit-for-bit,
        on this number of ranks or another."""
        from coderl.train import fsdp

        if self._hf is None:
            self.setup()
        assert self.optimizer is not None and self.scheduler is not None
        folder = Path(folder)
        if not (folder / "state.pt").is_file():
            raise ModelError(
                f"{str(folder)!r} is not an actor checkpoint (no state.pt); pass a folder save() wrote"
            )
        has_head = (folder / "value_head.pt").is_file()
        if has_head != (self.value_head is not None):
            raise ModelError(
                f"{str(folder)!r} was saved {'with' if has_head else 'without'} a value head and this actor has "
                f"{'none' if self.value_head is None else 'one'}; resume with the same algo.advantage (gae has one)"
            )
        if self._peft is not None:
            self._load_adapter(folder / "adapter")
        else:
            if not (folder / "model").is_dir():
                raise ModelError(f"{str(folder)!r} has no model/ (saved with LoRA? set lora_rank to match)")
            from coderl.engine.weights import load_weights, read_weights

            if self.sharded:
                fsdp.load_full_model_state(self._hf, read_weights(folder / "model"))
            else:
                load_weights(self._hf, folder / "model")
        if self.value_head is not None:
            self.value_head.load_state_dict(torch.load(folder / "value_head.pt", map_location=self.device))
        optimizer = torch.load(folder / "optimizer.pt", map_location="cpu")
        if any(isinstance(key, str) for key in optimizer["state"]):  # by parameter name
            fsdp.load_full_optimizer_state(self._holder, self.optimizer, optimizer)
        else:  # by parameter index (checkpoints written before the sharded actor)
            self.optimizer.load_state_dict(optimizer)
        state = torch.load(folder / "state.pt", map_location="cpu")
        self.scheduler.load_state_dict(state["scheduler"])
        self._step = int(state["step"])
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"].get("cuda") is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)

    def _load_adapter(self, path: Path) -> None:
        from peft.utils import set_peft_model_state_dict
        from safetensors.torch import load_file

        file = path / "adapter_model.safetensors"
        if not file.is_file():
            raise ModelError(f"no LoRA adapter at {str(file)!r} (saved without LoRA? set lora_rank to match)")
        weights = load_file(str(file), device=str(self.device))
        result = set_peft_model_state_dict(self._peft, weights, adapter_name=ADAPTER)
        unexpected = list(getattr(result, "unexpected_keys", []) or [])
        if unexpected:
            raise ModelError(f"adapter at {str(path)!r} does not fit this model: unexpected {unexpected[:5]}")
