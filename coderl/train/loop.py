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
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from coderl.chat import ChatFormat
from coderl.cluster.engines import RayEngines
from coderl.cluster.ray_rollouts import RayRollouts, connect, import_ray
from coderl.config import Config
from coderl.engine import create_engine
from coderl.engine.base import Engine
from coderl.errors import ConfigError
from coderl.memory import PhasePeaks
from coderl.progress import progress_bars
from coderl.rl import keep_groups
from coderl.rollout.context import ContextFactory
from coderl.rollout.runner import (
    RolloutBounds,
    RolloutGroup,
    RolloutResult,
    RolloutSettings,
    run_rollouts,
    task_groups,
)
from coderl.rollout.store import TrajectoryStore
from coderl.rollout.teardown import Teardowns
from coderl.tasks.calibration import load_estimates, setting_key
from coderl.tasks.split import train_and_held_out
from coderl.threads import in_own_thread
from coderl.train import checkpoints
from coderl.train.actor import Policy, Scored
from coderl.train.batch import BatchLoss, build_batch, merged_metrics, mini_batches, padded, sequences_of
from coderl.train.curriculum import Curriculum
from coderl.train.fanout import FanOutSync
from coderl.train.guidance import Guidance
from coderl.train.idle import IdleClock
from coderl.train.ledger import SampledLedger
from coderl.train.loggers import MetricSinks
from coderl.train.metrics import (
    StageTimer,
    mark_peak,
    phase_memory,
    phase_minutes,
    rollout_metrics,
    run_summary,
    summary_line,
)
from coderl.train.producer import Group, RolloutProducer, lag, lag_counts, stale_groups
from coderl.train.ranks import ShardedActor, build_actor
from coderl.train.report import write_report
from coderl.train.sft import (
    build_demos,
    check_demos,
    check_gold_kinds,
    read_demonstrated,
    sft_steps,
    train_sft,
    write_demonstrated,
)
from coderl.train.signal import SignalWatch, signal_metrics
from coderl.train.sync import WeightSync, choose_sync, export_checkpoint
from coderl.train.validation import Validation, validation_table
from coderl.types import Task, Trajectory

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
        self.actor = self._build_actor(cfg.actor.lora_rank > 0, cfg.model.path)
        self.weight_sync: WeightSync = choose_sync(
            cfg.train, cfg.engine, cfg.actor, cfg.model, run_dir, warm_start=cfg.sft.before_rl
        )
        self.settings = RolloutSettings.from_config(cfg.rollout, cfg.tasks)
        r = cfg.rollout
        self.max_response = min(r.max_tokens * r.max_turns, r.max_total_tokens)
        """Most model tokens one trajectory can hold (the overlong penalty's and length norm's constant)."""
        self._given_engine = engine
        self.engine: Engine | None = None
        self.clock: IdleClock | None = None
        self.ledger: SampledLedger | None = None
        self.producer: RolloutProducer | None = None  # train.mode=async: the rollouts run ahead
        self.remote: RayRollouts | None = None  # cluster.backend=ray: the rollout workers
        self.teardowns = Teardowns()  # rollouts' sandboxes going down in the background (drained at close)
        self.replicas: RayEngines | None = None  # cluster.engine_replicas: launched engine servers
        self._ray_started = False  # this run started a local Ray cluster (and shuts it down)
        self.contexts: ContextFactory | None = None
        self.tasks: list[Task] = []
        self.val_tasks: list[Task] = []
        self.val_also_tasks: list[Task] = []
        self.curriculum: Curriculum | None = None  # which tasks each step draws (saved in checkpoints)
        self.version = 0  # updates applied to the policy
        self._engine_base = 0  # engine.policy_version when self.version was last set
        self.start_step = 1
        self.rows: list[dict[str, Any]] = []
        self._draws = 0  # rollout rounds so far: names fresh groups
        self._rl_step = 1  # the RL step being drawn for (the guidance's schedule)
        self.guidance: Guidance | None = None  # guided samples (train.guide_share > 0)
        self.demonstrated: set[str] = set()  # tasks the warm start imitated (this run's, or model.path's)
        self.signal = SignalWatch(cfg.train.signal_patience, cfg.train.group_size)
        """Steps in a row whose groups could not teach, and the warning when there are too many."""

    # ------------------------------------------------------------------ set-up
    @property
    def warm_dir(self) -> Path:
        """Where a warm start under an RL phase with LoRA leaves its weights: the LoRA actor's base."""
        return self.run_dir / "warm"

    def _build_actor(self, lora: bool, model_path: Path | None) -> Policy:
        """The actor of ``cfg.actor`` on ``model_path``, with LoRA adapters or full weights."""
        cfg = self.cfg
        update: dict[str, Any] = {"seed": cfg.run.seed} | ({} if lora else {"lora_rank": 0})
        return build_actor(
            cfg.actor.model_copy(update=update), model_path, cfg.model.cache_dir,
            value_head=cfg.algo.advantage == "gae", cluster=cfg.cluster,
        )  # fmt: skip

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
            self.actor = self._build_actor(warmed, self.warm_dir if warmed else cfg.model.path)
        self.tasks, self.val_tasks = self._split_tasks()
        random.Random(cfg.run.seed).shuffle(self.tasks)
        key, _ = setting_key(cfg.model, cfg.rollout)
        estimates = load_estimates(cfg.train.tasks, key) if cfg.train.curriculum != "none" else {}
        self.curriculum = Curriculum(
            self.tasks, cfg.train.curriculum, estimates, cfg.run.seed, cfg.train.edge_draws or None
        )
        if cfg.cluster.backend == "ray":  # joined first: the actor's ranks may be Ray actors too
            self.remote = RayRollouts(cfg)
            self._ray_started = connect(cfg.cluster, self.remote.namespace)
        with self.console.status("loading the policy (actor) and starting the engine"):
            await in_own_thread(self.actor.setup)
            if isinstance(self.actor, ShardedActor) and self.actor.on_ray:
                self.console.print(self.actor.describe())
            self.engine = await self._start_engine()
        chat = ChatFormat.for_model(cfg.model)
        self.contexts = ContextFactory(cfg.rollout, cfg.sandbox, chat)
        held = {t.id for t in [*self.val_tasks, *self.val_also_tasks]}
        self.guidance = Guidance(cfg.train, cfg.rollout, chat, held) if cfg.train.guide_share > 0 else None
        self.clock = IdleClock(self.engine)
        self.ledger = SampledLedger(self.clock)
        if self.remote is not None:
            with self.console.status("placing the rollout workers on the Ray cluster"):
                await self.remote.start(self.ledger, str(cfg.model.path or "coderl-policy"))
            self.console.print(self.remote.describe())
        if cfg.train.mode == "async":
            bounds = RolloutBounds(self.ledger, self.settings)
            self.producer = RolloutProducer(
                self._draw,
                lambda group: self._roll_group(group, bounds),
                cfg.train.tasks_per_step * cfg.train.max_staleness,
            )
        found = checkpoints.latest(self.run_dir) if resume else None
        if found is not None:
            folder, state = found
            await in_own_thread(self.actor.load, folder / "actor")
            self.curriculum.load(state.get("curriculum") or {"cursor": state.get("cursor", 0)})
            self.start_step = int(state["step"]) + 1
            dropped = checkpoints.truncate_metrics(self.run_dir / "metrics.jsonl", int(state["step"]))
            checkpoints.restore_row(self.run_dir / "metrics.jsonl", state.get("row"))
            await self._sync(int(state["policy_version"]))
            self.console.print(
                f"resumed from {folder} (step {state['step']}); {dropped} metric rows of lost steps dropped"
            )
        elif resume:
            self.console.print(f"no checkpoint in {self.run_dir}/checkpoints yet: starting from step 1")
        self.rows = checkpoints.read_metrics(self.run_dir / "metrics.jsonl")
        self.demonstrated = read_demonstrated(self.run_dir) or read_demonstrated(cfg.model.path)

    async def _start_engine(self) -> Engine:
        """The engine the run samples from, started: the one given, the engine section's, or (with
        ``cluster.engine_replicas``) servers launched on the Ray cluster behind a router, whose weights
        are then fanned out through Ray (:class:`~coderl.train.fanout.FanOutSync`)."""
        cfg = self.cfg
        if self.remote is not None:
            if cfg.cluster.engine_replicas and self._given_engine is None:
                self.replicas = RayEngines(cfg, self.remote.namespace)
                engine = await self.replicas.start()
                lora = cfg.actor.lora_rank > 0 and (
                    cfg.train.weight_sync == "lora" or (cfg.train.weight_sync == "auto" and not cfg.sft.before_rl)
                )  # after a full-weight warm start the replicas' base is not the policy's (choose_sync)
                self.weight_sync = FanOutSync(self.replicas, lora, self.run_dir / "weights")
                self.console.print(
                    f"engine replicas ({cfg.cluster.engine_server}): {', '.join(self.replicas.urls)}"
                )
                return engine
        engine = self._given_engine or create_engine(cfg.engine, cfg.model, seed=cfg.run.seed)
        await engine.start()
        return engine

    def _split_tasks(self) -> tuple[list[Task], list[Task]]:
        """Training and held-out tasks, disjoint (module doc of :mod:`coderl.tasks.split`)."""
        t = self.cfg.train
        check_gold_kinds(self.cfg.sft.gold_kinds)  # refused now, not after the step-0 validation
        train, held, self.val_also_tasks, removed = train_and_held_out(
            t.tasks, t.val_tasks, t.val_size, t.val_also
        )
        if removed:
            log.warning(
                "%d task(s) removed from training (held out, or fixing a function a held-out task fixes): %s",
                len(removed),
                ", ".join(removed[:10]),
            )
        return train, held

    async def close(self) -> None:
        await self.teardowns.drain()  # the last rollouts' sandboxes, taken down in the background
        if self.remote is not None:
            await self.remote.stop()
            self.remote = None
        await in_own_thread(self.actor.close)
        if self.engine is not None:
            await self.engine.stop()
            self.engine = None
        if self.replicas is not None:
            await self.replicas.stop()
            self.replicas = None
        if self._ray_started:
            import_ray().shutdown()
            self._ray_started = False

    # ------------------------------------------------------------------ the run
    async def run(self, resume: bool = False) -> Path:
        """Set up, train ``train.steps`` steps (from the checkpoint when resuming), write the report."""
        cfg = self.cfg
        sinks = MetricSinks(self.run_dir, cfg.train, cfg.model_dump(mode="json"))
        store = TrajectoryStore(self.run_dir)
        self.peaks = PhasePeaks()  # each phase's peak memory, for metrics.jsonl and the summary
        try:
            await self.setup(resume)
            with progress_bars(self.console, name="train") as progress:
                bar = progress.add_task(
                    "steps", total=cfg.train.steps, completed=self.start_step - 1, info=""
                )
                if (self.val_tasks or self.val_also_tasks) and not any(r.get("step") == 0 for r in self.rows):
                    start = {"step": 0, "phase": "start", "policy_version": self.version}
                    start.update(await self._validation(progress).run(0))
                    mark_peak(start, self.peaks)
                    sinks.write(start)
                    self.rows.append(start)
                if cfg.sft.before_rl and not any(r.get("phase") == "sft" for r in self.rows):
                    warm = await self._warm_start(progress)
                    mark_peak(warm, self.peaks)
                    sinks.write(warm)
                    self.rows.append(warm)
                if cfg.train.calibrate_tasks and self.start_step == 1 and not any(
                    r.get("phase") == "calibrate" for r in self.rows
                ):
                    calibration = await self._calibrate(progress)
                    mark_peak(calibration, self.peaks)
                    sinks.write(calibration)
                    self.rows.append(calibration)
                for step in range(self.start_step, cfg.train.steps + 1):
                    row = await self.step(step, store, progress)
                    mark_peak(row, self.peaks)
                    sinks.write(row)
                    self.rows.append(row)
                    progress.update(bar, advance=1, info=summary_line(row))
                    self.console.print(f"step {step}: {summary_line(row)}")
        finally:
            if self.producer is not None:
                await self.producer.stop()
            store.close()
            sinks.close()
            self.peaks.close()
            await self.close()
        return self.finish()

    def finish(self) -> Path:
        rows = checkpoints.read_metrics(self.run_dir / "metrics.jsonl")
        summary = run_summary(rows)
        phases = phase_minutes(rows)
        if phases:
            self.console.print(
                "phases (minutes): " + " | ".join(f"{name} {minutes:.1f}" for name, minutes in phases)
                + f" | total {sum(m for _, m in phases):.1f}",
                highlight=False,
            )
        peaks = phase_memory(rows)
        if peaks:
            self.console.print(
                "peak memory of this process (GB): " + " | ".join(f"{name} {mb / 1024:.1f}" for name, mb in peaks),
                highlight=False,
            )
        for line in validation_table(rows):
            self.console.print(line, highlight=False, soft_wrap=True)
        if "held-out pass@1" in summary:
            self.console.print(f"held-out pass@1 (start -> end): {summary['held-out pass@1']}")
        return write_report(self.run_dir, rows, summary)

    # ------------------------------------------------------------------ one step
    async def step(self, step: int, store: TrajectoryStore, progress: Progress) -> dict[str, Any]:
        cfg = self.cfg
        self._rl_step = step
        assert self.ledger is not None
        assert self.clock is not None
        timer = StageTimer()
        began, idle = time.perf_counter(), self.clock.idle_s()
        waited = self.producer.waited_s if self.producer is not None else 0.0
        retried = self.remote.retried if self.remote is not None else 0
        extra: dict[str, Any] = {}
        stale: list[RolloutResult] = []
        if self.producer is None:
            self.ledger.clear()
            with timer("rollout"):
                results, refills = await self._collect(step, progress)
            for r in results:
                store.add(r.trajectory, r.record(step=step))
        else:
            with timer("rollout"):
                results, stale, refills = await self._take()
            for r, old in [(r, False) for r in results] + [(r, True) for r in stale]:
                store.add(r.trajectory, r.record(step=step, lag=lag(r, self.version), stale=old))
            lags = [lag(r, self.version) for r in results]
            extra = {
                "stale_dropped": len(stale),
                "policy_lag_mean": sum(lags) / max(len(lags), 1),
                "policy_lag_max": max(lags, default=0),
                "policy_lag_counts": lag_counts(results, self.version),
            }
        with timer("check"):
            trainable, token_mismatch = self._check(results)
            if self.producer is not None:
                for r in results + stale:
                    self.ledger.forget(r.trajectory)
            if cfg.algo.dynamic_sampling:
                keep = _informative_groups(trainable)
                trainable = [r for r in trainable if r.trajectory.group_id in keep]
        row = rollout_metrics(step, results)
        row.update(signal_metrics(results))
        row.update(extra)
        warning = self.signal.observe(step, results)
        row["starved_steps"] = self.signal.streak
        if warning is not None:
            row["signal_warning"] = warning
            log.warning("%s", warning)
            self.console.print(f"[bold yellow]warning:[/] {warning}")
        if self.remote is not None:  # rollouts started again because their worker died
            row["rollout_retries"] = self.remote.retried - retried
        row.update(
            token_mismatch=token_mismatch,
            refill_rounds=refills,
            trained_samples=len(trainable),
            trained_sequences=sum(len(r.trajectory.sequences()) for r in trainable),
            kl=0.0,
            entropy=0.0,
        )
        if trainable:
            row.update(await self._update([r.trajectory for r in trainable], timer, progress, f"step {step} update"))
        else:
            row.update(
                logprob_mismatch=0.0, grad_norm=0.0, update_skipped=1.0, advantage_abs_mean=0.0, trained_tokens=0,
                optimizer_steps=0,
            )
            why = (
                "dynamic sampling kept no group (every group's rewards were equal)"
                if cfg.algo.dynamic_sampling and results and token_mismatch == 0
                else "no trajectory passed the checks"
            )
            log.warning("step %d: nothing to train on (%s)", step, why)
        row["policy_version"] = self.version
        if step % cfg.train.save_every == 0 or step == cfg.train.steps:
            with timer("save"):
                await in_own_thread(self._save, step, {**row, **timer.row()})
        if (self.val_tasks or self.val_also_tasks) and (
            step == cfg.train.steps or (cfg.train.val_every and step % cfg.train.val_every == 0)
        ):
            with timer("validate"):
                row.update(await self._validation(progress).run(step))
        row.update(timer.row())
        wall = time.perf_counter() - began
        trainer_idle = (
            self.producer.waited_s - waited
            if self.producer is not None
            else row["stage_s"].get("rollout", 0.0)
        )
        row.update(
            engine_idle_fraction=round((self.clock.idle_s() - idle) / max(wall, 1e-9), 4),
            trainer_idle_fraction=round(trainer_idle / max(wall, 1e-9), 4),
        )
        return row

    async def _warm_start(self, progress: Progress) -> dict[str, Any]:
        """Supervised warm start on ``sft.data`` (never held-out tasks), then the RL phase's fresh
        optimizer and reference, the weights synced, a checkpoint (step 0) and a held-out validation."""
        cfg = self.cfg
        assert self.contexts is not None
        t0 = time.perf_counter()
        with self.console.status("making the warm start's demonstrations"):
            demos, made = await build_demos(cfg, self.contexts.chat, [*self.val_tasks, *self.val_also_tasks])
        check_demos(demos, made)
        write_demonstrated(self.run_dir, demos)
        self.demonstrated = {d.task_id for d in demos}
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
            write_demonstrated(self.warm_dir, demos)
            await in_own_thread(self.actor.close)
            self.actor = self._build_actor(True, self.warm_dir)
            await in_own_thread(self.actor.setup)
        self.actor.reset_optimizer()
        self.actor.snapshot_reference()
        await self._sync(self.version + 1)
        row: dict[str, Any] = {
            "step": 0, "phase": "sft", "policy_version": self.version, "sft_demos": len(demos),
            "sft_steps": len(sft_rows), "sft_nll_first": nll[0], "sft_nll_last": nll[-1], "sft_sources": made,
            "sft_rss_peak_mb": sft_peak,
        }  # fmt: skip
        self.console.print(
            f"warm start: {len(demos)} demonstrations, {len(sft_rows)} steps, nll {nll[0]:.3f} -> {nll[-1]:.3f}"
        )
        if self.val_tasks or self.val_also_tasks:
            row.update(await self._validation(progress).run(0, name="sft"))
        row["sft_s"] = time.perf_counter() - t0
        await in_own_thread(self._save, 0, row)
        return row

    async def _calibrate(self, progress: Progress) -> dict[str, Any]:
        """``train.calibrate_tasks`` training tasks, ``train.calibrate_samples`` times each, under the
        policy RL starts from: the curriculum's estimates start from these (earlier ones, of other
        weights, are dropped). Stored under ``calibration/``; never trained on."""
        cfg = self.cfg
        t = cfg.train
        assert self.curriculum is not None
        began = time.perf_counter()
        pool, which = calibration_pool(self.tasks, self.demonstrated, t.calibrate_from)
        picked = random.Random(cfg.run.seed).sample(pool, min(t.calibrate_tasks, len(pool)))
        results = await self._rollout(task_groups(picked, t.calibrate_samples, tag="cal."), progress, "calibration")
        store = TrajectoryStore(self.run_dir / "calibration")
        for r in results:
            store.add(r.trajectory, r.record(step=0))
        store.close()
        self.curriculum.restart(results)
        rates = [e.rate for tid in {x.id for x in picked} if (e := self.curriculum.counts.get(tid)) and e.rate is not None]
        row: dict[str, Any] = {
            "step": 0, "phase": "calibrate", "policy_version": self.version,
            "calibrate_tasks": len(picked), "calibrate_samples": t.calibrate_samples,
            "calibrate_edge": sum(1 for p in rates if 0 < p < 1), "calibrate_always": sum(1 for p in rates if p == 1),
            "calibrate_never": sum(1 for p in rates if p == 0),
            "calibrate_pass_rate": sum(r.resolved for r in results) / max(len(results), 1),
            "calibrate_s": round(time.perf_counter() - began, 2),
        }  # fmt: skip
        self.console.print(
            f"calibration: {len(picked)} {which} tasks x {t.calibrate_samples} samples at T={cfg.rollout.temperature:g}: "
            f"{row['calibrate_edge']} sometimes solved (the curriculum draws these first), {row['calibrate_always']} "
            f"always, {row['calibrate_never']} never; pass rate {row['calibrate_pass_rate']:.0%} "
            f"({row['calibrate_s'] / 60:.1f} min)"
        )
        await in_own_thread(self._save, 0, row)  # a resumed run keeps the estimates
        return row

    # ------------------------------------------------------------------ stages
    async def _collect(self, step: int, progress: Progress) -> tuple[list[RolloutResult], int]:
        """Roll out and grade this step's groups; DAPO dynamic sampling refills uninformative ones."""
        cfg = self.cfg
        results = await self._rollout(self._draw(cfg.train.tasks_per_step), progress, f"step {step} rollout")
        refills = 0
        while cfg.algo.dynamic_sampling and refills < cfg.train.max_refill_rounds:
            missing = cfg.train.tasks_per_step - len(_informative_groups(results))
            if missing <= 0:
                break
            refills += 1
            results += await self._rollout(self._draw(missing), progress, f"step {step} refill {refills}")
        assert self.curriculum is not None
        self.curriculum.update(results)
        return results, refills

    async def _take(self) -> tuple[list[RolloutResult], list[RolloutResult], int]:
        """train.mode=async: this step's groups from the producer, as (kept, stale, refill rounds).
        Stale groups (and, with dynamic sampling, groups whose rewards are all equal, which are kept
        like :meth:`_collect` keeps them and left out at the check) are replaced by the next to finish,
        for at most ``train.max_refill_rounds`` rounds."""
        cfg = self.cfg
        assert self.producer is not None and self.curriculum is not None
        kept: list[Group] = []
        stale: list[Group] = []
        useful = 0
        rounds = 0
        need = cfg.train.tasks_per_step
        while True:
            groups = await self.producer.take(need)
            self.curriculum.update([r for g in groups for r in g])
            fresh, old = stale_groups(groups, self.version, cfg.train.max_staleness)
            stale += old
            kept += fresh
            useful += sum(1 for g in fresh if not cfg.algo.dynamic_sampling or _informative_groups(g))
            need = cfg.train.tasks_per_step - useful
            if need <= 0 or rounds >= cfg.train.max_refill_rounds:
                break
            rounds += 1
        return [r for g in kept for r in g], [r for g in stale for r in g], rounds

    async def _roll_group(self, group: RolloutGroup, bounds: RolloutBounds) -> Group:
        """One group rolled out and graded (asynchronous mode), its versions the run's."""
        assert self.ledger is not None and self.contexts is not None
        if self.remote is not None:
            results = await self.remote.run([group])
        else:
            results = await run_rollouts(
                [group], self.ledger, self.contexts, self.settings, bounds=bounds, teardowns=self.teardowns
            )
        for r in results:  # the engine's version counter -> the run's (see _rollout)
            r.trajectory.label(version_offset=self.version - self._engine_base)
        return results

    def _validation(self, progress: Progress) -> Validation:
        """Held-out validation (:mod:`coderl.train.validation`) through this run's rollouts."""

        async def roll(groups: list[RolloutGroup], label: str, temperature: float | None) -> list[RolloutResult]:
            return await self._rollout(groups, progress, label, temperature)

        c = self.cfg
        return Validation(c.train, c.rollout, self.run_dir, self.console, roll, self.val_tasks, self.val_also_tasks)

    def _draw(self, n: int) -> list[RolloutGroup]:
        """The next ``n`` training tasks (:class:`~coderl.train.curriculum.Curriculum`: a seeded
        shuffled cycle, or the tasks at the policy's edge), each a fresh group of ``train.group_size``
        samples (a task drawn twice makes two groups)."""
        assert self.curriculum is not None
        picked = self.curriculum.draw(n)
        self._draws += 1
        groups = task_groups(picked, self.cfg.train.group_size, tag=f"{self._draws}.")
        return self.guidance.attach(groups, self.curriculum, self._rl_step) if self.guidance else groups

    async def _rollout(
        self,
        groups: list[RolloutGroup],
        progress: Progress,
        label: str,
        temperature: float | None = None,
    ) -> list[RolloutResult]:
        """Roll out and grade ``groups`` here or on the rollout workers (``cluster.backend``), at
        ``temperature`` (None: ``rollout.temperature``)."""
        assert self.ledger is not None and self.contexts is not None
        bar = progress.add_task(label, total=sum(g.size for g in groups), info="")
        try:
            if self.remote is not None:
                results = await self.remote.run(groups, temperature, on_done=lambda _: progress.advance(bar))
            else:
                contexts = (
                    self.contexts if temperature is None else self.contexts.with_temperature(temperature)
                )
                results = await run_rollouts(
                    groups, self.ledger, contexts, self.settings, on_done=lambda _: progress.advance(bar),
                    teardowns=self.teardowns,
                )  # fmt: skip
        finally:
            progress.remove_task(bar)
        for r in results:  # the engine's version counter -> the run's
            r.trajectory.label(version_offset=self.version - self._engine_base)
        return results

    def _check(self, results: list[RolloutResult]) -> tuple[list[RolloutResult], int]:
        """Rollouts fit to train on, and how many sequences failed the sampled-token check (a rollout
        with one failing sequence is not trained on at all)."""
        assert self.ledger is not None
        ok: list[RolloutResult] = []
        bad = 0
        for r in results:
            traj = r.trajectory
            if not traj.response_ids or not any(traj.response_mask):
                continue  # nothing sampled (an infrastructure error before the first turn)
            problems = [p for seq in traj.sequences() if (p := self.ledger.verify(seq)) is not None]
            if problems:
                bad += len(problems)
                log.error("rollout of %s not trained on: %s", traj.task_id, "; ".join(problems))
                continue
            ok.append(r)
        return ok, bad

    async def _update(
        self, rollouts: list[Trajectory], timer: StageTimer, progress: Progress, label: str
    ) -> dict[str, Any]:
        """reference -> values -> advantages -> update -> sync over the trainable rollouts (a bar counts
        the update's optimizer steps)."""
        cfg = self.cfg
        rows = sequences_of(rollouts)
        ref = values = None
        if cfg.algo.kl_coef > 0:
            with timer("reference"):
                ref = [s.logprobs for s in await self._score(rows, reference=True)]
        if cfg.algo.advantage == "gae":  # the critic's predictions before the update
            with timer("values"):
                values = [s.values for s in await self._score(rows, with_values=True) if s.values is not None]
        with timer("advantages"):
            batch = build_batch(rollouts, cfg.algo, self.max_response, ref, values)
            parts = mini_batches(batch, cfg.algo.mini_batches)
        if len(parts) > 1:  # every mini-batch's old policy: the weights before the first update
            with timer("old_logprobs"):
                batch.old_logp = padded([s.logprobs for s in await self._score(rows)], batch.mask.shape[1])
        losses: list[BatchLoss] = []
        updates: list[dict[str, float]] = []
        bar = progress.add_task(label, total=len(parts), info="")
        with timer("update"):
            for part in parts:
                sub = batch.subset(part) if len(parts) > 1 else batch
                loss = BatchLoss(sub, cfg.algo, None if ref is None else [ref[i] for i in part])
                updates.append(
                    await in_own_thread(
                        self.actor.train_step, sub.sequences, sub.starts, cfg.rollout.temperature, loss, True
                    )
                )
                losses.append(loss)
                progress.advance(bar)
        progress.remove_task(bar)
        with timer("sync"):
            await self._sync(self.version + 1)
        mask = batch.mask
        step_s = sum(u["step_s"] for u in updates)
        return {
            **merged_metrics(losses),
            "grad_norm": max(u["grad_norm"] for u in updates),
            "lr": updates[0]["lr"],
            "tokens_per_s": sum(u["tokens"] for u in updates) / max(step_s, 1e-9),
            "train_tokens": sum(u["tokens"] for u in updates),
            "update_skipped": sum(u["skipped"] for u in updates),
            "optimizer_steps": len(updates),
            "advantage_abs_mean": float((batch.advantages.abs() * mask).sum() / mask.sum().clamp(min=1)),
            "trained_tokens": int(mask.sum()),
            "shaped_reward_mean": float(batch.rewards[batch.counted > 0].mean()),
        }

    async def _score(
        self, rows: list[Trajectory], reference: bool = False, with_values: bool = False
    ) -> list[Scored]:
        return await in_own_thread(
            self.actor.score, [x.prompt_ids + x.response_ids for x in rows], [len(x.prompt_ids) for x in rows],
            self.cfg.rollout.temperature, reference=reference, with_values=with_values,
        )  # fmt: skip

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


def calibration_pool(tasks: list[Task], demonstrated: set[str], which: str) -> tuple[list[Task], str]:
    """The training tasks ``train.calibrate_from=which`` samples, and what they are called in the console:
    the ``demonstrated`` ones or the ``undemonstrated`` ones, every task when the warm start's
    demonstrations are unknown or the split leaves none, and every task for ``all``."""
    if which != "all" and demonstrated:
        pool = [x for x in tasks if (x.id in demonstrated) == (which == "demonstrated")]
        if pool:
            return pool, which
    return tasks, "training"


def _informative_groups(results: list[RolloutResult]) -> set[str]:
    """Groups whose rewards are not all equal (DAPO dynamic sampling keeps only these)."""
    group_ids = [r.trajectory.group_id for r in results]
    return {group_ids[i] for i in keep_groups([r.trajectory.reward for r in results], group_ids)}
