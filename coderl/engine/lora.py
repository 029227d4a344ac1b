"""LoRA adapters in peft's folder format, merged into full weights for engines without LoRA kernels.

A peft adapter folder holds ``adapter_config.json`` (``r``, ``lora_alpha``, ``use_rslora``,
``target_modules``...) and ``adapter_model.safetensors`` with, per adapted linear layer ``M``, the
tensors ``base_model.model.M.lora_A.weight`` ``[r, in]`` and ``base_model.model.M.lora_B.weight``
``[out, r]``. The adapted weight is ``W + s * B @ A`` with ``s = lora_alpha / r`` (``/ sqrt(r)`` with
rsLoRA). This is the format vLLM's and SGLang's ``load_lora_adapter`` endpoints read too, so one
saved folder serves every engine.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from coderl.errors import EngineError

_PREFIX = "base_model.model."


@dataclass
class LoraAdapter:
    """An adapter read from disk: the scaling and the (A, B) pair of each adapted weight."""

    scaling: float
    pairs: dict[str, tuple[torch.Tensor, torch.Tensor]]  # base weight name -> (A [r, in], B [out, r])

    def delta(self, name: str) -> torch.Tensor:
        """``s * B @ A`` for the base weight ``name`` (float32, shape of that weight)."""
        a, b = self.pairs[name]
        return self.scaling * (b.float() @ a.float())  # [out, in]


def read_adapter(folder: str | Path) -> LoraAdapter:
    """Read a peft LoRA adapter folder; EngineError names what is missing or unsupported."""
    from safetensors.torch import load_file

    folder = Path(folder)
    config_file, weights_file = folder / "adapter_config.json", folder / "adapter_model.safetensors"
    if not config_file.is_file() or not weights_file.is_file():
        raise EngineError(
            f"{str(folder)!r} is not a LoRA adapter folder: it needs adapter_config.json and "
            "adapter_model.safetensors (what peft's save_pretrained writes)"
        )
    config = json.loads(config_file.read_text())
    for key, allowed in (("use_dora", False), ("fan_in_fan_out", False)):
        if config.get(key, allowed) != allowed:
            raise EngineError(
                f"adapter {str(folder)!r}: {key}={config[key]!r} is not supported (only {allowed})"
            )
    if config.get("modules_to_save"):
        raise EngineError(
            f"adapter {str(folder)!r} also trains whole modules {config['modules_to_save']!r}; "
            "only LoRA pairs can be merged"
        )
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    scaling = alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)
    tensors = load_file(str(weights_file))
    pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for key, a in tensors.items():
        if not key.endswith(".lora_A.weight"):
            continue
        module = key[: -len(".lora_A.weight")].removeprefix(_PREFIX)
        b = tensors.get(key.replace(".lora_A.", ".lora_B."))
        if b is None:
            raise EngineError(f"adapter {str(folder)!r} has {key} without its lora_B pair")
        pairs[f"{module}.weight"] = (a, b)
    if not pairs:
        raise EngineError(f"adapter {str(folder)!r} holds no lora_A / lora_B tensors")
    return LoraAdapter(scaling, pairs)


def merge_adapter(base: Mapping[str, torch.Tensor], folder: str | Path) -> dict[str, torch.Tensor]:
    """``base`` with the adapter merged: adapted weights are new tensors ``W + s * B @ A`` (base dtype),
    the rest are the base tensors themselves. Raises EngineError when the adapter does not fit."""
    adapter = read_adapter(folder)
    merged = dict(base)
    for name in adapter.pairs:
        weight = base.get(name)
        if weight is None:
            raise EngineError(f"adapter {str(folder)!r} adapts {name!r}, which the model does not have")
        delta = adapter.delta(name)
        if tuple(delta.shape) != tuple(weight.shape):
            raise EngineError(
                f"adapter {str(folder)!r}: {name!r} is {tuple(weight.shape)} but the adapter's B @ A is "
                f"{tuple(delta.shape)} (saved for another model?)"
            )
        merged[name] = (weight.float() + delta.to(weight.device)).to(weight.dtype)
    return merged
