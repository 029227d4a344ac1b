"""What an actor writes and reads: its checkpoints, its LoRA adapter alone, and the full weights the
engine loads.

Owns the layouts: a checkpoint folder holds ``model/`` (a complete HF checkpoint with tokenizer) or
``adapter/`` (peft format), ``value_head.pt`` when there is one, ``optimizer.pt`` (keyed by parameter
name, whole tensors: any number of ranks resumes from it) and ``state.pt`` (step, schedule, RNG); every
folder is written to a temporary sibling and renamed into place. Must not train or decide when to save.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from coderl.checkpoint import load_tokenizer
from coderl.errors import ConfigError, ModelError
from coderl.train.policy_model import ADAPTER, PolicyModel

FRESH = "coderl_fresh_optimizer"
"""optimizer.pt of an optimizer that has taken no step yet: no state to restore."""


def replace_folder(tmp: Path, folder: Path) -> None:
    """Put the finished ``tmp`` folder in ``folder``'s place: a reader sees the old checkpoint or the new
    one, never half of one (the old one moves aside first and goes once the new one is there)."""
    old = folder.parent / f".{folder.name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


@torch.no_grad()
def engine_state(policy: PolicyModel, sharded: bool) -> dict[str, torch.Tensor]:
    """Full weights named as the HF model's own ``state_dict`` (LoRA merged on the fly, no peft
    prefixes). Without LoRA the tensors share storage with the live model. Sharded: whole on rank 0,
    empty on the others (every rank calls it: the gathers are collectives)."""
    hf = policy.hf
    if sharded:
        from coderl.train import fsdp

        return fsdp.full_model_state(hf)
    if policy.peft is None:
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
            state[key] = state[key].float() + _delta_weight(module)
    return state


def _delta_weight(layer: Any) -> torch.Tensor:
    """The LoRA update ``scaling * B @ A`` of one peft LoRA layer (shape of its base weight)."""
    return layer.get_delta_weight(ADAPTER).float()


def save_adapter(policy: PolicyModel, folder: Path) -> None:
    """The LoRA adapter alone in peft's format (``adapter_config.json`` + ``adapter_model.safetensors``),
    what HTTP servers' ``load_lora_adapter`` reads; atomic."""
    if policy.peft is None:
        raise ConfigError("save_adapter needs a LoRA actor (lora_rank > 0); sync full weights instead")
    folder = Path(folder)
    tmp = folder.parent / f".{folder.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    policy.peft.save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def save_checkpoint(
    policy: PolicyModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    step: int,
    folder: Path,
    *,
    sharded: bool = False,
    rank: int = 0,
) -> None:
    """Write the checkpoint of the module doc to ``folder``. A sharded actor's ranks all call it (the
    gathers are collectives); rank 0 writes."""
    from coderl.train import fsdp

    hf = policy.hf
    folder = Path(folder)
    tmp = folder.parent / f".{folder.name}.tmp"
    weights = fsdp.full_model_state(hf) if sharded else None
    # torch's full-state gather first creates missing state with an lr=0 step, which would count as
    # AdamW's step 1 and shrink the phase's first real update (t=2 bias correction): a fresh optimizer
    # (every rank's equally) is written as such instead
    optimizer_state = fsdp.full_optimizer_state(policy.holder(), optimizer) if optimizer.state else {FRESH: True}
    if rank != 0:
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if policy.peft is not None:
        policy.peft.save_pretrained(tmp / "adapter")
    elif weights is not None:
        fsdp.save_model_folder(hf, weights, tmp / "model")
        load_tokenizer(policy.source).save_pretrained(tmp / "model")
    else:
        hf.save_pretrained(tmp / "model")
        load_tokenizer(policy.source).save_pretrained(tmp / "model")
    if policy.value_head is not None:
        torch.save(policy.value_head.state_dict(), tmp / "value_head.pt")
    torch.save(optimizer_state, tmp / "optimizer.pt")
    rng: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state(policy.device) if policy.device.type == "cuda" else None
    torch.save({"step": step, "scheduler": scheduler.state_dict(), "rng": rng}, tmp / "state.pt")
    replace_folder(tmp, folder)


def load_checkpoint(
    policy: PolicyModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    folder: Path,
    *,
    sharded: bool = False,
) -> int:
    """Restore what :func:`save_checkpoint` wrote into the loaded modules, optimizer, schedule and RNG;
    returns the step. Resumes bit-for-bit, on this number of ranks or another."""
    from coderl.train import fsdp

    folder = Path(folder)
    if not (folder / "state.pt").is_file():
        raise ModelError(f"{str(folder)!r} is not an actor checkpoint (no state.pt); pass a folder save() wrote")
    has_head = (folder / "value_head.pt").is_file()
    if has_head != (policy.value_head is not None):
        raise ModelError(
            f"{str(folder)!r} was saved {'with' if has_head else 'without'} a value head and this actor has "
            f"{'none' if policy.value_head is None else 'one'}; resume with the same algo.advantage (gae has one)"
        )
    if policy.peft is not None:
        _load_adapter(policy, folder / "adapter")
    else:
        if not (folder / "model").is_dir():
            raise ModelError(f"{str(folder)!r} has no model/ (saved with LoRA? set lora_rank to match)")
        from coderl.engine.weights import load_weights, read_weights

        if sharded:
            fsdp.load_full_model_state(policy.hf, read_weights(folder / "model"))
        else:
            load_weights(policy.hf, folder / "model")
    if policy.value_head is not None:
        policy.value_head.load_state_dict(torch.load(folder / "value_head.pt", map_location=policy.device))
    saved = torch.load(folder / "optimizer.pt", map_location="cpu")
    if saved.get(FRESH):
        optimizer.state.clear()  # saved before its first step: it starts as a fresh one
    elif any(isinstance(key, str) for key in saved["state"]):  # by parameter name
        fsdp.load_full_optimizer_state(policy.holder(), optimizer, saved)
    else:  # by parameter index (checkpoints written before the sharded actor)
        optimizer.load_state_dict(saved)
    state = torch.load(folder / "state.pt", map_location="cpu")
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["torch"])
    if state["rng"].get("cuda") is not None and policy.device.type == "cuda":
        torch.cuda.set_rng_state(state["rng"]["cuda"], policy.device)
    return int(state["step"])


def _load_adapter(policy: PolicyModel, path: Path) -> None:
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    file = path / "adapter_model.safetensors"
    if not file.is_file():
        raise ModelError(f"no LoRA adapter at {str(file)!r} (saved without LoRA? set lora_rank to match)")
    weights = load_file(str(file), device=str(policy.device))
    result = set_peft_model_state_dict(policy.peft, weights, adapter_name=ADAPTER)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ModelError(f"adapter at {str(path)!r} does not fit this model: unexpected {unexpected[:5]}")
