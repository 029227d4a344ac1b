"""The rollouts of a training run: what each step draws, rolled out, labelled and checked.

Owns: which tasks a step draws (:class:`~coderl.train.curriculum.Curriculum`, guided samples from
:class:`~coderl.train.guidance.Guidance`), rolling groups out through the run's
:class:`~coderl.cluster.backend.RolloutBackend` with a progress bar, DAPO dynamic sampling's refills,
the asynchronous producer's groups (``train.mode=async``, stale ones set apart), every trajectory
labelled with the run's policy version, and the check that every model token is what the engine
sampled. Must not train, sync weights or write metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rich.progress import Progress

from coderl.cluster.backend import RolloutBackend
from coderl.config import Config
from coderl.rl import keep_groups
from coderl.rollout.runner import RolloutBounds, RolloutGroup, RolloutResult, task_groups
from coderl.rollout.store import TrajectoryStore
from coderl.train.credit import PatchCredit, credit_of
from coderl.train.curriculum import Curriculum
from coderl.train.guidance import Guidance
from coderl.train.ledger import SampledLedger
from coderl.train.producer import Group, RolloutProducer, lag, lag_counts, stale_groups

log = logging.getLogger(__name__)


class TrainingRollouts:
    """See the module doc. ``version_offset()``: what turns the engine's version counter into the
    run's (the trainer's versions count its own updates, the engine's every weight load)."""

    def __init__(
        self,
        cfg: Config,
        backend: RolloutBackend,
        ledger: SampledLedger,
        curriculum: Curriculum,
        guidance: Guidance | None,
        version_offset: Callable[[], int],
        credit: PatchCredit | None = None,
    ) -> None:
        self.cfg = cfg
        self.backend = backend
        self.ledger = ledger
        self.curriculum = curriculum
        self.guidance = guidance
        self.version_offset = version_offset
        self.credit = credit  # train.patch_credit: near misses scored (training rollouts only)
        self.producer: RolloutProducer | None = None  # train.mode=async: the rollouts run ahead
        self.draws = 0  # rollout rounds so far: names fresh groups
        self.rl_step = 1  # the RL step being drawn for (the guidance's schedule)

    def start_producer(self) -> None:
        """``train.mode=async``: keep ``tasks_per_step x max_staleness`` groups rolling out ahead."""
        t = self.cfg.train
        bounds = self.backend.bounds()
        self.producer = RolloutProducer(
            self.draw, lambda group: self.roll_group(group, bounds), t.tasks_per_step * t.max_staleness
        )

    def draw(self, n: int) -> list[RolloutGroup]:
        """The next ``n`` training tasks (a seeded shuffled cycle, or the tasks at the policy's edge),
        each a fresh group of ``train.group_size`` samples (a task drawn twice makes two groups)."""
        picked = self.curriculum.draw(n)
        self.draws += 1
        groups = task_groups(picked, self.cfg.train.group_size, tag=f"{self.draws}.")
        return self.guidance.attach(groups, self.curriculum, self.rl_step) if self.guidance else groups

    async def shared_bounds(self) -> RolloutBounds:
        """Bounds for calls of :meth:`rollout` that run at once (a validation point's sets), so that
        together they keep to ``rollout.max_sandboxes`` and the engine request limit; the sandboxes
        earlier calls left going down are down first, as a call with bounds of its own waits for them."""
        await self.backend.teardowns.drain()
        return self.backend.bounds()

    async def rollout(
        self,
        groups: list[RolloutGroup],
        progress: Progress,
        label: str,
        temperature: float | None = None,
        bounds: RolloutBounds | None = None,
    ) -> list[RolloutResult]:
        """Roll out and grade ``groups`` at ``temperature`` (None: ``rollout.temperature``), a bar named
        ``label`` counting the samples; each trajectory carries the run's policy version. ``bounds``:
        shared with concurrent calls (:meth:`shared_bounds`); None = the call's own."""
        bar = progress.add_task(label, total=sum(g.size for g in groups), info="")
        try:
            results = await self.backend.run(
                groups, temperature, on_done=lambda _: progress.advance(bar), bounds=bounds
            )
        finally:
            progress.remove_task(bar)
        self._label(results)
        return results

    async def collect(self, step: int, progress: Progress) -> tuple[list[RolloutResult], int]:
        """Roll out and grade this step's groups; DAPO dynamic sampling refills uninformative ones.
        Returns the results and the refill rounds."""
        t = self.cfg.train
        results = self._credited(await self.rollout(self.draw(t.tasks_per_step), progress, f"step {step} rollout"))
        refills = 0
        while self.cfg.algo.dynamic_sampling and refills < t.max_refill_rounds:
            missing = t.tasks_per_step - len(informative_groups(results))
            if missing <= 0:
                break
            refills += 1
            results += self._credited(
                await self.rollout(self.draw(missing), progress, f"step {step} refill {refills}")
            )
        self.curriculum.update(results)
        return results, refills

    async def take(self, version: int) -> tuple[list[RolloutResult], list[RolloutResult], int]:
        """train.mode=async: this step's groups from the producer, as (kept, stale, refill rounds).
        Stale groups (more than ``train.max_staleness`` versions behind ``version``; with dynamic
        sampling also groups whose rewards are all equal, which are kept like :meth:`collect` keeps them
        and left out at the check) are replaced by the next to finish, for at most
        ``train.max_refill_rounds`` rounds."""
        t = self.cfg.train
        assert self.producer is not None
        kept: list[Group] = []
        stale: list[Group] = []
        useful = 0
        rounds = 0
        need = t.tasks_per_step
        while True:  # credited here, at the step that trains them (not the one they finished during)
            groups = [self._credited(g) for g in await self.producer.take(need)]
            self.curriculum.update([r for g in groups for r in g])
            fresh, old = stale_groups(groups, version, t.max_staleness)
            stale += old
            kept += fresh
            useful += sum(1 for g in fresh if not self.cfg.algo.dynamic_sampling or informative_groups(g))
            need = t.tasks_per_step - useful
            if need <= 0 or rounds >= t.max_refill_rounds:
                break
            rounds += 1
        return [r for g in kept for r in g], [r for g in stale for r in g], rounds

    async def roll_group(self, group: RolloutGroup, bounds: RolloutBounds) -> Group:
        """One group rolled out and graded (asynchronous mode), its versions the run's."""
        results = await self.backend.run([group], bounds=bounds)
        self._label(results)
        return results

    async def for_step(
        self, step: int, version: int, store: TrajectoryStore, progress: Progress, last: bool = False
    ) -> tuple[list[RolloutResult], list[RolloutResult], int, dict[str, Any]]:
        """Step ``step``'s rollouts, each stored as it is had, as (results, stale, refill rounds, metrics):
        rolled out now (the ledger cleared first), or with ``train.mode=async`` taken from the producer,
        with their policy lag behind ``version`` in the metrics. After the ``last`` step's groups the
        producer stops: no step would train what it rolls out next, and the last validation follows."""
        self.rl_step = step
        if self.producer is None:
            self.ledger.clear()
            results, refills = await self.collect(step, progress)
            for r in results:
                store.add(r.trajectory, r.record(step=step))
            return results, [], refills, {}
        results, stale, refills = await self.take(version)
        if last:
            await self.producer.stop()
        for r, old in [(r, False) for r in results] + [(r, True) for r in stale]:
            store.add(r.trajectory, r.record(step=step, lag=lag(r, version), stale=old))
        lags = [lag(r, version) for r in results]
        metrics = {
            "stale_dropped": len(stale),
            "policy_lag_mean": sum(lags) / max(len(lags), 1),
            "policy_lag_max": max(lags, default=0),
            "policy_lag_counts": lag_counts(results, version),
        }
        return results, stale, refills, metrics

    def trainable(
        self, results: list[RolloutResult], stale: list[RolloutResult]
    ) -> tuple[list[RolloutResult], int]:
        """The step's rollouts to train on (:meth:`check`; with DAPO dynamic sampling only groups whose
        rewards differ), and the sequences that failed the check; the producer's ledger entries go."""
        ok, bad = self.check(results)
        if self.producer is not None:
            for r in results + stale:
                self.ledger.forget(r.trajectory)
        if self.cfg.algo.dynamic_sampling:
            keep = informative_groups(ok)
            ok = [r for r in ok if r.trajectory.group_id in keep]
        return ok, bad

    def check(self, results: list[RolloutResult]) -> tuple[list[RolloutResult], int]:
        """Rollouts fit to train on, and how many sequences failed the sampled-token check (a rollout
        with one failing sequence is not trained on at all)."""
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

    def _credited(self, results: list[RolloutResult]) -> list[RolloutResult]:
        """Training rollouts with their partial credit (train.patch_credit) at the step being drawn for;
        validation and calibration rollouts get none."""
        if self.credit is not None:
            self.credit.apply(results, self.rl_step)
        return results

    def _label(self, results: list[RolloutResult]) -> None:
        offset = self.version_offset()
        for r in results:  # the engine's version counter -> the run's
            r.trajectory.label(version_offset=offset)


def informative_groups(results: list[RolloutResult]) -> set[str]:
    """Groups whose rewards (with any partial credit, train.patch_credit) are not all equal (DAPO
    dynamic sampling keeps only these)."""
    group_ids = [r.trajectory.group_id for r in results]
    rewards = [r.trajectory.reward + credit_of(r.trajectory.metrics) for r in results]
    return {group_ids[i] for i in keep_groups(rewards, group_ids)}
