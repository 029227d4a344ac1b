"""The ``train`` config section: what one training run does, step by step (the loop's own knobs).

The algorithm lives in ``algo`` (:class:`coderl.rl.AlgoConfig`), the policy model and optimiser in
``actor`` (:class:`coderl.train.ActorConfig`), and how each rollout runs in ``rollout``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TrainConfig(BaseModel):
    """The training loop: steps, batch shape, validation, checkpoints and loggers."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

    tasks: str = "bundled:warmup,easy"
    """Training tasks (same forms as tasks.source: bundled[:tiers], swebench:..., harbor:..., dataset:...)."""
    steps: int = Field(10, ge=1)
    """Training steps (each: rollout -> grade -> advantages -> update -> sync)."""
    tasks_per_step: int = Field(2, ge=1)
    """Tasks rolled out per step (a deterministic shuffled pass over the training tasks)."""
    group_size: int = Field(4, ge=1)
    """Samples per task (G); group-relative advantages need G >= 2."""
    max_refill_rounds: int = Field(2, ge=0)
    """DAPO dynamic sampling: extra rollout rounds to replace groups whose rewards are all equal."""
    val_tasks: str = ""
    """Held-out validation tasks (empty = no validation)."""
    val_every: int = Field(0, ge=0)
    """Validate every N steps and after the last one (0 = only after the last, if val_tasks is set)."""
    val_temperature: float = Field(0.0, ge=0.0)
    """Sampling temperature of validation rollouts (0 = greedy)."""
    save_every: int = Field(1, ge=1)
    """Write a checkpoint every N steps (and after the last); `coderl train --resume` continues from the newest."""
    weight_sync: Literal["auto", "full", "lora"] = "auto"
    """How new weights reach the engine: full (the embedded engine in process; HTTP servers load a saved
    checkpoint folder) or lora (a saved peft adapter folder through the server's load_lora_adapter API;
    needs actor.lora_rank > 0). auto = lora for HTTP engines when actor.lora_rank > 0, else full."""
    keep_checkpoints: int = Field(2, ge=1)
    """Newest checkpoints kept on disk; older ones are deleted."""
    loggers: list[Literal["tensorboard", "wandb"]] = []
    """Extra metric sinks besides metrics.jsonl (tensorboard writes to <run dir>/tensorboard)."""
    wandb_project: str = "coderl"
    """W&B project name (loggers=[wandb])."""
