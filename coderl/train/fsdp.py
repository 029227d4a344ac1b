"""Rank-side pieces of the sharded actor (torch FSDP2): sharding the model, the global gradient norm,
and full (rank-count independent) weights and optimizer state.

Every decoder layer becomes an FSDP unit of its own and the root unit holds the rest (embeddings,
final norm, the lm_head tied to them). The packed forward never calls a module's ``forward`` (it runs
the layer's projections itself, see :class:`coderl.train.packing.PackedDecoder`), so the methods it
does call are registered with FSDP (``register_fsdp_forward_method``): each gathers its unit's
parameters before it runs and frees them after, exactly as ``forward`` would.

Gradients are summed over ranks, not averaged (gradient divide factor 1): each micro-batch's loss is
already its share of the whole batch's objective, so the sum over micro-batches — whichever rank
forwarded them — is the 1-rank gradient.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method
from torch.distributed.tensor import DTensor

from coderl.train.packing import PackedDecoder

LAYER_METHOD = "coderl_packed_layer"
ROOT_METHOD = "coderl_packed"


def shard(model: Any, decoder: PackedDecoder) -> None:
    """Shard ``model`` over the process group in place (a unit per decoder layer, the root for the
    rest) and point ``decoder`` at the FSDP-wrapped methods."""
    for i, layer in enumerate(decoder.layers):
        setattr(layer, LAYER_METHOD, decoder.calls[i])
        fully_shard(layer)
        register_fsdp_forward_method(layer, LAYER_METHOD)
        _sum_gradients(layer)
    setattr(model, ROOT_METHOD, decoder.scored)
    fully_shard(model)
    register_fsdp_forward_method(model, ROOT_METHOD)
    _sum_gradients(model)
    decoder.calls = [getattr(layer, LAYER_METHOD) for layer in decoder.layers]
    decoder.entry = getattr(model, ROOT_METHOD)


def _sum_gradients(unit: Any) -> None:
    """Reduce-scatter gradients as a plain sum (factor 1; gloo has no pre-multiplied sum)."""
    unit.set_gradient_divide_factor(1.0)
    unit.set_force_sum_reduction_for_comms(True)


def clip_grad_norm(params: Iterable[torch.nn.Parameter], max_norm: float) -> float:
    """Clip gradients to a global norm of ``max_norm`` and return the norm before clipping, as
    ``torch.nn.utils.clip_grad_norm_`` does on one rank: sharded gradients count each rank's shard,
    replicated ones (the value head's, already summed) count once."""
    grads = [p.grad for p in params if p.grad is not None]
    local = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    sharded = torch.zeros((), dtype=torch.float64, device=device)
    replicated = torch.zeros((), dtype=torch.float64, device=device)
    for g, part in zip(grads, local, strict=True):
        square = part.detach().double().pow(2).sum().to(sharded.device)
        if isinstance(g, DTensor):
            sharded += square
        else:
            replicated += square
    dist.all_reduce(sharded)
    norm = float((sharded + replicated).sqrt())
    coef = max_norm / (norm + 1e-6)
    if math.isfinite(norm) and coef < 1.0:
        for part in local:
            part.detach().mul_(coef)
    return norm


def sum_replicated_grads(params: Iterable[torch.nn.Parameter]) -> None:
    """All-reduce (sum) the gradients of parameters every rank holds whole (not sharded by FSDP)."""
    for p in params:
        if p.grad is not None and not isinstance(p.grad, DTensor):
            dist.all_reduce(p.grad)


FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
"""Whole tensors on the CPU of rank 0 (other ranks get none): a collective, every rank calls it."""


def full_model_state(model: Any) -> dict[str, torch.Tensor]:
    """The model's whole weights by their names in ``model.state_dict()`` (on rank 0; empty elsewhere)."""
    state: dict[str, Any] = get_model_state_dict(model, options=FULL)
    return state


def load_full_model_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Load whole weights (every rank passes the same) into the model, sharded or not; a tied weight
    stored once (as HF checkpoints store ``lm_head`` = ``embed_tokens``) is filled through its twin."""
    options = StateDictOptions(full_state_dict=True, strict=False)
    result = set_model_state_dict(model, dict[str, Any](state), options=options)
    missing = [k for k in result.missing_keys if not _tied(model, k)]
    if missing or result.unexpected_keys:
        raise KeyError(f"weights do not fit the model: missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}")


def save_model_folder(model: Any, state: dict[str, torch.Tensor], folder: Path) -> None:
    """Write whole weights as a Hugging Face checkpoint folder (config, generation config,
    ``model.safetensors``; a tied ``lm_head`` stored once, as HF stores it)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(folder)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(folder)
    kept = {k: v.contiguous() for k, v in state.items() if not _tied(model, k)}
    save_file(kept, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _tied(model: Any, key: str) -> bool:
    config = getattr(model, "config", None)
    return bool(getattr(config, "tie_word_embeddings", False)) and key.endswith("lm_head.weight")


def full_optimizer_state(holder: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state keyed by parameter names under ``holder`` (whole tensors, rank 0): the same
    on any number of ranks, so a checkpoint resumes on another rank count."""
    return get_optimizer_state_dict(holder, optimizer, options=FULL if dist.is_initialized() else _WHOLE)


def load_full_optimizer_state(holder: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load what :func:`full_optimizer_state` returned (every rank passes the same)."""
    set_optimizer_state_dict(holder, optimizer, state, options=_WHOLE)


_WHOLE = StateDictOptions(full_state_dict=True)
