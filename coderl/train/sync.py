"""Weight sync: how the actor's new weights reach the engine after an update, chosen once at set-up.

- :class:`InProcessSync`: the embedded engine in this process takes the state dict directly.
- :class:`CheckpointFolderSync`: HTTP servers (vLLM, SGLang, ``coderl engine serve``) and relay
  workers load a saved Hugging Face checkpoint folder from a path they can read.
- :class:`LoraAdapterSync`: with LoRA, only the adapter (a peft folder, a few MB) goes through the
  engine's ``load_lora_adapter`` API; the server serves base + adapter.

``train.weight_sync`` picks one (``auto`` = LoRA for HTTP engines when ``actor.lora_rank > 0`` and no
warm start precedes RL, else full weights the way the engine takes them). Each returns nothing; the engine's own policy version
moves, and the trainer keeps the run's version.
"""

from __future__ import annotations

import abc
import shutil
from pathlib import Path
from typing import Any

from coderl.checkpoint import resolve_checkpoint
from coderl.engine.base import Engine
from coderl.engine.config import EngineConfig, ModelConfig
from coderl.threads import in_own_thread
from coderl.train.actor import Policy
from coderl.train.config import ActorConfig, TrainConfig


class WeightSync(abc.ABC):
    """Pushes the actor's weights to the engine."""

    name = "sync"

    @abc.abstractmethod
    async def push(self, actor: Policy, engine: Engine, version: int) -> None:
        """Make ``engine`` serve the actor's current weights (the run's policy ``version``)."""


class InProcessSync(WeightSync):
    name = "in-process"

    async def push(self, actor: Policy, engine: Engine, version: int) -> None:
        state = await in_own_thread(actor.state_dict_for_engine)
        await engine.update_weights(state)


class CheckpointFolderSync(WeightSync):
    """A full checkpoint folder, ``<run>/weights/current``: the base checkpoint's files (config,
    tokenizer) with the actor's weights in ``model.safetensors``, swapped in atomically."""

    name = "checkpoint-folder"

    def __init__(self, folder: Path, model: ModelConfig) -> None:
        self.folder = folder
        self.model = model

    async def push(self, actor: Policy, engine: Engine, version: int) -> None:
        await in_own_thread(export_checkpoint, actor, self.model, self.folder)
        await engine.update_weights(self.folder)


def export_checkpoint(actor: Policy, model: ModelConfig, folder: Path) -> Path:
    """The actor's current weights as a complete Hugging Face checkpoint folder (the base checkpoint's
    config and tokenizer, the weights - LoRA merged - in ``model.safetensors``), written atomically:
    what an HTTP server loads, and what ``model.path`` can start a later run from."""
    from safetensors.torch import save_file

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    weights = shutil.ignore_patterns("*.safetensors", "*.safetensors.index.json", "*.bin", "*.gguf")
    shutil.copytree(resolve_checkpoint(model.path, model.cache_dir), tmp, ignore=weights)
    state: dict[str, Any] = {}
    seen: set[int] = set()
    for name, tensor in actor.state_dict_for_engine().items():
        if tensor.data_ptr() in seen:  # tied weights (lm_head = embed_tokens): stored once, as HF does
            continue
        seen.add(tensor.data_ptr())
        state[name] = tensor.contiguous().cpu()
    save_file(state, str(tmp / "model.safetensors"))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


class LoraAdapterSync(WeightSync):
    """A peft adapter folder per version, ``<run>/weights/adapter-vN``; older ones are removed once
    the engine has read the new one."""

    name = "lora-adapter"

    def __init__(self, parent: Path) -> None:
        self.parent = parent

    async def push(self, actor: Policy, engine: Engine, version: int) -> None:
        folder = self.parent / f"adapter-v{version}"
        await in_own_thread(actor.save_adapter, folder)
        await engine.load_lora_adapter(folder)
        for old in self.parent.glob("adapter-v*"):
            if old != folder and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)


def choose_sync(
    train: TrainConfig,
    engine: EngineConfig,
    actor: ActorConfig,
    model: ModelConfig,
    run_dir: Path,
    warm_start: bool = False,
) -> WeightSync:
    """The sync ``train.weight_sync`` names for this engine (``auto``: see the module doc). After a
    full-weight warm start (``warm_start``) a server's base model is no longer the policy's base, so
    ``auto`` sends full weights."""
    mode = train.weight_sync
    if mode == "auto":
        mode = "lora" if engine.type == "http" and actor.lora_rank > 0 and not warm_start else "full"
    weights = run_dir / "weights"
    if mode == "lora":
        return LoraAdapterSync(weights)
    if engine.type == "embedded":
        return InProcessSync()
    return CheckpointFolderSync(weights / "current", model)
