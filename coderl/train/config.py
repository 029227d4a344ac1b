"""The trainer's config sections: ``train`` (what one run does, step by step: steps, batch shape,
validation, checkpoints, loggers) and ``actor`` (the policy model, its optimiser and how batches are
forwarded). The algorithm lives in ``algo`` (:class:`coderl.rl.config.AlgoConfig`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from coderl.section import Section, resolve_auto_dtype

DEFAULT_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class ActorConfig(Section):
    """The policy model, its optimiser and how batches are forwarded."""

    lr: float = Field(1e-5, ge=0.0)
    """Peak learning rate of AdamW (reached after warmup_steps)."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW moment coefficients (beta1, beta2)."""
    eps: float = Field(1e-8, gt=0.0)
    """AdamW epsilon added to the denominator."""
    exp_avg_dtype: Literal["float32", "bfloat16"] = "float32"
    """Dtype of AdamW's first moment (bfloat16 halves it: coderl.train.optim); the second moment
    stays float32, whose small increments bfloat16 could not hold."""
    warmup_steps: int = Field(0, ge=0)
    """Optimizer steps over which the learning rate rises linearly to lr."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Learning rate after warmup: constant, or a linear / cosine decay to min_lr_ratio * lr at total_steps."""
    total_steps: int | None = Field(None, ge=1)
    """Length of the schedule in optimizer steps; required by the linear and cosine schedules."""
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0)
    """Final learning rate of the linear / cosine decay, as a fraction of lr."""
    grad_clip: float = Field(1.0, ge=0.0)
    """Clip the global gradient norm to this value; 0 disables clipping (the norm is still reported)."""
    micro_batch_tokens: int = Field(4096, ge=1)
    """Token budget of one micro-batch (gradients accumulate over micro-batches of one step)."""
    packing: bool = True
    """Pack sequences into one flat token matrix (no compute on padding); False = padded HF batches."""
    share_prefix: bool = True
    """Packed forward: each sequence reuses the longest prefix it shares with one of the 32 before it
    in its micro-batch (a GRPO group's prompt, the system prompt of different tasks, the history the
    sequences of one rollout share when its agent rewrote it), forwarded once; the rest attends to it
    (same result up to rounding, far fewer tokens)."""
    vocab_chunk: int = Field(512, ge=1)
    """Packed forward: scored rows whose vocabulary logits are alive at once. Log-probs and entropies are
    computed a chunk at a time and the backward pass recomputes each chunk's logits, so a micro-batch
    never holds its whole [tokens, vocabulary] logits, their log-softmax and their gradients."""
    lora_rank: int = Field(0, ge=0)
    """LoRA rank; 0 = full fine-tuning."""
    lora_alpha: int = Field(16, gt=0)
    """LoRA scaling numerator (the adapter output is scaled by lora_alpha / lora_rank)."""
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the LoRA input during training."""
    lora_targets: list[str] = Field(default_factory=lambda: list(DEFAULT_LORA_TARGETS))
    """Names of the linear modules that get LoRA adapters."""
    lora_layers: int | None = Field(None, ge=1)
    """LoRA adapters in the last N decoder layers only (empty = every layer). The backward pass then
    stops at the lowest adapted layer and the layers below keep no activations: about (layers - N) /
    layers of the backward pass and of the activation memory saved."""
    dtype: Literal["float32", "bfloat16", "auto"] = "float32"
    """Compute dtype; with bfloat16, trainable weights stay float32 (master copy) under autocast. auto =
    bfloat16 where actor.device computes it natively, else float32 (as model.dtype)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Device of the actor; auto = cuda when available, else cpu."""
    value_lr: float = Field(1e-4, ge=0.0)
    """Learning rate of the value head (algo.advantage=gae): a fresh layer needs a larger one than the trunk."""
    reference: bool = False
    """Keep a reference policy for KL: with LoRA the base with adapters off, else a frozen copy."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer in the backward pass (less memory, about a third more compute)."""
    seed: int = 0
    """Seed of the actor's random generators (LoRA initialisation, dropout)."""
    ranks: int = Field(1, ge=1)
    """Processes the actor trains on: 1 = in this process; N > 1 = N rank processes on this machine,
    the model sharded over them with torch FSDP2 (each parameter split N ways, gradients reduce-scattered)
    and each rank forwarding its share of the micro-batches; the update equals the 1-rank one. On cuda
    each rank takes one GPU."""
    dist_backend: Literal["auto", "gloo", "nccl"] = "auto"
    """torch.distributed backend of the ranks (actor.ranks > 1): auto = nccl on cuda, gloo on cpu."""

    @model_validator(mode="before")
    @classmethod
    def _resolve_auto_dtype(cls, data: object) -> object:
        return resolve_auto_dtype(data)

    @model_validator(mode="after")
    def _schedule_has_length(self) -> ActorConfig:
        if self.lr_schedule != "constant" and self.total_steps is None:
            raise ValueError(
                f"actor.lr_schedule: got {self.lr_schedule!r} without actor.total_steps (the schedule's length "
                "in optimizer steps); set actor.total_steps or actor.lr_schedule=constant"
            )
        if self.ranks > 1 and self.lora_rank > 0:
            raise ValueError(
                f"actor.ranks: got {self.ranks} with actor.lora_rank={self.lora_rank}; the sharded actor trains "
                "full weights only — set actor.ranks=1 for LoRA, or actor.lora_rank=0"
            )
        if self.lora_rank > 0 and not self.lora_targets:
            raise ValueError(
                "actor.lora_targets: empty with actor.lora_rank > 0 — name at least one linear module"
            )
        return self


class TrainConfig(Section):
    """The training loop: steps, batch shape, validation, checkpoints and loggers."""

    tasks: str = "bundled:warmup,easy"
    """Training tasks (same forms as tasks.source: bundled[:tiers], swebench:..., harbor:..., dataset:...)."""
    steps: int = Field(10, ge=1)
    """Training steps (each: rollout -> grade -> advantages -> update -> sync)."""
    rl_minutes: float | None = Field(None, gt=0)
    """Wall-clock budget of the RL steps, in minutes: once the steps so far plus one more of their mean
    length (validation left out) would pass it, that next step is the last (it saves a checkpoint and
    validates like the step train.steps would); empty = every one of train.steps. A resumed run counts
    the steps it had taken; one the budget had ended trains no further unless the budget is raised."""
    run_minutes: float | None = Field(None, gt=0)
    """Wall-clock budget of the whole run, in minutes, from the process's start: when the RL phase
    begins, its steps get what is left after the final validation (taken to last as long as the run's
    latest one), and the last step is the last one expected to end inside that; train.min_steps are
    taken even where nothing is left (a slow machine), and train.rl_minutes, when set too, bounds the
    steps further. The phases before RL are not cut. Empty = every one of train.steps. The benches
    (coderl bench rl and learn) leave it out: the runs they compare take train.steps each."""
    min_steps: int = Field(1, ge=1)
    """RL steps taken whatever train.run_minutes or train.rl_minutes say (train.steps when it is fewer)."""
    tasks_per_step: int = Field(2, ge=1)
    """Tasks rolled out per step (a deterministic shuffled pass over the training tasks)."""
    group_size: int = Field(4, ge=1)
    """Samples per task (G); group-relative advantages need G >= 2."""
    curriculum: Literal["none", "edge"] = "none"
    """How steps draw tasks: none = a seeded shuffled cycle; edge = tasks whose estimated pass rate
    (coderl tasks calibrate with this model and these rollout settings, then the training rollouts) is
    strictly between 0 and 1 first, then tasks never tried, then the rest."""
    guide_share: float = Field(0.0, ge=0.0, lt=1.0)
    """Guided samples (coderl.train.guidance): this share of each group of a task the policy has not yet
    solved gets the first train.guide_fraction of the task's gold demonstration written by the
    environment (mask 0, never trained; the model samples the rest). 0 = off. Needs tasks with gold
    patches the loop can demonstrate (rollout.agent=swe)."""
    guide_fraction: float = Field(1.0, ge=0.0, le=1.0)
    """Share of the demonstration's tokens before its fix written into a guided sample at the first RL
    step (1.0: everything up to the token where the bug must be changed); it falls linearly to 0 over
    train.guide_steps steps."""
    guide_steps: int | None = Field(None, ge=1)
    """RL steps over which the guidance anneals to 0; empty = train.steps."""
    patch_credit: float = Field(0.0, ge=0.0, lt=1.0)
    """Partial credit (coderl.train.credit): an unsolved training sample's reward gets patch_credit x
    how closely its patch makes the task's gold change (the F1 score of the changed lines: 1 for the
    same change, ~0.5 for the right line changed another way, 0 for no change), so a group in which no
    sample solved its task can still teach, and a near miss beats no attempt. It falls linearly to 0 over
    train.patch_credit_steps; DAPO dynamic sampling counts it. Pass rates, validation and the curriculum
    count solved tasks only. 0 = off (below 1, so a solved sample always scores highest)."""
    patch_credit_steps: int | None = Field(None, ge=1)
    """RL steps over which the partial credit anneals to 0; empty = train.steps."""
    patch_credit_precise: bool = False
    """Credit only near misses that stay on the bug's lines: a patch that rewrites or deletes any line
    the gold patch leaves gets none, however much of the fix it holds (the plain F1 still pays a rewrite
    of the whole function that touches the bug's line; docs/training.md). Not yet measured."""
    calibrate_tasks: int = Field(0, ge=0)
    """Before the first RL step (after the warm start, when there is one): roll out this many training
    tasks train.calibrate_samples times under the current policy and start the curriculum's pass-rate
    estimates from them (those of coderl tasks calibrate belong to the weights before the warm start).
    0 = no calibration pass."""
    calibrate_samples: int = Field(4, ge=1)
    """Samples per task of the calibration pass, at rollout.temperature."""
    calibrate_from: Literal["demonstrated", "undemonstrated", "all"] = "demonstrated"
    """Which training tasks the calibration pass samples: demonstrated = those the warm start imitated
    (this run's, or the ones model.path's folder records; a warm-started policy solves them sometimes
    far more often than new ones, so RL starts with groups that can teach); undemonstrated = the others
    (functions the policy never saw fixed, as the held-out tasks are: fewer groups can teach, what they
    teach is the skill validation measures); either falls back to all training tasks when none are
    known; all = every training task."""
    signal_patience: int = Field(2, ge=0)
    """Warn (console, metrics.jsonl, loggers, report.html) when this many steps in a row had no group whose
    rewards differ, naming the likely cause: every sample failed, solved, or was truncated, the tool-call
    parser never matched, or groups of one sample. 0 = never warn."""
    edge_draws: int = Field(2, ge=0)
    """curriculum=edge: an edge task drawn this many times goes behind the never-tried tasks (0 = no
    limit), so training keeps meeting new tasks instead of learning a handful by heart."""
    max_refill_rounds: int = Field(2, ge=0)
    """DAPO dynamic sampling: extra rollout rounds to replace groups whose rewards are all equal."""
    mode: Literal["sync", "async"] = "sync"
    """sync: each step rolls out, then updates (the engine waits for the update). async: rollouts go on
    while the actor updates; each step trains the groups that finished, at most train.max_staleness
    policy versions behind (older ones are dropped and counted). In-flight generations finish on the
    weights they started with: each token keeps the version that sampled it (token_versions)."""
    max_staleness: int = Field(1, ge=1)
    """async: a trajectory whose oldest token was sampled by policy version v is trained at version
    v + max_staleness at the latest; groups are drawn at most this many steps ahead of the update."""
    val_tasks: str = ""
    """Held-out validation tasks, never trained on: empty = hold out train.val_size of train.tasks (a
    fixed split by task id); none = no validation; else a task source (any of its tasks that are also in
    train.tasks are removed from training)."""

    @field_validator("val_tasks", mode="before")
    @classmethod
    def _empty_is_the_split(cls, value: object) -> object:
        return "" if value is None else value  # `train.val_tasks=` on the command line parses as null

    val_also: list[str] = []
    """More held-out sets (task sources), validated at the same points: one source (a string), or a
    list of them. The first is reported as val_also_*, the second as val_also2_*, the third as
    val_also3_* and so on: e.g. the hand-written bundled:warmup tier, and tasks synthesised from a
    public library no training task comes from (pypi:toolz==0.12.1?n=24), while the split holds out
    new functions of the training libraries. Their tasks are removed from training and from warm-start
    demonstrations too."""

    @field_validator("val_also", mode="before")
    @classmethod
    def _one_source_or_many(cls, value: object) -> object:
        if value is None:
            return []
        if isinstance(value, str):  # one source (empty: none); a comma may be part of a source's query
            return [value] if value.strip() else []
        return value

    @field_validator("val_also")
    @classmethod
    def _no_empty_source(cls, value: list[str]) -> list[str]:
        for i, source in enumerate(value):
            if not source.strip():
                raise ValueError(f"train.val_also[{i}] is empty; give a task source (e.g. bundled:warmup) or leave it out")
        return value

    def time_bound(self) -> str | None:
        """The wall-clock bound of the RL steps as ``key=value`` (train.rl_minutes first), or None."""
        if self.rl_minutes is not None:
            return f"train.rl_minutes={self.rl_minutes:g}"
        return f"train.run_minutes={self.run_minutes:g}" if self.run_minutes is not None else None

    @model_validator(mode="after")
    def _guidance_ends_inside_the_budget(self) -> TrainConfig:
        bound = self.time_bound()
        if self.guide_share > 0 and bound is not None and self.guide_steps is None:
            raise ValueError(
                f"train.guide_steps: empty with train.guide_share={self.guide_share:g} and {bound} — guidance "
                f"would anneal over all {self.steps} train.steps, and a run the budget ends sooner would stop "
                "still guided; set train.guide_steps to the steps the budget allows"
            )
        if self.patch_credit > 0 and bound is not None and self.patch_credit_steps is None:
            raise ValueError(
                f"train.patch_credit_steps: empty with train.patch_credit={self.patch_credit:g} and {bound} — "
                f"the credit would anneal over all {self.steps} train.steps, and a run the budget ends sooner "
                "would stop still crediting near misses; set train.patch_credit_steps to the steps the budget "
                "allows"
            )
        if self.patch_credit_precise and self.patch_credit == 0:
            raise ValueError(
                "train.patch_credit_precise=true changes which near misses earn the partial credit, and "
                "train.patch_credit=0 gives none; set train.patch_credit (e.g. 0.3) or leave "
                "train.patch_credit_precise false"
            )
        return self
    val_size: int = Field(8, ge=1)
    """Tasks held out of train.tasks when train.val_tasks is empty (at most all but one)."""
    dev_size: int = Field(0, ge=0)
    """Tune on a dev split: > 0 validates on this many training tasks instead of the held-out sets
    (a fixed split by task id, with a hash of its own; never a task the starting weights' warm start
    imitated, as model.path's coderl-demos.json records, nor one fixing the same function), and sets
    the held-out tasks (the split's or train.val_tasks', and train.val_also's) aside: neither trained on,
    demonstrated, calibrated, guided nor validated. Compare settings this way, then report on the
    held-out tasks with 0 (the default). At most all candidates but one are taken."""
    val_samples: int = Field(4, ge=1)
    """Samples per held-out task: pass@1 is their mean, so more samples give a steadier estimate."""
    val_sampled: int = Field(0, ge=0)
    """Samples per held-out task of a second validation at each point, at rollout.temperature (the policy
    as RL samples it), reported as val_sampled_*; 0 = none."""
    val_every: int = Field(0, ge=0)
    """Validate before the first update (step 0), every N steps, and after the last (0 = only at the
    start and the end)."""
    val_temperature: float | None = Field(None, ge=0.0)
    """Sampling temperature of validation rollouts; empty = rollout.temperature (the policy as trained)."""
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


SFT_ACTOR_KEYS = ("gradient_checkpointing", "micro_batch_tokens")
"""The actor settings the warm start may set apart from the RL phase's (``sft.<key>``, empty: ``actor.<key>``)."""


class SFTConfig(Section):
    """The supervised warm start (``coderl sft``, or before RL in ``coderl train``)."""

    data: list[str] = []
    """Demonstration sources: gold:TASKS (demonstrations made from the gold patches of those tasks,
    e.g. gold:bundled:synth) and runs:DIR (the resolved trajectories of finished runs, DIR a run or a
    folder of runs). Held-out tasks (train.val_tasks, or the held-out split) are skipped and counted."""

    @field_validator("data")
    @classmethod
    def _source_kinds(cls, sources: list[str]) -> list[str]:
        for source in sources:
            kind, _, rest = source.partition(":")
            if kind not in ("gold", "runs") or not rest:
                raise ValueError(
                    f"sft.data: got {source!r}; each source is gold:TASK_SOURCE (e.g. gold:bundled:synth) or "
                    "runs:RUN_DIR (a run directory, or a folder of them)"
                )
        twice = sorted({s for s in sources if sources.count(s) > 1})
        if twice:
            raise ValueError(f"sft.data: {twice[0]!r} is listed twice; name each source once")
        return sources

    epochs: int = Field(1, ge=1)
    """Passes over the demonstrations."""
    lr: float = Field(1e-5, ge=0.0)
    """AdamW learning rate of the warm start (the RL phase then starts a fresh optimizer at actor.lr)."""
    batch_size: int = Field(8, ge=1)
    """Demonstrations per optimizer step."""
    max_demos: int | None = Field(None, ge=1)
    """Most demonstrations used (a seeded sample); empty = all."""
    gold_kinds: list[str] = []
    """gold: sources demonstrate only synthesized tasks of these mutation kinds (the task's
    metadata.synth.kind: operator, comparison, boolean, negation, off_by_one, swap_args, drop_branch,
    drop_return, constant); empty = every task. Tasks of other kinds are skipped and counted."""
    before_rl: bool = False
    """coderl train: run the warm start on sft.data after the step-0 validation, then validate again
    and start RL from the result."""
    freeze_embeddings: bool = False
    """Leave the input embedding (and an output projection tied to it) as it is: no gradient and no
    AdamW moments for the vocabulary's rows (for SmolLM2-135M 28M of 135M parameters; the main job's
    peak fell from 5.49 to 5.11 GB, its steps took as long). The RL phase trains them again unless
    LoRA freezes them anyway."""
    gradient_checkpointing: bool | None = None
    """The warm start's activation checkpointing; empty = actor.gradient_checkpointing. It applies where
    the warm start has an actor of its own: `coderl sft`, and `coderl train` with a LoRA RL phase (its
    full-weight warm start peaks far higher than the adapters' updates); with actor.lora_rank=0 the warm
    start trains the RL phase's actor, with actor.* settings (the run says so)."""
    micro_batch_tokens: int | None = Field(None, ge=1)
    """The warm start's micro-batch size in forwarded tokens; empty = actor.micro_batch_tokens (same
    condition as sft.gradient_checkpointing)."""

    def actor_config(self, actor: ActorConfig) -> ActorConfig:
        """The warm start's actor: ``actor`` with full weights (``actor.lora_rank`` is the RL phase's:
        `coderl sft` and `coderl train`'s warm start train the same weights) and the warm start's own
        checkpointing and micro-batch size where these are set."""
        own = {k: getattr(self, k) for k in SFT_ACTOR_KEYS}
        return actor.model_copy(update={"lora_rank": 0, **{k: v for k, v in own.items() if v is not None}})
