"""The policy's modules as the actor trains them: the HF model, its LoRA adapters, its reference policy
and its value head, loaded once by :func:`load_policy_model`.

Owns: loading (float32 master weights, peft's LoRA injected in place, frozen base weights in the
compute dtype), the reference policy (LoRA: the same model with its adapters off; full fine-tuning: a
frozen copy), the value head, sharding over a process group, and which (model, packed decoder) a
forward runs. Must not own the optimizer, a loss or files: those are :class:`coderl.train.actor.Actor`'s
and :mod:`coderl.train.actor_files`'s.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from coderl.checkpoint import load_model, resolve_checkpoint, torch_device, torch_dtype
from coderl.engine.decoder import unsupported_reason
from coderl.errors import ConfigError, ModelError
from coderl.train.config import ActorConfig
from coderl.train.packing import PackedDecoder

ADAPTER = "default"  # peft's adapter name


@dataclass
class PolicyModel:
    """The loaded modules of one actor (see the module doc)."""

    hf: Any  # the HF causal LM (LoRA layers injected in place when lora_rank > 0)
    decoder: PackedDecoder
    source: Path  # the checkpoint folder it was loaded from (its tokenizer is saved with the weights)
    device: torch.device
    compute_dtype: torch.dtype
    peft: Any = None  # the PeftModel wrapping hf, or None
    reference: Any = None  # frozen copy (full fine-tuning with reference=True)
    ref_decoder: PackedDecoder | None = None
    value_head: torch.nn.Linear | None = None

    def holder(self) -> torch.nn.ModuleDict:
        """Every trained module under one name each: what names optimizer state by parameter."""
        holder = torch.nn.ModuleDict({"policy": self.hf})
        if self.value_head is not None:
            holder["value_head"] = self.value_head
        return holder

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16/fp16 autocast for the forward, or nothing in float32. Its cache of cast weights is off:
        it would hold a bf16 copy of every weight until the forward ends, where gradient checkpointing
        needs each layer's only for that layer (the backward pass casts again as it recomputes)."""
        if self.compute_dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.compute_dtype, cache_enabled=False)

    @contextlib.contextmanager
    def forwarded(self, reference: bool) -> Iterator[tuple[Any, PackedDecoder]]:
        """The (HF model, packed decoder) to forward: the policy, or the reference policy."""
        if not reference:
            yield self.hf, self.decoder
        elif self.peft is not None:
            with self.peft.disable_adapter():
                yield self.hf, self.decoder
        elif self.reference is not None:
            assert self.ref_decoder is not None
            yield self.reference, self.ref_decoder
        else:
            raise ConfigError(
                "score(reference=True) needs a reference policy; set reference=true in the actor config "
                "(free with LoRA, a frozen copy of the model with full fine-tuning)"
            )

    @torch.no_grad()
    def snapshot_reference(self) -> None:
        """Make the current weights the frozen reference's (nothing to do with LoRA or no reference)."""
        if self.reference is not None:
            for ref, live in zip(self.reference.parameters(), self.hf.parameters(), strict=True):
                ref.copy_(live.to(ref.dtype))

    def shard(self) -> tuple[int, int]:
        """Shard the model with FSDP2 over the initialised process group; returns (rank, world)."""
        import torch.distributed as dist

        from coderl.train import fsdp

        if not dist.is_initialized():
            raise ConfigError("a sharded actor needs torch.distributed initialised first (coderl.train.ranks does it)")
        if self.peft is not None:
            raise ConfigError("the sharded actor trains full weights only; set actor.lora_rank=0 or actor.ranks=1")
        fsdp.shard(self.hf, self.decoder)
        return dist.get_rank(), dist.get_world_size()


def load_policy_model(
    cfg: ActorConfig, model_path: Path | None, cache_dir: Path | None, value_head: bool
) -> PolicyModel:
    """Load ``cfg``'s policy from ``model_path`` (see the module doc); the model is in eval mode."""
    device = torch_device(cfg.device)
    compute_dtype = torch_dtype(cfg.dtype)
    source = resolve_checkpoint(model_path, cache_dir)
    hf = load_model(source, torch.float32, device)  # float32 master weights
    reason = unsupported_reason(hf.config) if cfg.packing else None
    if reason is not None:
        raise ModelError(
            f"the packed forward cannot run this model: {reason} (set actor.packing=false to use the plain HF forward)"
        )
    if value_head and not cfg.packing:
        raise ConfigError(
            "a value head (algo.advantage=gae) reads the packed forward's hidden states; "
            "got actor.packing=false, set actor.packing=true"
        )
    reference: Any = None
    if cfg.reference and cfg.lora_rank == 0:  # copied before LoRA could be injected
        reference = copy.deepcopy(hf)
        reference = reference.to(compute_dtype).eval().requires_grad_(False)
    peft: Any = None
    if cfg.lora_rank > 0:
        peft = _inject_lora(cfg, hf)
        for p in hf.parameters():
            if not p.requires_grad:
                p.data = p.data.to(compute_dtype)
    if cfg.gradient_checkpointing and not cfg.packing:
        if hasattr(hf, "activation_checkpointing_enable"):  # transformers >= 5.2x; the old name warns there
            hf.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    hf.eval()
    model = PolicyModel(hf, PackedDecoder(hf), source, device, compute_dtype, peft=peft, reference=reference)
    if reference is not None:
        model.ref_decoder = PackedDecoder(reference)
    if value_head:
        head = torch.nn.Linear(hf.config.hidden_size, 1, device=device)
        torch.nn.init.zeros_(head.weight)  # V = 0 at the start: advantages = returns
        torch.nn.init.zeros_(head.bias)
        model.value_head = head
    return model


def _inject_lora(cfg: ActorConfig, hf: Any) -> Any:
    """peft's LoRA layers in ``hf`` (in place) on ``cfg.lora_targets`` of the last ``cfg.lora_layers``
    decoder layers (every layer when unset); returns the PeftModel."""
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
        layers_to_transform=None if cfg.lora_layers is None else list(range(layers - cfg.lora_layers, layers)),
    )
    with warnings.catch_warnings():  # peft reads transformers' deprecated alias; nothing for a user to do
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(hf, lora)
