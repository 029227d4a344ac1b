"""Held-out validation inside a training run, and the side-by-side table of its points.

A run validates before any update (step 0, ``start``), after a supervised warm start (``sft``), every
``train.val_every`` steps and after the last. At each point every held-out task is rolled out
``train.val_samples`` times at ``train.val_temperature`` (the main job: once, greedily) — keys
``val_*`` — and, with ``train.val_sampled > 0``, that many times more at the rollout temperature, the
policy as RL samples it — keys ``val_sampled_*``; each set of ``train.val_also`` (more held-out
sets) gets the first kind, keys ``val_also_*`` for the first, ``val_also2_*`` for the second and so on
(:func:`also_prefix`). The sets roll out at once (one engine batch, no set's tail idling the
others' slots). Each pass@1 comes with its 95% interval (over tasks).

Owns: what one validation rolls out, stores (``validation/step-N[-name]/[kind]``) and reports, and
:func:`validation_table`. Must not: roll out itself (the trainer's ``roll`` does, with its engine,
ledger and bounds) or draw training tasks.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from coderl.gathering import gather_all
from coderl.rollout.config import RolloutConfig
from coderl.rollout.report import build_report
from coderl.rollout.runner import RolloutGroup, RolloutResult, task_groups
from coderl.rollout.store import TrajectoryStore
from coderl.tasks.patching import change_overlap
from coderl.train.config import TrainConfig
from coderl.train.signal import change_f1, gold_patches, outcomes
from coderl.types import Task

Roll = Callable[[list[RolloutGroup], str, float | None], Awaitable[list[RolloutResult]]]
"""The trainer's rollout: (groups, progress label, temperature) -> graded results."""

POINTS = {"start": "start", "sft": "after warm start"}
"""Names of validation points in the table (a step's point is named by its step)."""

_ALSO = re.compile(r"^(val_also\d*)_pass_at_1$")


def also_prefix(index: int) -> str:
    """The metric prefix (and folder name) of the ``index``-th (0-based) set of ``train.val_also``."""
    return "val_also" if index == 0 else f"val_also{index + 1}"


def also_prefixes(rows: list[dict[str, Any]]) -> list[str]:
    """The ``train.val_also`` sets' prefixes found in ``rows``, in their order (val_also, val_also2, ...)."""
    found = {m.group(1) for r in rows for k in r if (m := _ALSO.match(k))}
    return sorted(found, key=lambda p: int(p[len("val_also") :] or 1))


def set_name(prefix: str) -> str:
    """How tables name a ``train.val_also`` set: the split (or train.val_tasks) is the first set, so
    ``val_also`` is the second, ``val_also2`` the third, ..."""
    n = int(prefix[len("val_also") :] or 1) + 1
    return f"{ORDINALS[n]} set" if n < len(ORDINALS) else f"set {n}"


ORDINALS = ["", "first", "second", "third", "fourth", "fifth", "sixth"]


def held_out_prefixes(rows: list[dict[str, Any]]) -> list[str]:
    """Every kind of validation in ``rows``: val, val_sampled, then the val_also sets."""
    return [p for p in ("val", "val_sampled") if any(f"{p}_pass_at_1" in r for r in rows)] + also_prefixes(rows)


class Validation:
    """Validates ``tasks`` (and ``also``: each ``train.val_also`` source with its tasks) at a point of the run."""

    def __init__(
        self,
        train: TrainConfig,
        rollout: RolloutConfig,
        run_dir: Path,
        console: Console,
        roll: Roll,
        tasks: list[Task],
        also: list[tuple[str, list[Task]]],
    ) -> None:
        self.train = train
        self.rollout = rollout
        self.run_dir = run_dir
        self.console = console
        self.roll = roll
        self.tasks = tasks
        self.also = also

    @property
    def wanted(self) -> bool:
        return bool(self.tasks or any(tasks for _, tasks in self.also))

    async def run(self, step: int, name: str = "") -> dict[str, Any]:
        """Every kind of validation at step ``step`` (``name``: ``sft`` after the warm start)."""
        t = self.train
        val_t = self.rollout.temperature if t.val_temperature is None else t.val_temperature
        sets: list[Awaitable[dict[str, Any]]] = []
        if self.tasks:
            sets.append(self._set(step, name, self.tasks, "val", val_t, t.val_samples))
        if self.tasks and t.val_sampled:
            sets.append(self._set(step, name, self.tasks, "val_sampled", self.rollout.temperature, t.val_sampled))
        for i, (source, tasks) in enumerate(self.also):
            sets.append(self._set(step, name, tasks, also_prefix(i), val_t, t.val_samples, source))
        row: dict[str, Any] = {}
        began = time.perf_counter()
        for done in await gather_all(sets):  # at once: the engine batches one set's samples with another's
            row.update(done)
        if sets:
            row["validation_s"] = round(time.perf_counter() - began, 2)  # the point's wall clock, every set
        return row

    async def _set(
        self,
        step: int,
        name: str,
        tasks: list[Task],
        prefix: str,
        temperature: float,
        samples: int,
        source: str = "",
    ) -> dict[str, Any]:
        """Every task of ``tasks`` ``samples`` times at ``temperature``, graded like training rollouts and
        stored under ``validation/step-N[-name]/<prefix>`` (``val``: the folder itself)."""
        groups = task_groups(tasks, samples, tag=f"{prefix}{step}{name}.")
        began = time.perf_counter()
        where = f"step {step}{' (' + name + ')' if name else ''}"
        results = await self.roll(groups, f"{where}: {prefix}", temperature)
        folder = step_folder(self.run_dir, step, name)
        golds = gold_patches(tasks)
        store = TrajectoryStore(folder if prefix == "val" else folder / prefix)
        for r in results:  # each sample's change F1 kept with it (coderl bench rl pairs them by task)
            gold = golds.get(r.trajectory.task_id, "")
            closeness = {"change_f1": change_overlap(r.trajectory.patch, gold)} if gold else {}
            store.add(r.trajectory, {**r.record(step=step), **closeness})
        store.close()
        report = build_report([r.report_row() for r in results], {x.id: x.tier for x in tasks}, [1])
        lo, hi = report["pass@1_ci95"]
        ended = outcomes(results, golds)
        f1 = change_f1(results, golds)
        label = f"{'dev' if self.train.dev_size else 'held-out'} pass@1"  # dev: tasks of a dev split
        if prefix == "val_sampled":
            label += f" at T={temperature:g}"
        elif source:
            label += f" ({source})"
        self.console.print(
            f"{where}: {label} {report['pass@1']:.3f} [95% {lo:.3f}, {hi:.3f}] over {len(tasks)} tasks x "
            f"{samples} samples ({report['resolved_instances']} tasks solved; samples: {outcome_text(ended)}"
            + (f"; change F1 against the gold patches {f1:.3f})" if f1 is not None else ")")
        )
        return {
            **({f"{prefix}_source": source} if source else {}),
            **({f"{prefix}_split": "dev"} if self.train.dev_size else {}),
            f"{prefix}_pass_at_1": report["pass@1"],
            f"{prefix}_pass_at_1_ci95": report["pass@1_ci95"],
            f"{prefix}_reward_mean": report["mean_reward"],
            f"{prefix}_tasks_solved": report["resolved_instances"],
            f"{prefix}_tasks": len(tasks),
            f"{prefix}_samples": samples,
            f"{prefix}_temperature": temperature,
            f"{prefix}_outcomes": ended,
            **({f"{prefix}_change_f1": f1} if f1 is not None else {}),
            f"{prefix}_s": round(time.perf_counter() - began, 2),  # this set's wall clock (sets overlap)
        }


_SAID = {"fix_plus_edits": "fix plus breaking edits"}
"""How the console names an outcome kind whose key alone reads badly."""


def outcome_text(counts: dict[str, int]) -> str:
    """``3 solved, 2 fix plus breaking edits, 9 wrong change, 9 no change, 1 cut off`` (kinds with no
    sample left out)."""
    return ", ".join(f"{n} {_SAID.get(kind, kind.replace('_', ' '))}" for kind, n in counts.items() if n) or "none"


def point_name(row: dict[str, Any]) -> str:
    """How the table names a validation row's point."""
    phase = row.get("phase")
    if phase in POINTS:
        return POINTS[str(phase)]
    return f"step {row['step']}"


def validation_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The run's validation points side by side: a header row (the points), then one row per kind of
    validation (module doc); each cell ``pass@1 [low, high]`` or ``-``. Empty without validations."""
    prefixes = held_out_prefixes(rows)
    points = [r for r in rows if any(f"{p}_pass_at_1" in r for p in prefixes if p != "val_sampled")]
    if not points:
        return []
    what = "dev" if any(r.get("val_split") == "dev" for r in points) else "held-out"
    table = [[f"{what} pass@1", *(point_name(r) for r in points)]]
    for prefix in prefixes:
        have = [r for r in points if f"{prefix}_pass_at_1" in r]
        if not have:
            continue
        last = have[-1]
        temperature = last.get(f"{prefix}_temperature")
        how = "greedy" if temperature == 0 else (f"T={temperature:g}" if temperature is not None else "")
        if prefix.startswith("val_also"):  # named by its source where the rows record it
            how = f"{last.get(f'{prefix}_source') or set_name(prefix)} {how}".strip()
        cells = [f"{how} ({last[f'{prefix}_samples']} x {last[f'{prefix}_tasks']} tasks)"]
        for r in points:
            if f"{prefix}_pass_at_1" in r:
                lo, hi = r[f"{prefix}_pass_at_1_ci95"]
                cells.append(f"{r[f'{prefix}_pass_at_1']:.3f} [{lo:.3f}, {hi:.3f}]")
            else:
                cells.append("-")
        table.append(cells)
    return table


def validation_table(rows: list[dict[str, Any]]) -> list[str]:
    """:func:`validation_cells` as console lines, e.g.::

        held-out pass@1          start                 after warm start      step 12
        greedy (1 x 24 tasks)    0.000 [0.000, 0.138]  0.167 [0.067, 0.359]  0.250 [0.120, 0.449]
    """
    cells = validation_cells(rows)
    first = max((len(row[0]) + 2 for row in cells), default=28)
    return ["".join(c.ljust(max(first, 28) if i == 0 else 23) for i, c in enumerate(row)) for row in cells]


def step_folder(run_dir: Path, step: int, name: str = "") -> Path:
    """Where the validation at ``step`` (``name``: ``sft`` after the warm start) stores its samples."""
    return run_dir / "validation" / f"step-{step:06d}{'-' + name if name else ''}"
