"""Loading new weights into a live model (state dicts or safetensors checkpoints)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from coderl.engine.packed import drop_packed
from coderl.errors import EngineError


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors file, or of every *.safetensors file in a checkpoint folder."""
    from safetensors.torch import load_file

    p = Path(path)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
    if not files or not all(f.is_file() for f in files):
        raise EngineError(
            f"no safetensors weights at {str(p)!r}; pass a checkpoint folder or a .safetensors file"
        )
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        weights.update(load_file(str(f)))
    return weights


@torch.no_grad()
def load_weights(model: torch.nn.Module, weights: Mapping[str, torch.Tensor] | str | Path) -> None:
    """Copy ``weights`` into ``model``'s parameters in place (dtype and device converted).

    Every parameter must be covered except tied ones (``lm_head.weight`` when embeddings are tied);
    unknown names or shape mismatches raise EngineError before anything is changed.
    """
    state = read_weights(weights) if isinstance(weights, (str, Path)) else dict(weights)
    params = dict(model.named_parameters(remove_duplicate=False))
    unknown = sorted(set(state) - set(params))
    if unknown:
        raise EngineError(f"weights have names the model does not: {unknown[:5]} (of {len(unknown)})")
    covered = {id(params[name]) for name in state}
    missing = sorted(name for name, p in params.items() if id(p) not in covered)
    if missing:
        raise EngineError(f"weights lack {len(missing)} of the model's parameters, e.g. {missing[:5]}")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(params[name].shape):
            raise EngineError(
                f"weight {name!r} has shape {tuple(tensor.shape)}, the model has {tuple(params[name].shape)}"
            )
    for name, tensor in state.items():
        params[name].copy_(tensor.to(device=params[name].device, dtype=params[name].dtype))


def empty_parameters(model: torch.nn.Module) -> dict[str, torch.Size]:
    """Let go of every parameter's storage (and of packed copies of them); their shapes, for
    :func:`restore_parameters`."""
    shapes = {name: p.shape for name, p in model.named_parameters()}
    drop_packed(model)
    for p in model.parameters():
        p.data = torch.empty(0, dtype=p.dtype, device=p.device)
    return shapes


def restore_parameters(model: torch.nn.Module, shapes: Mapping[str, torch.Size]) -> None:
    """Give emptied parameters storage of their ``shapes`` again (uninitialised), for an update to fill."""
    params = dict(model.named_parameters())
    for name, shape in shapes.items():
        p = params[name]
        p.data = torch.empty(shape, dtype=p.dtype, device=p.device)
