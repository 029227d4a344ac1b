"""The training loop (single controller): each step is a flat list of named, timed stages.

    rollout -> grade -> check [-> reference] [-> values] -> advantages -> update -> sync [-> save] [-> validate]

- rollout: ``train.tasks_per_step`` tasks x ``train.group_size`` samples with ``rollout.agent``,
  through a :class:`~coderl.train.ledger.SampledLedger` that records what the engine sampled;
- grade: each patch against the task's hidden tests (``tasks.reward``); with DAPO dynamic sampling,
  groups whose rewards are all equal are replaced by fresh tasks (``train.max_refill_rounds``);
- check: every model token of every trajectory must be what the engine sampled after exactly that
  context; a trajectory that fails is counted (``token_mismatch``) and never trained on;
- reference / values: a no-grad scoring pass for the KL reference policy (``algo.kl_coef > 0``) and
  for the value head's predictions (``algo.advantage=gae``: PPO with a critic sharing the policy trunk);
- advantages: rewards shaped (overlong, KL in the reward) into per-token advantages (``algo``);
- update: one optimizer step of the actor over the batch (micro-batches, gradient accumulation);
- sync: the new weights into the engine (in process for the embedded engine; a saved checkpoint
  folder for HTTP servers, or with LoRA a saved adapter folder through the server's adapter API,
  ``train.weight_sync``); every later trajectory carries the new policy version.
"""

from __future__ import annotations

import asyncio
import logging
import random
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coderl.chat import ChatFormat
from coderl.config import Config
from coderl.engine import create_engine
from coderl.engine.base import Engine
from coderl.errors import ConfigError
from coderl.rollout.report import build_report
from coderl.rollout.runner import RolloutResult, RolloutSettings, run_rollouts
from coderl.rollout.store import TrajectoryStore
from coderl.tasks import load_tasks
from coderl.tasks.grading import grade
from coderl.train import checkpoints
from coderl.train.actor import Actor
from coderl.train.batch import BatchLoss, build_batch
from coderl.train.ledger import SampledLedger
from coderl.train.loggers import MetricSinks
from coderl.train.report import write_report
from coderl.types import Task

log = logging.getLogger(__name__)


class Trainer:
    """Owns the engine, the actor and the run directory of one training run."""

    def __init__(self, cfg: Config, run_dir: Path, console: Console | None = None) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.console = console or Console(stderr=True)
        self.engine: Engine | None = None
        self.ledger: SampledLedger | None = None
        self.actor = Actor(
            cfg.actor.model_copy(update={"seed": cfg.run.seed}),
            cfg.model.path,
            cfg.model.cache_dir,
            value_head=cfg.algo.advantage == "gae",
        )
        self.tasks: list[Task] = []
        self.val_tasks: list[Task] = []
        self.chat: ChatFormat | None = None
        self.cursor = 0  # training tasks drawn so far (the data position, saved in checkpoints)
        self.version = 0  # updates applied to the policy
        self._engine_base = 0  # engine.policy_version when self.version was last set
        self.start_step = 1
        self.rows: list[dict[str, Any]] = []
        self._calls = 0

    # ------------------------------------------------------------------ set-up
    async def setup(self, resume: bool = False) -> None:
        cfg = self.cfg
        if cfg.train.group_size < 2 and cfg.algo.advantage in (
            "grpo",
            "drgrpo",
            "rloo",
            "reinforce_pp_baseline",
        ):
            raise ConfigError(
                f"train.group_size: got {cfg.train.group_size} — algo.advantage={cfg.algo.advantage} compares the "
                "samples of a task with each other and needs train.group_size >= 2"
            )
        if cfg.algo.advantage == "gae" and not cfg.actor.packing:
            raise ConfigError(
                "algo.advantage: got 'gae' with actor.packing=false — the value head reads the packed "
                "forward's hidden states; set actor.packing=true"
            )
        if cfg.train.weight_sync == "lora" and cfg.actor.lora_rank == 0:
            raise ConfigError(
                "train.weight_sync: got 'lora' with actor.lora_rank=0 — there is no adapter to send; set "
                "actor.lora_rank > 0 or train.weight_sync=full"
            )
        if cfg.algo.kl_coef > 0 and not cfg.actor.reference:
            raise ConfigError(
                f"algo.kl_coef: got {cfg.algo.kl_coef} — a KL penalty needs a reference policy; set actor.reference=true"
            )
        self.tasks = load_tasks(cfg.train.tasks)
        if not self.tasks:
            raise ConfigError(f"train.tasks: got {cfg.train.tasks!r}, which holds no tasks")
        self.val_tasks = load_tasks(cfg.train.val_tasks) if cfg.train.val_tasks else []
        random.Random(cfg.run.seed).shuffle(self.tasks)
        with self.console.status("loading the policy (actor) and starting the engine"):
            await asyncio.to_thread(self.actor.setup)
            self.engine = create_engine(cfg.engine, cfg.model, seed=cfg.run.seed)
            await self.engine.start()
        from coderl.checkpoint import load_tokenizer, resolve_checkpoint

        self.chat = ChatFormat(load_tokenizer(resolve_checkpoint(cfg.model.path, cfg.model.cache_dir)))
        self.ledger = SampledLedger(self.engine)
        found = checkpoints.latest(self.run_dir) if resume else None
        if found is not None:
            folder, state = found
            await asyncio.to_thread(self.actor.load, folder / "actor")
            self.cursor = int(state["cursor"])
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

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.stop()
            self.engine = None

    # ------------------------------------------------------------------ the run
    async def run(self, resume: bool = False) -> Path:
        """Set up, train ``train.steps`` steps (from the checkpoint when resuming), write the report."""
        cfg = self.cfg
        sinks = MetricSinks(self.run_dir, cfg.train, cfg.model_dump(mode="json"))
        store = TrajectoryStore(self.run_dir)
        try:
            await self.setup(resume)
            with Progress(
                TextColumn("[bold]train[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(), console=self.console,
            ) as progress:  # fmt: skip
                bar = progress.add_task(
                    "steps", total=cfg.train.steps, completed=self.start_step - 1, info=""
                )
                for step in range(self.start_step, cfg.train.steps + 1):
                    row = await self.step(step, store, progress)
                    sinks.write(row)
                    self.rows.append(row)
                    progress.update(bar, advance=1, info=_summary(row))
                    self.console.print(f"step {step}: {_summary(row)}")
        finally:
            store.close()
            sinks.close()
            await self.close()
        return self.finish()

    def finish(self) -> Path:
        rows = checkpoints.read_metrics(self.run_dir / "metrics.jsonl")
        summary: dict[str, Any] = {"steps": len(rows)}
        if rows:
            head, tail = rows[: min(5, len(rows))], rows[-min(5, len(rows)) :]
            summary["pass_rate (first steps)"] = sum(r["pass_rate"] for r in head) / len(head)
            summary["pass_rate (last steps)"] = sum(r["pass_rate"] for r in tail) / len(tail)
            summary["reward_mean (last)"] = rows[-1]["reward_mean"]
            if any("shaped_reward_mean" in r for r in rows):
                shaped = [r.get("shaped_reward_mean", 0.0) for r in rows]
                summary["shaped reward (first steps)"] = sum(shaped[: len(head)]) / len(head)
                summary["shaped reward (last steps)"] = sum(shaped[-len(tail) :]) / len(tail)
            summary["logprob_mismatch (max over steps)"] = max(r["logprob_mismatch"] for r in rows)
            summary["token_mismatch (total)"] = sum(r["token_mismatch"] for r in rows)
            vals = [r for r in rows if "val_pass_rate" in r]
            if vals:
                summary["val_pass_rate (last)"] = vals[-1]["val_pass_rate"]
        return write_report(self.run_dir, rows, summary)

    # ------------------------------------------------------------------ one step
    async def step(self, step: int, store: TrajectoryStore, progress: Progress) -> dict[str, Any]:
        cfg = self.cfg
        assert self.ledger is not None
        stage_s: dict[str, float] = {}
        t_step = time.perf_counter()
        self.ledger.clear()

        t = time.perf_counter()
        results = await self._rollout(self._draw(cfg.train.tasks_per_step), progress, f"step {step} rollout")
        stage_s["rollout"] = time.perf_counter() - t
        t = time.perf_counter()
        await self._grade(results)
        stage_s["grade"] = time.perf_counter() - t
        all_results = list(results)
        refills = 0
        while cfg.algo.dynamic_sampling and refills < cfg.train.max_refill_rounds:
            missing = cfg.train.tasks_per_step - len(_informative_groups(all_results))
            if missing <= 0:
                break
            refills += 1
            t = time.perf_counter()
            extra = await self._rollout(self._draw(missing), progress, f"step {step} refill {refills}")
            stage_s["rollout"] += time.perf_counter() - t
            t = time.perf_counter()
            await self._grade(extra)
            stage_s["grade"] += time.perf_counter() - t
            all_results += extra
        for r in all_results:
            for seq in r.trajectory.sequences():  # engine counter -> run's
                seq.policy_version += self.version - self._engine_base
            store.add(r.trajectory, {"step": step, "resolved": r.resolved, "grade": r.grade or {}})

        t = time.perf_counter()
        trainable, token_mismatch = self._check(all_results)
        if cfg.algo.dynamic_sampling:
            keep = _informative_groups(trainable)
            trainable = [r for r in trainable if r.trajectory.group_id in keep]
        stage_s["check"] = time.perf_counter() - t

        row = self._rollout_metrics(step, all_results)
        row.update(
            token_mismatch=token_mismatch,
            refill_rounds=refills,
            trained_samples=len(trainable),
            trained_sequences=sum(len(r.trajectory.sequences()) for r in trainable),
        )
        if trainable:
            trajs = [seq for r in trainable for seq in r.trajectory.sequences()]
            counted = [k == 0 for r in trainable for k in range(len(r.trajectory.sequences()))]
            ref = None
            if cfg.algo.kl_coef > 0:
                t = time.perf_counter()
                scored = await asyncio.to_thread(
                    self.actor.score, [x.prompt_ids + x.response_ids for x in trajs],
                    [len(x.prompt_ids) for x in trajs], cfg.rollout.temperature, reference=True,
                )  # fmt: skip
                ref = [s.logprobs for s in scored]
                stage_s["reference"] = time.perf_counter() - t
            values = None
            if cfg.algo.advantage == "gae":  # the critic's predictions before the update
                t = time.perf_counter()
                scored = await asyncio.to_thread(
                    self.actor.score, [x.prompt_ids + x.response_ids for x in trajs],
                    [len(x.prompt_ids) for x in trajs], cfg.rollout.temperature, with_values=True,
                )  # fmt: skip
                values = [s.values for s in scored if s.values is not None]
                stage_s["values"] = time.perf_counter() - t
            t = time.perf_counter()
            batch = build_batch(
                trajs, cfg.algo, cfg.rollout.max_tokens * cfg.rollout.max_turns, ref, values, counted
            )
            loss = BatchLoss(batch, cfg.algo, ref)
            stage_s["advantages"] = time.perf_counter() - t
            t = time.perf_counter()
            update = await asyncio.to_thread(
                self.actor.train_step, batch.sequences, batch.starts, cfg.rollout.temperature, loss, True
            )
            stage_s["update"] = time.perf_counter() - t
            row.update(loss.metrics())
            row.update(
                grad_norm=update["grad_norm"], lr=update["lr"], tokens_per_s=update["tokens_per_s"],
                train_tokens=update["tokens"], update_skipped=update["skipped"],
                advantage_abs_mean=float((batch.advantages.abs() * batch.mask).sum() / batch.mask.sum().clamp(min=1)),
                shaped_reward_mean=float(batch.rewards.mean()),
            )  # fmt: skip
            t = time.perf_counter()
            await self._sync(self.version + 1)
            stage_s["sync"] = time.perf_counter() - t
        else:
            row.update(logprob_mismatch=0.0, grad_norm=0.0, kl=0.0, entropy=0.0, update_skipped=1.0)
            log.warning("step %d: nothing to train on (no trajectory passed the checks)", step)
        row.setdefault("kl", 0.0)
        row.setdefault("entropy", 0.0)
        row["policy_version"] = self.version

        if step % cfg.train.save_every == 0 or step == cfg.train.steps:
            t = time.perf_counter()
            row["stage_s"], row["step_s"] = dict(stage_s), time.perf_counter() - t_step
            await asyncio.to_thread(self._save, step, row)
            stage_s["save"] = time.perf_counter() - t
        if self.val_tasks and (
            step == cfg.train.steps or (cfg.train.val_every and step % cfg.train.val_every == 0)
        ):
            t = time.perf_counter()
            row.update(await self._validate(step, progress))
            stage_s["validate"] = time.perf_counter() - t
        row["stage_s"] = stage_s
        row["step_s"] = time.perf_counter() - t_step
        return row

    # ------------------------------------------------------------------ stages
    def _draw(self, n: int) -> list[Task]:
        """The next ``n`` training tasks of a deterministic shuffled cycle (resumable by cursor)."""
        picked = [self.tasks[(self.cursor + i) % len(self.tasks)] for i in range(n)]
        self.cursor += n
        return picked

    async def _rollout(
        self,
        tasks: list[Task],
        progress: Progress,
        label: str,
        group_size: int | None = None,
        temperature: float | None = None,
    ) -> list[RolloutResult]:
        from coderl.cli.eval_cmd import context_factory

        assert self.ledger is not None and self.chat is not None
        cfg = self.cfg
        g = group_size or cfg.train.group_size
        rollout_cfg = (
            cfg
            if temperature is None
            else cfg.model_copy(
                update={"rollout": cfg.rollout.model_copy(update={"temperature": temperature})}
            )
        )
        settings = RolloutSettings(
            agent=cfg.rollout.agent, group_size=g, max_engine_requests=cfg.rollout.max_engine_requests,
            max_sandboxes=cfg.rollout.max_sandboxes, grade=False, reward=cfg.tasks.reward,
        )  # fmt: skip
        bar = progress.add_task(label, total=len(tasks) * g, info="")
        try:
            results = await run_rollouts(
                tasks, self.ledger, context_factory(rollout_cfg, self.chat), settings, cfg.sandbox,
                on_done=lambda _: progress.advance(bar),
            )  # fmt: skip
        finally:
            progress.remove_task(bar)
        self._calls += 1
        for k, r in enumerate(results):  # in job order: a task drawn twice makes two groups
            r.trajectory.group_id = f"{r.trajectory.task_id}#{self._calls}.{k // g}"
        return results

    async def _grade(self, results: list[RolloutResult]) -> None:
        gate = asyncio.Semaphore(self.cfg.tasks.concurrency)
        by_id = {t.id: t for t in [*self.tasks, *self.val_tasks]}

        async def one(r: RolloutResult) -> None:
            async with gate:
                try:
                    g = await grade(
                        by_id[r.trajectory.task_id],
                        r.trajectory.patch,
                        self.cfg.sandbox,
                        self.cfg.tasks.reward,
                    )
                except Exception as exc:  # a grading failure is data: reward 0, error recorded
                    r.trajectory.error = (
                        r.trajectory.error or ""
                    ) + f" grading failed: {type(exc).__name__}: {exc}"
                    return
                r.resolved = g.resolved
                for seq in r.trajectory.sequences():
                    seq.reward = g.reward
                r.grade = {k: v for k, v in g.to_dict().items() if k != "test_output"}

        await asyncio.gather(*(one(r) for r in results))

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

    @property
    def sync_mode(self) -> str:
        """lora (a saved adapter through the engine's load_lora_adapter) or full weights."""
        mode = self.cfg.train.weight_sync
        if mode == "auto":
            return "lora" if self.cfg.engine.type == "http" and self.cfg.actor.lora_rank > 0 else "full"
        return mode

    async def _sync(self, version: int) -> None:
        """Push the actor's weights to the engine; the run's policy version becomes ``version``."""
        assert self.engine is not None
        if self.sync_mode == "lora":  # a few MB per step instead of the whole model
            folder = self.run_dir / "weights" / f"adapter-v{version}"
            await asyncio.to_thread(self.actor.save_adapter, folder)
            await self.engine.load_lora_adapter(folder)
            for old in folder.parent.glob("adapter-v*"):  # the server has read it; keep only this one
                if old != folder and old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
        elif self.cfg.engine.type == "embedded":
            state = await asyncio.to_thread(self.actor.state_dict_for_engine)
            await self.engine.update_weights(state)
        else:  # HTTP servers load a checkpoint folder from disk
            folder = self.run_dir / "weights" / "current"
            await asyncio.to_thread(self._export_weights, folder)
            await self.engine.update_weights(folder)
        self.version = version
        self._engine_base = self.engine.policy_version

    def _export_weights(self, folder: Path) -> None:
        from safetensors.torch import save_file

        from coderl.checkpoint import resolve_checkpoint

        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(resolve_checkpoint(self.cfg.model.path, self.cfg.model.cache_dir), tmp)
        for old in tmp.glob("*.safetensors"):
            old.unlink()
        state: dict[str, Any] = {}
        seen: set[int] = set()
        for name, tensor in self.actor.state_dict_for_engine().items():
            if tensor.data_ptr() in seen:  # tied weights (lm_head = embed_tokens): stored once, as HF does
                continue
            seen.add(tensor.data_ptr())
            state[name] = tensor.contiguous().cpu()
        save_file(state, str(tmp / "model.safetensors"))
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)

    def _save(self, step: int, row: dict[str, Any]) -> None:
        """The checkpoint of ``step``; it carries the step's metrics row, since a kill between the
        checkpoint and the metrics file must lose neither."""
        tmp = checkpoints.begin(self.run_dir, step)
        self.actor.save(tmp / "actor")
        state = {
            "step": step,
            "cursor": self.cursor,
            "policy_version": self.version,
            "time": time.time(),
            "row": row,
        }
        checkpoints.commit(self.run_dir, tmp, step, state, self.cfg.train.keep_checkpoints)

    async def _validate(self, step: int, progress: Progress) -> dict[str, float]:
        results = await self._rollout(
            self.val_tasks,
            progress,
            f"step {step} validation",
            group_size=1,
            temperature=self.cfg.train.val_temperature,
        )
        await self._grade(results)
        store = TrajectoryStore(self.run_dir / "validation" / f"step-{step:06d}")
        for r in results:
            store.add(r.trajectory, {"step": step, "resolved": r.resolved, "grade": r.grade or {}})
        store.close()
        rows = [{"task_id": r.trajectory.task_id, "resolved": r.resolved, "reward": r.trajectory.reward,
                 "exit_status": r.trajectory.exit_status} for r in results]  # fmt: skip
        report = build_report(rows, {t.id: t.tier for t in self.val_tasks}, [1])
        return {"val_pass_rate": report["pass@1"], "val_reward_mean": report["mean_reward"]}

    def _rollout_metrics(self, step: int, results: list[RolloutResult]) -> dict[str, Any]:
        trajs = [r.trajectory for r in results]
        n = max(len(trajs), 1)
        model_tokens = [sum(t.response_mask) for t in trajs]
        rollout_s = sum(t.metrics.get("engine_s", 0.0) for t in trajs)
        return {
            "step": step,
            "samples": len(trajs),
            "reward_mean": sum(t.reward for t in trajs) / n,
            "pass_rate": sum(r.resolved for r in results) / n,
            "tasks_resolved": len({t.task_id for r, t in zip(results, trajs, strict=True) if r.resolved}),
            "response_len_mean": sum(model_tokens) / n,
            "response_len_max": max(model_tokens, default=0),
            "context_len_max": max((len(t.prompt_ids) + len(t.response_ids) for t in trajs), default=0),
            "turns_mean": sum(t.num_turns for t in trajs) / n,
            "format_errors_mean": sum(t.metrics.get("format_errors", 0.0) for t in trajs) / n,
            "errors": sum(1 for t in trajs if t.exit_status == "error"),
            "exit_statuses": dict(Counter(t.exit_status for t in trajs)),
            "engine_s_total": rollout_s,
        }


def _informative_groups(results: list[RolloutResult]) -> set[str]:
    """Groups whose rewards are not all equal (DAPO dynamic sampling keeps only these)."""
    rewards: dict[str, set[float]] = {}
    for r in results:
        rewards.setdefault(r.trajectory.group_id, set()).add(r.trajectory.reward)
    return {g for g, values in rewards.items() if len(values) > 1}


def _summary(row: dict[str, Any]) -> str:
    return (
        f"reward {row['reward_mean']:.2f} (shaped {row.get('shaped_reward_mean', row['reward_mean']):.2f}) "
        f"pass {row['pass_rate']:.0%} len {row['response_len_mean']:.0f} "
        f"kl {row.get('kl', 0.0):.4f} ent {row.get('entropy', 0.0):.2f} mismatch {row.get('logprob_mismatch', 0.0):.1e} "
        f"{row.get('step_s', 0.0):.0f}s"
    )
