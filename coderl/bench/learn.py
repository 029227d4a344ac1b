"""``coderl bench learn``: does the main job's recipe make the agent solve more held-out tasks?

The recipe (``coderl train``'s packaged defaults, or the config given) runs once per seed, and once
more per seed as a control with every learning rate at 0 (``actor.lr=0``, ``sft.lr=0``: the same
rollouts, grading, validation and seeds, but no learning). The control skips the supervised warm start
(``sft.before_rl=false``): at learning rate 0 AdamW leaves every weight exactly as it was (its step and
its decay are both scaled by the rate), so those minutes of forward and backward passes would change
nothing. Each run validates on its held-out tasks before any update and after the last; the figures
are:

- held-out pass@1 at start and end, per seed, for the recipe and for the control;
- the mean rise over seeds, with a paired bootstrap 95% interval: tasks are resampled (10,000 times,
  seeded), and each resample's rise is the mean over its tasks of (end - start) pass rate averaged
  over seeds; start and end of a task are paired within a seed;
- the control's rise and its interval (it should be within its own noise: the interval holds 0).
- with a warm start, the recipe's pass@1 after it (``warm_pass_at_1``) and RL's own share, the rise
  from there to the end (``rl_rise``, ``rl_rise_ci95``, paired the same way).

Every held-out set is reported: the split of ``train.tasks`` (``val``) and each source of
``train.val_also`` (``val_also``, ``val_also2``, ...: for example the hand-written warm-up tier, and tasks
synthesised at run time from a public library no training task comes from).

A bench takes hours, so each run that finishes is kept: the runs live in ``runs/bench-learn-<digest>/``
(``run.dir`` when given; the digest is of the configuration's values that differ from the defaults,
so a setting added to coderl later, at a default that changes nothing, keeps the same digest), one
folder per seed and kind, and a finished one (``bench.json`` beside its ``config.yaml``) is reused by
the next ``coderl bench learn`` with the same configuration, so an interrupted bench goes on where it
stopped; an unfinished folder is started again from scratch.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import statistics
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from coderl.bench.children import run_child, wait_stopping_children
from coderl.bench.report import machine_info
from coderl.config import Config
from coderl.config.loader import dump_config, validate_config
from coderl.errors import CoderlError, ConfigError
from coderl.rollout.store import read_trajectories
from coderl.threads import share_of_cores
from coderl.train.validation import also_prefix
from coderl.yamlio import load_yaml

BOOTSTRAP = 10_000


def task_rates(folder: Path, field: str = "resolved") -> dict[str, float]:
    """Per-task mean of a stored sample figure over one validation (a ``validation/step-N[/val_also]``
    folder): the pass rate unless ``field`` names another (``change_f1``); samples without it are left out."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for row in read_trajectories(folder) if (folder / "trajectories").is_dir() else []:
        if row.get("part", 0) == 0 and row.get(field) is not None:
            by_task[row["task_id"]].append(float(row[field]))
    return {task: sum(v) / len(v) for task, v in by_task.items()}


def paired_rise(
    starts: list[dict[str, float]], ends: list[dict[str, float]], seed: int = 0
) -> dict[str, Any]:
    """Mean held-out rise over seeds and its paired bootstrap 95% interval over tasks (module doc).

    ``starts[s]`` / ``ends[s]``: task -> pass rate for seed s, before and after training."""
    tasks = sorted(set.intersection(*(set(s) & set(e) for s, e in zip(starts, ends, strict=True))))
    if not tasks:
        return {"mean_rise": 0.0, "rise_ci95": [0.0, 0.0], "tasks": 0}
    rise = [statistics.fmean(e[t] - s[t] for s, e in zip(starts, ends, strict=True)) for t in tasks]
    return {"mean_rise": statistics.fmean(rise), "rise_ci95": bootstrap_ci95(rise, seed), "tasks": len(tasks)}


def bootstrap_ci95(values: list[float], seed: int = 0) -> list[float]:
    """The 95% interval of the mean of ``values`` by bootstrap: :data:`BOOTSTRAP` resamples of them
    with replacement (a seeded ``random.Random``, so a figure is the same every time)."""
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choice(values) for _ in values) for _ in range(BOOTSTRAP))
    return [means[int(0.025 * BOOTSTRAP)], means[int(0.975 * BOOTSTRAP) - 1]]


def config_key(cfg: Config) -> str:
    """The settings that make a run what it is: every value that differs from its default, run.dir
    left out (a run may be moved). Two configs with the same key run the same job."""
    plain = cfg.model_copy(update={"run": cfg.run.model_copy(update={"dir": None})})
    return json.dumps(plain.model_dump(mode="json", exclude_defaults=True), sort_keys=True)


def bench_root(cfg: Config) -> Path:
    """Where a bench's runs live: ``run.dir``, or ``runs/bench-learn-<digest of the configuration>``."""
    if cfg.run.dir is not None:
        return cfg.run.dir
    key = config_key(cfg.model_copy(update={"run": cfg.run.model_copy(update={"seed": 0})}))
    return Path("runs") / f"bench-learn-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def _finished(run_dir: Path, cfg: Config) -> bool:
    """A run in ``run_dir`` finished (``bench.json``) with the same settings as ``cfg``."""
    stored = run_dir / "config.yaml"
    if not ((run_dir / "bench.json").is_file() and stored.is_file()):
        return False
    try:
        return config_key(validate_config(load_yaml(stored.read_text()) or {})) == config_key(cfg)
    except (ConfigError, yaml.YAMLError):  # written by a coderl whose settings this one no longer reads
        return False


def _one_run(cfg: Config, console: Console, run_dir: Path, jobs: int) -> dict[str, Any]:
    """Train once, as ``coderl train`` in a process of its own (one run's engine, actor and optimizer
    never share memory with the next: in one process two main jobs exceed this machine's 24 GB), or
    reuse the same run finished before; per-task pass rates of the first and last validation of each
    held-out set. With ``jobs`` runs at once, each gets its share of the cores."""
    config = dump_config(cfg.model_copy(update={"run": cfg.run.model_copy(update={"dir": run_dir})}))
    done = run_dir / "bench.json"
    if _finished(run_dir, cfg):
        console.print(f"[bold]{run_dir.name}[/]: finished before, reused ({run_dir})")
        minutes = float(json.loads(done.read_text())["minutes"])
    else:
        if run_dir.exists():
            console.print(
                f"[bold]{run_dir.name}[/]: an unfinished or different run was here; starting it again"
            )
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text(config)
        console.print(f"[bold]{run_dir.name}[/]: {run_dir}")
        command = [
            sys.executable,
            "-m",
            "coderl",
            "train",
            str(run_dir / "config.yaml"),
            f"run.dir={run_dir}",
        ]
        began = time.monotonic()
        # stdout stays the bench's (--json); the run ends with the bench, however the bench ends
        code = run_child(command, env=share_of_cores(jobs))
        if code != 0:
            raise CoderlError(
                f"bench learn: {run_dir.name} failed (coderl train exited with {code}); its run directory is "
                f"{run_dir}; run the bench again to go on (finished runs are reused)"
            )
        minutes = (time.monotonic() - began) / 60
        done.write_text(json.dumps({"minutes": minutes}))
    also = [also_prefix(i) for i in range(len(cfg.train.val_also))]
    validations = sorted((run_dir / "validation").iterdir()) if (run_dir / "validation").is_dir() else []
    first, last = (validations[0], validations[-1]) if validations else (run_dir, run_dir)
    warm = run_dir / "validation" / "step-000000-sft"  # after the warm start, when the run had one
    return {
        "run_dir": str(run_dir),
        "minutes": minutes,  # wall clock, start-up and validations included
        "val": (task_rates(first), task_rates(last)),
        **{p: (task_rates(first / p), task_rates(last / p)) for p in also},
        "val_sampled": (task_rates(first / "val_sampled"), task_rates(last / "val_sampled")),
        "warm": {"val": task_rates(warm), **{p: task_rates(warm / p) for p in also}},
    }


def bound_by_steps(cfg: Config, bench: str, console: Console) -> Config:
    """Runs a bench compares must be equally long: ``train.rl_minutes`` would end each by its own clock,
    so it is refused; ``train.run_minutes`` (the main job's whole-run budget, in its packaged recipe) is
    left out, with a line that says so. The configuration the runs get."""
    if cfg.train.rl_minutes is not None:
        raise CoderlError(
            f"bench {bench}: train.rl_minutes={cfg.train.rl_minutes:g} would end each run after as many RL steps as "
            "its own minutes allow, so the runs it compares would differ in length; bound them by train.steps "
            "(set train.rl_minutes=null)"
        )
    if cfg.train.run_minutes is None:
        return cfg
    console.print(
        f"bench {bench}: train.run_minutes={cfg.train.run_minutes:g} left out — each run takes all "
        f"train.steps={cfg.train.steps} RL steps, however long they take on this machine"
    )
    return cfg.model_copy(update={"train": cfg.train.model_copy(update={"run_minutes": None})})


def bench_learn(
    cfg: Config, seeds: list[int], console: Console | None = None, jobs: int = 1
) -> dict[str, Any]:
    """The bench (module doc). ``jobs``: how many of its runs go at once, each a ``coderl train``
    process (the main job peaks at about 3.5 GB of memory on jemalloc, measured 2026-11-27)."""
    if jobs < 1:
        raise CoderlError(f"bench learn: --jobs {jobs} is not a number of processes; give 1 or more")
    console = console or Console(stderr=True)
    cfg = bound_by_steps(cfg, "learn", console)
    root = bench_root(cfg)
    planned: list[tuple[str, Config, Path]] = []
    for seed in seeds:
        seeded = cfg.model_copy(update={"run": cfg.run.model_copy(update={"seed": seed})})
        frozen = seeded.model_copy(
            update={
                "actor": seeded.actor.model_copy(update={"lr": 0.0}),
                "sft": seeded.sft.model_copy(update={"lr": 0.0, "before_rl": False}),
            }
        )
        planned += [("recipe", seeded, root / f"seed{seed}"), ("control", frozen, root / f"seed{seed}-lr0")]
    # the runs are processes of their own: threads only wait for them
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = wait_stopping_children(lambda: list(pool.map(lambda p: _one_run(p[1], console, p[2], jobs), planned)))
    runs: dict[str, list[dict[str, Any]]] = {"recipe": [], "control": []}
    for (kind, _, _), result in zip(planned, done, strict=True):
        runs[kind].append(result)
    out: dict[str, Any] = {
        "machine": machine_info(),
        "seeds": seeds,
        "tasks": cfg.train.tasks,
        "val_also": "".join(cfg.train.val_also[:1]),  # the first set's source (one source before lists)
        "val_also_sets": {also_prefix(i): source for i, source in enumerate(cfg.train.val_also)},
        "steps": cfg.train.steps,
        "warm_start": cfg.sft.before_rl,
        "minutes_per_run": statistics.fmean(r["minutes"] for rs in runs.values() for r in rs),
        "run_dirs": {k: [r["run_dir"] for r in v] for k, v in runs.items()},
    }
    for held in ("val", *(also_prefix(i) for i in range(len(cfg.train.val_also)))):
        for kind, prefix in (("recipe", ""), ("control", "control_")):
            starts = [r[held][0] for r in runs[kind]]
            ends = [r[held][1] for r in runs[kind]]
            key = f"{prefix}" if held == "val" else f"{held}_{prefix}"
            out[f"{key}start_pass_at_1"] = [statistics.fmean(s.values()) if s else 0.0 for s in starts]
            out[f"{key}end_pass_at_1"] = [statistics.fmean(e.values()) if e else 0.0 for e in ends]
            rise = paired_rise(starts, ends)
            out[f"{key}mean_rise" if kind == "recipe" else f"{key}rise"] = rise["mean_rise"]
            out[f"{key}rise_ci95"] = rise["rise_ci95"]
            out[f"{key}held_out_tasks"] = rise["tasks"]
            warms = [r["warm"][held] for r in runs[kind]]
            if kind == "recipe" and all(warms):  # RL's own share: after the warm start -> end
                out[f"{key}warm_pass_at_1"] = [statistics.fmean(w.values()) for w in warms]
                share = paired_rise(warms, ends)
                out[f"{key}rl_rise"], out[f"{key}rl_rise_ci95"] = share["mean_rise"], share["rise_ci95"]
    return out


def to_markdown(r: dict[str, Any]) -> str:
    m = r["machine"]

    def cells(values: list[float]) -> str:
        return ", ".join(f"{v:.3f}" for v in values)

    lines = [
        "## Learning check (`coderl bench learn`)",
        "",
        f"Command: `{r['command']}` — {m['cpu']}, {m['cores']} cores, torch {m['torch']}. Recipe: `coderl train`'s "
        f"configuration on `{r['tasks']}` ({r['steps']} RL steps{', after a supervised warm start' if r['warm_start'] else ''}), "
        f"seeds {r['seeds']}; control: the same with every learning rate 0 (and no warm start, which at rate 0 moves no weight). About {r['minutes_per_run']:.0f} min (wall clock) per run.",
        "",
        "| held-out set | run | pass@1 at start (per seed) | after the warm start (per seed) | at end (per seed) "
        "| mean rise | 95% interval (paired bootstrap over tasks) | RL's share: end - after the warm start [95% interval] |",
        "|---|---|---|---|---|---|---|---|",
    ]
    sets = r.get("val_also_sets") or ({"val_also": r["val_also"]} if r.get("val_also") else {})
    for held, label in (
        ("", f"split of `{r['tasks']}` ({r['held_out_tasks']} tasks)"),
        *((f"{p}_", f"`{source}` ({r.get(f'{p}_held_out_tasks', 0)} tasks)") for p, source in sets.items()),
    ):
        if f"{held}start_pass_at_1" not in r:
            continue
        for kind, prefix, rise in (("recipe", "", "mean_rise"), ("control (lr 0)", "control_", "rise")):
            lo, hi = r[f"{held}{prefix}rise_ci95"]
            warm, share = "-", "-"
            if f"{held}{prefix}warm_pass_at_1" in r:
                warm = cells(r[f"{held}{prefix}warm_pass_at_1"])
                rl_lo, rl_hi = r[f"{held}{prefix}rl_rise_ci95"]
                share = f"{r[f'{held}{prefix}rl_rise']:+.3f} [{rl_lo:+.3f}, {rl_hi:+.3f}]"
            lines.append(
                f"| {label} | {kind} | {cells(r[f'{held}{prefix}start_pass_at_1'])} | {warm} | "
                f"{cells(r[f'{held}{prefix}end_pass_at_1'])} | **{r[f'{held}{prefix}{rise}']:+.3f}** | "
                f"[{lo:+.3f}, {hi:+.3f}] | {share} |"
            )
    target = "Target: mean held-out rise >= +0.15 absolute, its interval above 0, the control's interval holding 0."
    new_repos = [f"`{source}`" for source in sets.values() if str(source).startswith("pypi:")]
    if new_repos:
        target += f" For {', '.join(new_repos)} (a repository no training task comes from): a rise with its interval above 0."
    lines += ["", target]
    return "\n".join(lines)
