"""The training loop (single controller): each step is a flat list of named, timed stages.

    rollout -> check [-> reference] [-> values] -> advantages -> update -> sync [-> save] [-> validate]

With ``train.mode=async`` the rollout stage takes groups that a :class:`~coderl.train.producer.
RolloutProducer` has kept rolling out while earlier steps trained (``tasks_per_step x max_staleness``
groups ahead); groups more than ``train.max_staleness`` versions behind are dropped and counted.

- rollout: ``train.tasks_per_step`` tasks x ``train.group_size`` samples with ``rollout.agent``, each
  graded by the task's hidden tests as soon as it finishes (:func:`coderl.rollout.runner.run_rollouts`,
  the one place that grades and sets rewards), through a :class:`~coderl.train.ledger.SampledLedger`
  that records what the engine sampled; with DAPO dynamic sampling, groups whose rewards are all equal
  are replaced by fresh tasks (``train.max_refill_rounds``);
- check: every model token of every sequence must be what the engine sampled after exactly that
  context; a rollout that fails is counted (``token_mismatch``) and never trained on;
- reference / values: a no-grad scoring pass for the KL reference policy (``algo.kl_coef > 0``) and
  for the value head's predictions (``algo.advantage=gae``: PPO with a critic sharing the policy trunk);
- advantages: rewards shaped (overlong, format, KL in the reward) into per-token advantages (``algo``);
- update: one optimizer step of the actor over the batch (micro-batches, gradient accumulation);
- sync: the new weights into the engine (:mod:`coderl.train.sync`, chosen once at set-up); every later
  trajectory carries the new policy version;
- save: a checkpoint every ``train.save_every`` steps and after the last; validate: held-out tasks.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from coderl.chat import ChatFormat
from coderl.cluster.backend import RolloutBackend
from coderl.config import Config
from coderl.engine.base import Engine
from coderl.errors import ConfigError
from coderl.memory import PhasePeaks
from coderl.progress import PlainProgress, progress_bars
from coderl.rollout.runner import (
    RolloutGroup,
    RolloutResult,
)
from coderl.rollout.store import TrajectoryStore, mark_lost_steps
from coderl.tasks.calibration import load_estimates, setting_key
from coderl.tasks.split import TaskSplit, train_and_held_out
from coderl.threads import in_own_thread
from coderl.train import checkpoints
from coderl.train.actor import Policy
from coderl.train.budget import RLBudget, last_validation_seconds, phase_seconds, process_seconds
from coderl.train.calibrate import calibrate
from coderl.train.config import SFT_ACTOR_KEYS
from coderl.train.credit import PatchCredit
from coderl.train.curriculum import Curriculum
from coderl.train.fanout import FanOutSync
from coderl.train.guidance import Guidance
from coderl.train.idle import IdleClock
from coderl.train.ledger import SampledLedger
from coderl.train.loggers import MetricSinks
from coderl.train.metrics import (
    StageTimer,
    mark_peak,
    rollout_metrics,
    summary_line,
)
from coderl.train.producer import RolloutProducer
from coderl.train.report import finish_report
from coderl.train.rollouts import TrainingRollouts
from coderl.train.sft import (
    build_demos,
    check_demos,
    check_gold_kinds,
    check_sources,
    read_demonstrated,
    sft_steps,
    train_sft,
    write_demonstrated,
)
from coderl.train.sharded import ShardedActor, build_actor
from coderl.train.signal import InUse, SignalWatch, gold_patches, signal_metrics
from coderl.train.sync import WeightSync, choose_sync, export_checkpoint
from coderl.train.update import NOTHING_TRAINED, update_policy
from coderl.train.validation import Validation, step_folder
from coderl.types import Task

log = logging.getLogger(__name__)


class Trainer:
    """Owns the engine, the actor and the run directory of one training run."""

    def __init__(
        self, cfg: Config, run_dir: Path, console: Console | None = None, engine: Engine | None = None
    ) -> None:
        """``engine``: one to use instead of the engine ``cfg.engine`` describes (a scripted engine in
        ``coderl bench scale``); the trainer still starts and stops it."""
        self.cfg = cfg
        self.run_dir = run_dir
        self.console = console or Console(stderr=True)
        self.actor = build_policy(self.cfg, cfg.actor.lora_rank > 0, cfg.model.path)
        self.weight_sync: WeightSync = choose_sync(
            cfg.train, cfg.engine, cfg.actor, cfg.model, run_dir, warm_start=cfg.sft.before_rl
        )
        self.backend = RolloutBackend(cfg, engine=engine)
        """Where rollouts run (here or on Ray workers) and the engine they sample from."""
        r = cfg.rollout
        self.max_response = min(r.max_tokens * r.max_turns, r.max_total_tokens)
        """Most model tokens one trajectory can hold (the overlong penalty's and length norm's constant)."""
        self.engine: Engine | None = None
        self.clock: IdleClock | None = None
        self.ledger: SampledLedger | None = None
        self.rollouts: TrainingRollouts | None = None  # what each step draws, rolled out and checked
        self.tasks: list[Task] = []
        self.val_tasks: list[Task] = []
        self.val_also_tasks: list[list[Task]] = []  # one list per source of train.val_also
        self.split: TaskSplit | None = None  # the tasks above, and with a dev split the held-out ones set aside
        self.curriculum: Curriculum | None = None  # which tasks each step draws (saved in checkpoints)
        self.version = 0  # updates applied to the policy
        self._engine_base = 0  # engine.policy_version when self.version was last set
        self.start_step = 1
        self.rows: list[dict[str, Any]] = []
        self.demonstrated: set[str] = set()  # tasks the warm start imitated (this run's, or model.path's)
        self.signal = SignalWatch(cfg.train.signal_patience, cfg.train.group_size, InUse(
            edge=cfg.train.curriculum == "edge", guided=cfg.train.guide_share > 0,
            dynamic_sampling=cfg.algo.dynamic_sampling,
        ))  # fmt: skip
        """Steps in a row whose groups could not teach, and the warning when there are too many."""
        self.owed: dict[str, Any] | None = None
        """A resumed checkpoint's step row whose validation the stop cut short: validated before step 1 goes on."""

    # ------------------------------------------------------------------ set-up
    def held_out(self) -> list[Task]:
        """Every task training must not touch: the split's (or train.val_tasks', or the dev split's), every
        train.val_also set's, and those a dev split sets aside (:meth:`TaskSplit.unseen`)."""
        return self.split.unseen() if self.split is not None else []

    @property
    def producer(self) -> RolloutProducer | None:
        """``train.mode=async``: the producer keeping groups rolling out ahead of the steps."""
        return self.rollouts.producer if self.rollouts is not None else None

    @property
    def warm_dir(self) -> Path:
        """Where a warm start under an RL phase with LoRA leaves its weights: the LoRA actor's base."""
        return self.run_dir / "warm"

    async def setup(self, resume: bool = False) -> None:
        cfg = self.cfg
        done = checkpoints.read_metrics(self.run_dir / "metrics.jsonl") if resume else []
        if cfg.sft.before_rl and cfg.actor.lora_rank > 0:
            # LoRA is the RL phase's: the warm start trains full weights, and RL's adapters sit on its result
            warmed = any(r.get("phase") == "sft" for r in done)
            if warmed and not (self.warm_dir / "config.json").is_file():
                raise ConfigError(
                    f"{self.run_dir} finished its warm start but has no {self.warm_dir.name}/ (the RL phase's "
                    "base); start the run again without --resume"
                )
            self.actor = build_policy(
                self.cfg, warmed, self.warm_dir if warmed else cfg.model.path, warm_start=not warmed
            )
        self.split = split = split_tasks(cfg)
        self.tasks, self.val_tasks, self.val_also_tasks = list(split.train), split.val, split.also
        if cfg.train.dev_size:
            self.console.print(
                f"dev split (train.dev_size): validating on {len(split.val)} training tasks the starting weights "
                f"never imitated; the {len(split.set_aside)} held-out tasks are set aside, neither trained on "
                "nor validated"
            )
        random.Random(cfg.run.seed).shuffle(self.tasks)
        key, _ = setting_key(cfg.model, cfg.rollout)
        estimates = load_estimates(cfg.train.tasks, key) if cfg.train.curriculum != "none" else {}
        self.curriculum = Curriculum(
            self.tasks, cfg.train.curriculum, estimates, cfg.run.seed, cfg.train.edge_draws or None
        )
        self.backend.join_cluster()  # first: the actor's ranks may be Ray actors too
        with self.console.status("loading the policy (actor) and starting the engine"):
            await in_own_thread(self.actor.setup)
            if isinstance(self.actor, ShardedActor) and self.actor.on_ray:
                self.console.print(self.actor.describe())
            self.engine = await self._start_engine()
        self.clock = IdleClock(self.engine)
        self.ledger = SampledLedger(self.clock)
        if self.backend.on_ray:
            with self.console.status("placing the rollout workers on the Ray cluster"):
                await self.backend.serve(self.ledger)  # every rollout samples through the ledger
            self.console.print(self.backend.describe())
        else:
            await self.backend.serve(self.ledger)
        held = {t.id for t in self.held_out()}
        chat = self._chat()
        guidance = Guidance(cfg.train, cfg.rollout, chat, held) if cfg.train.guide_share > 0 else None
        t = cfg.train
        credit = (
            PatchCredit(t.patch_credit, t.patch_credit_steps or t.steps, gold_patches(self.tasks), t.patch_credit_precise)
            if t.patch_credit > 0
            else None
        )
        self.rollouts = TrainingRollouts(
            cfg, self.backend, self.ledger, self.curriculum, guidance, lambda: self.version - self._engine_base, credit
        )
        if cfg.train.mode == "async":
            self.rollouts.start_producer()
        found = checkpoints.latest(self.run_dir) if resume else None
        if found is not None:
            folder, state = found
            await in_own_thread(self.actor.load, folder / "actor")
            self.curriculum.load(state.get("curriculum") or {"cursor": state.get("cursor", 0)})
            self.start_step = int(state["step"]) + 1
            dropped = checkpoints.truncate_metrics(self.run_dir / "metrics.jsonl", int(state["step"]))
            row = state.get("row")
            recorded = any(r.get("step") == int(state["step"]) for r in checkpoints.read_metrics(self.run_dir / "metrics.jsonl"))
            if row is not None and not recorded and self._validates(row):
                self.owed = row  # the stop came during its validation (the checkpoint is saved first)
            else:
                checkpoints.restore_row(self.run_dir / "metrics.jsonl", row)
            await self._sync(int(state["policy_version"]))
            lost = mark_lost_steps(self.run_dir, int(state["step"]))  # the run's store is open (run())
            self.console.print(
                f"resumed from {folder} (step {state['step']}); {dropped} metric rows of lost steps dropped"
                + (f", {lost} trajectories of them kept and marked lost" if lost else "")
            )
        elif resume:
            lost = mark_lost_steps(self.run_dir, 0)  # step 1 is done again: what it had rolled out is lost
            self.console.print(
                f"no checkpoint in {self.run_dir}/checkpoints yet: starting from step 1"
                + (f" ({lost} trajectories of the lost steps kept and marked lost)" if lost else "")
            )
        self.rows = checkpoints.read_metrics(self.run_dir / "metrics.jsonl")
        self.demonstrated = read_demonstrated(self.run_dir) or read_demonstrated(cfg.model.path)

    async def _start_engine(self) -> Engine:
        """The engine the run samples from, started (:meth:`RolloutBackend.start_engine`); with engine
        replicas launched on the Ray cluster, weights are fanned out to them through Ray
        (:class:`~coderl.train.fanout.FanOutSync`)."""
        cfg = self.cfg
        engine = await self.backend.start_engine()
        replicas = self.backend.replicas
        if replicas is not None:
            lora = cfg.actor.lora_rank > 0 and (
                cfg.train.weight_sync == "lora" or (cfg.train.weight_sync == "auto" and not cfg.sft.before_rl)
            )  # after a full-weight warm start the replicas' base is not the policy's (choose_sync)
            self.weight_sync = FanOutSync(replicas, lora, self.run_dir / "weights")
            self.console.print(f"engine replicas ({cfg.cluster.engine_server}): {', '.join(replicas.urls)}")
        return engine

    def _chat(self) -> ChatFormat:
        assert self.backend.contexts is not None
        return self.backend.contexts.chat

    async def close(self) -> None:
        await self.backend.stop_workers()  # the last rollouts' sandboxes, and the Ray workers
        await in_own_thread(self.actor.close)  # before the cluster goes: its ranks may be Ray actors
        await self.backend.stop()
        self.engine = None

    # ------------------------------------------------------------------ the run
    async def run(self, resume: bool = False) -> Path:
        """Set up, train ``train.steps`` steps (from the checkpoint when resuming), write the report."""
        cfg = self.cfg
        sinks = MetricSinks(self.run_dir, cfg.train, cfg.model_dump(mode="json"))
        store = TrajectoryStore(self.run_dir)
        self.peaks = PhasePeaks()  # each phase's peak memory, for metrics.jsonl and the summary
        try:
            await self.setup(resume)
            earlier = phase_seconds(self.rows)  # phases an earlier process ran (a resume)
            with progress_bars(self.console, name="train") as progress:
                # its clock starts with the RL steps: their rate and ETA leave the phases before them out
                bar = progress.add_task(
                    "steps", total=cfg.train.steps, completed=self.start_step - 1, info="", start=False
                )
                if (self.val_tasks or self.val_also_tasks) and not any(r.get("step") == 0 for r in self.rows):
                    # set-up: the process's start to here (imports, tasks, engine, actor, sandboxes)
                    start = {"step": 0, "phase": "start", "policy_version": self.version, "setup_s": round(process_seconds(), 2)}
                    start.update(await (await self._validation(progress)).run(0))
                    self._record(start, sinks)
                if cfg.sft.before_rl and not any(r.get("phase") == "sft" for r in self.rows):
                    self._record(await self._warm_start(progress), sinks)
                if self.owed is not None:  # a step's validation cut short: run it, then record the step
                    owed, self.owed = self.owed, None
                    # the sets that finished before the stop stored their samples: not twice
                    shutil.rmtree(step_folder(self.run_dir, int(owed["step"])), ignore_errors=True)
                    owed.update(await (await self._validation(progress)).run(int(owed["step"])))
                    self._record(owed, sinks)
                    self.console.print(f"step {owed['step']}: validated again (the stop came during its validation)")
                if cfg.train.calibrate_tasks and self.start_step == 1 and not any(
                    r.get("phase") == "calibrate" for r in self.rows
                ):
                    self._record(await self._calibrate(progress), sinks)
                taken = [r for r in self.rows if r.get("phase") is None and r.get("step", 0) >= 1]
                budget = RLBudget(
                    cfg.train.rl_minutes, cfg.train.steps, taken, room_s=self._rl_room(earlier, taken),
                    run_minutes=cfg.train.run_minutes, min_steps=cfg.train.min_steps,
                )  # fmt: skip
                first = self.start_step
                if budget.spent_before_resume():
                    self.console.print(f"{budget.bound_name()}: spent before the resume; no step left")
                    first = cfg.train.steps + 1
                progress.start_task(bar)
                for step in range(first, cfg.train.steps + 1):
                    last = budget.last(step)
                    row = await self.step(step, store, progress, last)
                    budget.done(row)
                    self._record(row, sinks)
                    # A live bar shows the latest step's line; plain progress would print it twice.
                    info = "" if isinstance(progress, PlainProgress) else summary_line(row)
                    progress.update(bar, advance=1, info=info)
                    self.console.print(f"step {step}: {summary_line(row)}")
                    if last:
                        if step < cfg.train.steps:
                            self.console.print(budget.stopped_line(step))
                        break
        finally:
            if self.producer is not None:
                await self.producer.stop()
            store.close()
            sinks.close()
            self.peaks.close()
            await self.close()
        return self.finish()

    def _rl_room(self, earlier: float, taken: list[dict[str, Any]]) -> float | None:
        """Seconds train.run_minutes leaves all the RL steps, those before a resume included
        (``earlier``: seconds of the phases an earlier process ran; ``taken``: its RL steps' rows, which
        the budget counts against this room itself); None without that bound. Prints what is left."""
        t = self.cfg.train
        minutes = t.run_minutes
        if minutes is None:
            return None
        spent = process_seconds() + earlier
        final = last_validation_seconds(self.rows) if self.val_tasks or self.val_also_tasks else 0.0
        room = minutes * 60 - spent - final
        before = sum(float(r.get("step_s", 0.0)) for r in taken)
        left = room - before
        shown = f"{left / 60:.1f} min" if left > 0 else "no time"
        self.console.print(
            f"train.run_minutes={minutes:g}: {(spent + before) / 60:.1f} min spent, the final validation "
            f"~{final / 60:.1f} min: the RL steps get {shown} (at least "
            f"{min(t.min_steps, t.steps)} steps, at most {t.steps})"
        )
        return room

    def _record(self, row: dict[str, Any], sinks: MetricSinks) -> None:
        """A phase's or step's row, with the phase's peak memory, to the sinks and the run's rows."""
        mark_peak(row, self.peaks)
        sinks.write(row)
        self.rows.append(row)

    def finish(self) -> Path:
        """Print the run's summary and write ``report.html`` from ``metrics.jsonl``."""
        return finish_report(self.run_dir, self.console)

    # ------------------------------------------------------------------ one step
    async def step(
        self, step: int, store: TrajectoryStore, progress: Progress, last: bool | None = None
    ) -> dict[str, Any]:
        """One RL step; ``last`` (default: step == train.steps) saves a checkpoint and validates."""
        cfg = self.cfg
        last = step == cfg.train.steps if last is None else last
        assert self.rollouts is not None and self.clock is not None
        timer = StageTimer()
        began = time.perf_counter()
        idle = self.clock.idle_s(began)
        waited = self.producer.waited_s if self.producer is not None else 0.0
        retried = self.backend.retried
        with timer("rollout"):
            results, stale, refills, extra = await self.rollouts.for_step(step, self.version, store, progress, last)
        with timer("check"):
            trainable, token_mismatch = self.rollouts.trainable(results, stale)
        row = rollout_metrics(step, results)
        row.update(signal_metrics(results, gold_patches(self.tasks)))
        row.update(extra)
        self.signal.in_use.warm_start = bool(self.demonstrated)  # not advised to a warm-started policy
        warning = self.signal.observe(step, results)
        row["starved_steps"] = self.signal.streak
        if warning is not None:
            row["signal_warning"] = warning
            log.warning("%s", warning)
            self.console.print(f"[bold yellow]warning:[/] {warning}")
        if self.backend.on_ray:  # rollouts started again because their worker died
            row["rollout_retries"] = self.backend.retried - retried
        row.update(
            token_mismatch=token_mismatch,
            refill_rounds=refills,
            trained_samples=len(trainable),
            trained_sequences=sum(len(r.trajectory.sequences()) for r in trainable),
            kl=0.0,
            entropy=0.0,
        )
        if trainable:
            rollouts = [r.trajectory for r in trainable]
            row.update(
                await update_policy(
                    self.actor, cfg.algo, cfg.rollout.temperature, self.max_response, rollouts, timer, progress,
                    f"step {step} update",
                )
            )  # fmt: skip
            row["trained_samples"] -= row.get("left_out_samples", 0)
            if row["optimizer_steps"]:
                with timer("sync"):
                    await self._sync(self.version + 1)
            else:  # the weights did not change: the engine keeps its version
                log.warning("step %d: nothing to train on (algo.mask_exits left every sample out)", step)
        else:
            row.update(NOTHING_TRAINED)
            why = (
                "dynamic sampling kept no group (every group's rewards were equal)"
                if cfg.algo.dynamic_sampling and results and token_mismatch == 0
                else "no trajectory passed the checks"
            )
            log.warning("step %d: nothing to train on (%s)", step, why)
        row["policy_version"] = self.version
        if last:
            row["last_step"] = True
        if step % cfg.train.save_every == 0 or last:
            with timer("save"):
                await in_own_thread(self._save, step, {**row, **timer.row()})
        if self._validates(row):
            with timer("validate"):
                row.update(await (await self._validation(progress)).run(step))
        row.update(timer.row())
        ended = time.perf_counter()
        wall = ended - began
        trainer_idle = (
            self.producer.waited_s - waited
            if self.producer is not None
            else row["stage_s"].get("rollout", 0.0)
        )
        row.update(
            engine_idle_fraction=round((self.clock.idle_s(ended) - idle) / max(wall, 1e-9), 4),
            trainer_idle_fraction=round(trainer_idle / max(wall, 1e-9), 4),
        )
        return row

    def _validates(self, row: dict[str, Any]) -> bool:
        """Whether the step of ``row`` validates: the last one (``last_step``) and every ``train.val_every``-th."""
        every = self.cfg.train.val_every
        return bool(self.val_tasks or self.val_also_tasks) and (
            bool(row.get("last_step")) or bool(every and int(row["step"]) % every == 0)
        )

    async def _warm_start(self, progress: Progress) -> dict[str, Any]:
        """Supervised warm start on ``sft.data`` (never held-out tasks), then the RL phase's fresh
        optimizer and reference, the weights synced, a checkpoint (step 0) and a held-out validation."""
        cfg = self.cfg
        t0 = time.perf_counter()
        with self.console.status("making the warm start's demonstrations"):
            demos, made = await build_demos(cfg, self._chat(), self.held_out())
        check_demos(demos, made)
        unused = own_settings_unused(cfg)
        if unused:
            self.console.print(
                f"{unused}: not applied — with actor.lora_rank=0 the warm start trains the RL phase's own actor, "
                "with its actor.* settings"
            )
        before = read_demonstrated(cfg.model.path)  # model.path may be a warm start itself
        write_demonstrated(self.run_dir, demos, before)
        self.demonstrated = {d.task_id for d in demos} | before
        assert self.engine is not None
        released = await self.engine.release_weights()  # nothing samples until the sync below replaces them
        bar = progress.add_task("supervised warm start", total=sft_steps(len(demos), cfg.sft), info="")
        nll: list[float] = []

        def on_step(row: dict[str, Any]) -> None:
            nll.append(row["nll"])
            progress.update(bar, advance=1, info=f"nll {row['nll']:.3f}")

        sft_rows = await in_own_thread(train_sft, self.actor, demos, cfg.sft, cfg.run.seed, on_step)
        progress.remove_task(bar)
        sft_peak = round(self.peaks.mark())  # demonstrations and supervised steps; the row's covers what follows
        with (self.run_dir / "sft.jsonl").open("w") as out:
            out.writelines(json.dumps(r) + "\n" for r in sft_rows)
        if cfg.actor.lora_rank > 0:  # the RL phase trains LoRA adapters on the warm start's weights
            await in_own_thread(export_checkpoint, self.actor, cfg.model, self.warm_dir)
            write_demonstrated(self.warm_dir, demos, before)
            await in_own_thread(self.actor.close)
            self.actor = build_policy(self.cfg, True, self.warm_dir)
            await in_own_thread(self.actor.setup)
        self.actor.reset_optimizer()
        self.actor.snapshot_reference()
        await self._sync(self.version + 1)
        row: dict[str, Any] = {
            "step": 0, "phase": "sft", "policy_version": self.version, "sft_demos": len(demos),
            "sft_steps": len(sft_rows), "sft_nll_first": nll[0], "sft_nll_last": nll[-1], "sft_sources": made,
            "sft_rss_peak_mb": sft_peak, "sft_engine_released": released,
        }  # fmt: skip
        self.console.print(
            f"warm start: {len(demos)} demonstrations, {len(sft_rows)} steps, nll {nll[0]:.3f} -> {nll[-1]:.3f}"
        )
        if self.val_tasks or self.val_also_tasks:
            row.update(await (await self._validation(progress)).run(0, name="sft"))
        row["sft_s"] = time.perf_counter() - t0
        await in_own_thread(self._save, 0, row)
        return row

    async def _calibrate(self, progress: Progress) -> dict[str, Any]:
        """The calibration pass (:func:`coderl.train.calibrate.calibrate`), saved with step 0's checkpoint
        so that a resumed run keeps the estimates."""
        assert self.curriculum is not None and self.rollouts is not None
        rollouts = self.rollouts

        async def roll(groups: list[RolloutGroup]) -> list[RolloutResult]:
            return await rollouts.rollout(groups, progress, "calibration")

        row = await calibrate(self.cfg, self.tasks, self.demonstrated, self.curriculum, roll, self.run_dir, self.console)
        row["policy_version"] = self.version
        await in_own_thread(self._save, 0, row)
        return row

    # ------------------------------------------------------------------ stages
    async def _validation(self, progress: Progress) -> Validation:
        """Held-out validation (:mod:`coderl.train.validation`) through this run's rollouts; its sets
        run at once and share one set of bounds (``rollout.max_sandboxes`` holds for them together)."""
        assert self.rollouts is not None
        rollouts = self.rollouts
        bounds = await rollouts.shared_bounds()

        async def roll(groups: list[RolloutGroup], label: str, temperature: float | None) -> list[RolloutResult]:
            return await rollouts.rollout(groups, progress, label, temperature, bounds)

        c = self.cfg
        also = [] if c.train.dev_size else list(zip(c.train.val_also, self.val_also_tasks, strict=True))
        return Validation(c.train, c.rollout, self.run_dir, self.console, roll, self.val_tasks, also)

    async def _sync(self, version: int) -> None:
        """Push the actor's weights to the engine; the run's policy version becomes ``version``."""
        assert self.engine is not None
        await self.weight_sync.push(self.actor, self.engine, version)
        self.version = version
        self._engine_base = self.engine.policy_version

    def _save(self, step: int, row: dict[str, Any]) -> None:
        """The checkpoint of ``step``; it carries the step's metrics row, since a kill between the
        checkpoint and the metrics file must lose neither."""
        tmp = checkpoints.begin(self.run_dir, step)
        self.actor.save(tmp / "actor")
        assert self.curriculum is not None
        state = {
            "step": step,
            # async: the groups still rolling out die with the run; a resumed run draws their tasks first
            "curriculum": self.curriculum.state(self.producer.pending() if self.producer is not None else None),
            "policy_version": self.version,
            "row": row,
        }
        checkpoints.commit(self.run_dir, tmp, step, state, self.cfg.train.keep_checkpoints)


def build_policy(cfg: Config, lora: bool, model_path: Path | None, warm_start: bool = False) -> Policy:
    """The actor of ``cfg.actor`` on ``model_path``, with LoRA adapters or full weights; ``warm_start``:
    the warm start's own (``sft.gradient_checkpointing`` and ``sft.micro_batch_tokens`` where set)."""
    update: dict[str, Any] = {"seed": cfg.run.seed} | ({} if lora else {"lora_rank": 0})
    actor = cfg.sft.actor_config(cfg.actor) if warm_start else cfg.actor
    return build_actor(
        actor.model_copy(update=update), model_path, cfg.model.cache_dir,
        value_head=cfg.algo.advantage == "gae", cluster=cfg.cluster,
    )  # fmt: skip


def own_settings_unused(cfg: Config) -> str:
    """The warm start's own actor settings (``sft.gradient_checkpointing``, ``sft.micro_batch_tokens``)
    that ``coderl train`` cannot apply, comma-separated: with a full-weight RL phase the warm start
    trains the RL phase's actor itself (empty when every one applies or none is set)."""
    if cfg.actor.lora_rank > 0:
        return ""
    own = cfg.sft.actor_config(cfg.actor)
    return ", ".join(f"sft.{k}" for k in SFT_ACTOR_KEYS if getattr(own, k) != getattr(cfg.actor, k))


def split_tasks(cfg: Config) -> TaskSplit:
    """Training, held-out and ``train.val_also`` tasks (or a dev split and the held-out tasks set
    aside), disjoint (module doc of :mod:`coderl.tasks.split`)."""
    t = cfg.train
    check_gold_kinds(cfg.sft.gold_kinds)  # refused now, not after the step-0 validation
    if cfg.sft.before_rl:
        check_sources(cfg.sft.data)
    split = train_and_held_out(
        t.tasks, t.val_tasks, t.val_size, t.val_also, t.dev_size, read_demonstrated(cfg.model.path)
    )
    if split.removed:
        log.warning(
            "%d task(s) removed from training (held out, or fixing a function a held-out task fixes): %s",
            len(split.removed),
            ", ".join(split.removed[:10]),
        )
    return split
