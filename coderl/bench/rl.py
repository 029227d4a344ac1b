"""``coderl bench rl``: does the RL phase raise held-out pass@1 beyond the warm start it starts from?

``coderl bench learn`` measures the whole main job (warm start + RL) against no learning at all; this
bench isolates RL's own share. One warm start is made once with ``coderl sft`` (the configuration's
``sft`` settings and demonstrations; held-out tasks never demonstrated) and kept in the bench folder,
reused by every later bench with the same warm-start settings. Then, per seed, the RL phase alone —
``coderl train`` with ``model.path`` = that checkpoint and ``sft.before_rl=false``: the same
calibration, curriculum, guidance and steps as in the main job — validated on the held-out tasks before
its first update and after its last; and per seed a control, the same run with the RL learning rate 0
(``actor.lr=0``: the same rollouts, grading and validation, weights unchanged).

Figures (``--json`` keys): ``seeds``; ``warm_pass_at_1`` and ``rl_pass_at_1`` (held-out pass@1 before
and after the RL phase, per seed); ``rl_rise`` (their mean difference) with ``rl_rise_ci95`` (paired
bootstrap over tasks, :func:`coderl.bench.learn.paired_rise`); ``control_rise`` with
``control_rise_ci95``; ``teaching_group_share`` (the share of groups whose rewards differed, mean over
the RL runs' steps); the same ``*_sampled_*`` figures for the validation at the rollout temperature
when ``train.val_sampled > 0``; and the held-out split's change F1 (:func:`coderl.train.signal.change_f1`:
how close the patches came to the gold ones, per task the mean over its samples) the same way:
``warm_change_f1``, ``rl_change_f1``, ``rl_change_f1_rise`` with ``rl_change_f1_rise_ci95``, the
control's, ``*_sampled_change_f1*`` and ``change_f1_tasks`` — a diagnostic beside pass@1, not the target.

``--no-control`` leaves the controls out (half the runs): for comparing RL settings on a dev split
(``train.dev_size``), where what matters is how the settings rank, not whether weights that do not
move hold still; such figures are not written to BENCHMARKS.md. ``--control-seeds`` runs the control
on some of the seeds only (``control_seeds``; the control's rows then stand on those seeds, its own
starts beside its own ends): a run whose weights cannot move costs as much as one whose weights do.

Each ``train.val_also`` set (the main job's hand-written tier and new repository) is reported the same
way under ``also``: per set, its source, ``warm_pass_at_1``, ``rl_pass_at_1``, ``rl_rise`` with
``rl_rise_ci95``, and the control's ``control_rise`` with ``control_rise_ci95``.

``--trained-tasks`` adds an optimisation check (:func:`trained_tasks_figures`): the tasks each RL run
trained on, rolled out ``train.group_size`` times at the rollout temperature under the warm start and
under the run's final weights (``coderl export``): ``trained_tasks`` (per seed), ``trained_warm_pass_rate``
and ``trained_rl_pass_rate`` (per seed), ``trained_rise`` with ``trained_rise_ci95`` (bootstrap over
(seed, task) pairs). It tells an RL phase that does not move its own tasks from one whose gains do not
carry to held-out ones; it is no learning claim (those tasks are trained on). Its control, with two
seeds or more: each run's final weights on the tasks the warm start solved at least once that only
other seeds trained on (``untrained_edge_tasks`` per seed, ``untrained_edge_rise`` with
``untrained_edge_rise_ci95``), beside the same figure for such tasks a run did train on
(``trained_edge_pairs``, ``trained_edge_rise``, ``trained_edge_rise_ci95``).

``control_same_trajectories``: per control run, [held-out tasks whose greedy trajectory came out token
for token the same in its first and last validation, tasks] — with weights unchanged, how reproducible
the greedy figure is on its own.

Runs live in ``runs/bench-rl-<digest>/`` (``run.dir`` when given): ``warm/`` and one folder per seed and
kind; finished runs are reused, as in ``coderl bench learn``.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console

from coderl.bench.children import run_child, wait_stopping_children
from coderl.bench.learn import (
    _one_run,
    bootstrap_ci95,
    bound_by_steps,
    config_key,
    paired_rise,
    task_rates,
)
from coderl.bench.report import machine_info
from coderl.bench.rl_markdown import section_name, to_markdown
from coderl.config import Config
from coderl.config.loader import dump_config
from coderl.errors import CoderlError
from coderl.rollout.store import read_trajectories
from coderl.threads import share_of_cores
from coderl.train.checkpoints import read_metrics
from coderl.train.sft import DEMONSTRATED, read_demonstrated
from coderl.train.validation import also_prefix

__all__ = ["bench_rl", "section_name", "to_markdown"]  # the last two: `coderl bench rl --write` renders with them

WARM_KEYS = ("model", "sft", "rollout", "tasks", "sandbox")
"""Sections a warm start depends on (with train.tasks and the held-out split, and the seed)."""


def warm_key(cfg: Config) -> str:
    """The settings that make a warm start what it is (module doc)."""
    dump = cfg.model_dump(mode="json")
    t = cfg.train
    chosen = {k: dump[k] for k in WARM_KEYS}
    also: str | list[str] = t.val_also if len(t.val_also) > 1 else "".join(t.val_also)  # one: as keyed before lists
    chosen["train"] = {"tasks": t.tasks, "val_tasks": t.val_tasks, "val_size": t.val_size, "val_also": also}
    if t.dev_size:  # a dev split's tasks are kept out of the demonstrations (keys from before it unchanged)
        chosen["train"]["dev_size"] = t.dev_size
    chosen["seed"] = cfg.run.seed
    return json.dumps(chosen, sort_keys=True)


def bench_root(cfg: Config) -> Path:
    if cfg.run.dir is not None:
        return cfg.run.dir
    key = config_key(cfg.model_copy(update={"run": cfg.run.model_copy(update={"seed": 0})}))
    return Path("runs") / f"bench-rl-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def warm_checkpoint(cfg: Config, root: Path, console: Console) -> tuple[Path, float]:
    """The warm start's model folder, made once with ``coderl sft`` (a process of its own) and reused
    while the warm-start settings stay the same; and the minutes it took when it was made."""
    folder = root / "warm"
    marker = folder / "bench.json"
    key = warm_key(cfg.model_copy(update={"run": cfg.run.model_copy(update={"seed": 0})}))
    if marker.is_file() and json.loads(marker.read_text()).get("key") == key and (folder / "model").is_dir():
        console.print(f"[bold]warm start[/]: made before, reused ({folder / 'model'})")
        return folder / "model", float(json.loads(marker.read_text())["minutes"])
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    seeded = cfg.model_copy(update={"run": cfg.run.model_copy(update={"seed": 0, "dir": folder / "run"})})
    (folder / "config.yaml").write_text(dump_config(seeded))
    console.print(f"[bold]warm start[/]: coderl sft -> {folder / 'model'}")
    began = time.monotonic()
    command = [sys.executable, "-m", "coderl", "sft", str(folder / "config.yaml"), "--out", str(folder / "model")]
    code = run_child(command, env=share_of_cores(1))
    if code != 0:
        raise CoderlError(f"bench rl: the warm start failed (coderl sft exited with {code}); see {folder}")
    minutes = (time.monotonic() - began) / 60
    marker.write_text(json.dumps({"key": key, "minutes": minutes}))
    return folder / "model", minutes


def given_warm_start(folder: Path) -> tuple[Path, float | None]:
    """A warm-started model folder given by the user (``--warm``), checked: (it, no minutes)."""
    if not (folder / "config.json").is_file():
        raise CoderlError(
            f"bench rl: --warm {folder} is not a model folder (no config.json); give a main job's <run>/warm "
            "or the --out folder of coderl sft"
        )
    if not (folder / DEMONSTRATED).is_file():
        raise CoderlError(
            f"bench rl: --warm {folder} has no {DEMONSTRATED} (the tasks its warm start imitated, which the "
            "calibration samples); give a folder written by coderl sft or coderl train's warm start"
        )
    return folder, None


def _teaching_share(run_dir: Path) -> list[float]:
    return [float(r["teaching_groups"]) for r in read_metrics(run_dir / "metrics.jsonl") if "teaching_groups" in r]


def temperature_sweep(
    cfg: Config, warm: Path, root: Path, temperatures: list[float], tasks: int, console: Console
) -> list[dict[str, Any]]:
    """Per rollout temperature, ``tasks`` training tasks (a seeded sample, never held out) rolled out
    ``train.group_size`` times each under the warm start (``coderl eval`` in a process of its own):
    pass rate, tasks sometimes solved, and the share of groups that can teach (rewards differ) — what
    the RL phase's temperature is chosen by."""
    from coderl.tasks.split import train_and_held_out

    t = cfg.train
    train = train_and_held_out(t.tasks, t.val_tasks, t.val_size, t.val_also, t.dev_size, read_demonstrated(warm)).train
    picked = sorted(t.id for t in random.Random(cfg.run.seed).sample(train, min(tasks, len(train))))
    rows = []
    for temperature in temperatures:
        groups = sampled_outcomes(cfg, warm, picked, temperature, root / f"sweep-T{temperature:g}", console)
        outcomes = list(groups.values())
        rows.append(
            {
                "temperature": temperature,
                "tasks": len(outcomes),
                "samples": sum(len(g) for g in outcomes),
                "pass_rate": sum(sum(g) for g in outcomes) / max(sum(len(g) for g in outcomes), 1),
                "tasks_ever_solved": sum(1 for g in outcomes if any(g)),
                "teaching_group_share": sum(1 for g in outcomes if any(g) and not all(g)) / max(len(outcomes), 1),
            }
        )
    return rows


def sampled_outcomes(
    cfg: Config, model: Path, task_ids: list[str], temperature: float, run_dir: Path, console: Console
) -> dict[str, list[bool]]:
    """Task id -> solved or not, per sample: ``task_ids`` (of ``train.tasks``' kind) rolled out
    ``train.group_size`` times each by ``model`` at ``temperature`` with the configuration's loop, as
    ``coderl eval`` in a process of its own in ``run_dir`` (the same evaluation finished there is reused)."""
    source = cfg.train.tasks.split(":", 1)[0] + ":" + ",".join(task_ids)
    evaluated = cfg.model_copy(
        update={
            "model": cfg.model.model_copy(update={"path": model}),
            "tasks": cfg.tasks.model_copy(update={"source": source}),
            "rollout": cfg.rollout.model_copy(
                update={"temperature": temperature, "group_size": cfg.train.group_size, "pass_k": [1]}
            ),
            "run": cfg.run.model_copy(update={"dir": run_dir}),
        }
    )
    config = dump_config(evaluated)
    made = run_dir / "config.yaml"
    if not (run_dir / "report.json").is_file() or not made.is_file() or made.read_text() != config:
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text(config)
        console.print(
            f"[bold]{run_dir.name}[/]: {len(task_ids)} tasks x {cfg.train.group_size} samples at "
            f"T={temperature:g} ({model})"
        )
        command = [sys.executable, "-m", "coderl", "eval", str(run_dir / "config.yaml"), f"run.dir={run_dir}"]
        code = run_child(command)
        if code != 0:
            raise CoderlError(f"bench rl: {run_dir} failed (coderl eval exited with {code}); run the bench again")
    groups: dict[str, list[bool]] = {}
    for row in read_trajectories(run_dir):
        if row.get("part", 0) == 0:
            groups.setdefault(row["task_id"], []).append(bool(row.get("resolved")))
    return groups


def trained_task_ids(run_dir: Path) -> list[str]:
    """The tasks a train run rolled out for its RL steps (every group, dynamic sampling's refills
    included; calibration and validation live in folders of their own; not those of steps a resume
    redid)."""
    return sorted({str(row["task_id"]) for row in read_trajectories(run_dir) if not row.get("lost")})


def final_model(run_dir: Path) -> Path:
    """A train run's newest checkpoint as a model folder (``coderl export``, LoRA merged), made once."""
    out = run_dir / "export-final"
    if not (out / "config.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        command = [sys.executable, "-m", "coderl", "export", str(run_dir), "--out", str(out)]
        code = run_child(command)
        if code != 0:
            raise CoderlError(f"bench rl: coderl export {run_dir} failed (exit {code})")
    return out


def trained_tasks_figures(
    cfg: Config, warm: Path, root: Path, rl_dirs: list[Path], console: Console
) -> dict[str, Any]:
    """``--trained-tasks``: did each RL run get better at the tasks it trained on? The warm start and
    each run's final weights, ``train.group_size`` samples per task at the rollout temperature, on the
    tasks that run trained on (the warm start once, on all of them: it is also what an lr-0 control
    ends with). An optimisation check, not a learning claim: these tasks are not held out.

    Its control, with two seeds or more: each run's final weights also on the *edge* tasks (ones the warm
    start solved at least once here) that other seeds trained on and it did not — the same weights, the
    same kind of task, only not trained on; against the same for the edge tasks it did train on. Both
    sets are picked by the same warm-start figures, so they compare fairly with each other (each rise on
    its own leans low: a task picked for a lucky solve tends to solve less when sampled again)."""
    trained = [trained_task_ids(d) for d in rl_dirs]
    every = sorted(set().union(*trained))
    digest = hashlib.sha256(",".join(every).encode()).hexdigest()[:10]
    temperature = cfg.rollout.temperature
    before = sampled_outcomes(cfg, warm, every, temperature, root / f"trained-warm-{digest}", console)
    edge = {t for t in every if any(before[t])}
    pairs: list[tuple[float, float]] = []
    edge_pairs: list[tuple[float, float]] = []
    other_pairs: list[tuple[float, float]] = []
    warm_means: list[float] = []
    rl_means: list[float] = []
    others_per_seed: list[int] = []
    for run_dir, ids in zip(rl_dirs, trained, strict=True):
        final = final_model(run_dir)
        after = sampled_outcomes(cfg, final, ids, temperature, run_dir / "trained-eval", console)
        seed_pairs = [(statistics.fmean(before[t]), statistics.fmean(after[t])) for t in ids]
        pairs += seed_pairs
        edge_pairs += [p for t, p in zip(ids, seed_pairs, strict=True) if t in edge]
        warm_means.append(statistics.fmean(a for a, _ in seed_pairs) if seed_pairs else 0.0)
        rl_means.append(statistics.fmean(b for _, b in seed_pairs) if seed_pairs else 0.0)
        others = sorted(edge - set(ids))
        others_per_seed.append(len(others))
        if others:
            other = sampled_outcomes(cfg, final, others, temperature, run_dir / "other-eval", console)
            other_pairs += [(statistics.fmean(before[t]), statistics.fmean(other[t])) for t in others]
    mean, interval = pooled_rise(pairs)
    edge_mean, edge_interval = pooled_rise(edge_pairs)
    other_mean, other_interval = pooled_rise(other_pairs)
    return {
        "trained_tasks": [len(ids) for ids in trained],
        "trained_samples_per_task": cfg.train.group_size,
        "trained_temperature": temperature,
        "trained_warm_pass_rate": warm_means,
        "trained_rl_pass_rate": rl_means,
        "trained_rise": mean,
        "trained_rise_ci95": interval,
        "trained_edge_pairs": len(edge_pairs),
        "trained_edge_rise": edge_mean,
        "trained_edge_rise_ci95": edge_interval,
        "untrained_edge_tasks": others_per_seed,
        "untrained_edge_rise": other_mean,
        "untrained_edge_rise_ci95": other_interval,
    }


def pooled_rise(pairs: list[tuple[float, float]], seed: int = 0) -> tuple[float, list[float]]:
    """Mean of ``after - before`` over (seed, task) pairs and its bootstrap 95% interval over the pairs
    (each seed trained on tasks of its own, so there is no common set to pair the seeds over)."""
    if not pairs:
        return 0.0, [0.0, 0.0]
    rises = [b - a for a, b in pairs]
    return statistics.fmean(rises), bootstrap_ci95(rises, seed)


def bench_rl(
    cfg: Config,
    seeds: list[int],
    console: Console | None = None,
    jobs: int = 1,
    temperatures: list[float] | None = None,
    sweep_tasks: int = 16,
    warm_from: Path | None = None,
    control: bool = True,
    control_seeds: list[int] | None = None,
    trained_tasks: bool = False,
) -> dict[str, Any]:
    """The bench (module doc); with ``temperatures``, the temperature sweep (:func:`temperature_sweep`)
    instead of the seeds. ``warm_from``: a warm-started model folder made before (a main job's
    ``<run>/warm``, or ``coderl sft --out``) instead of the bench's own. ``control=False``: no control
    runs (``--no-control``); ``control_seeds``: the seeds with a control run (default: every seed);
    ``trained_tasks``: also :func:`trained_tasks_figures` (``--trained-tasks``)."""
    if jobs < 1:
        raise CoderlError(f"bench rl: --jobs {jobs} is not a number of processes; give 1 or more")
    if temperatures and not control:
        raise CoderlError("bench rl: --no-control with --temperatures — the sweep runs no control to leave out; drop one")
    if control_seeds is not None and not control:
        raise CoderlError("bench rl: --no-control with --control-seeds — give one (no control runs, or controls on some seeds)")
    controlled = ([*seeds] if control_seeds is None else [*control_seeds]) if control else []
    if not set(controlled) <= set(seeds) or (control and not controlled):
        raise CoderlError(
            f"bench rl: --control-seeds {','.join(map(str, controlled))} — give one or more of the seeds run ({','.join(map(str, seeds))})"
        )
    if not cfg.sft.before_rl or not cfg.sft.data:
        raise CoderlError(
            "bench rl measures the RL phase after a warm start: the configuration needs sft.before_rl=true and "
            "sft.data (coderl train's packaged defaults have both)"
        )
    console = console or Console(stderr=True)
    cfg = bound_by_steps(cfg, "rl", console)
    root = bench_root(cfg)
    warm, warm_minutes = given_warm_start(warm_from) if warm_from else warm_checkpoint(cfg, root, console)
    if temperatures:
        sweep = temperature_sweep(cfg, warm, root, temperatures, sweep_tasks, console)
        best = max(sweep, key=lambda r: (r["teaching_group_share"], r["pass_rate"]))
        return {
            "machine": machine_info(), "tasks": cfg.train.tasks, "group_size": cfg.train.group_size,
            "warm_start": str(warm), "sweep": sweep, "chosen_temperature": best["temperature"],
        }  # fmt: skip
    planned: list[tuple[str, Config, Path]] = []
    for seed in seeds:
        rl = cfg.model_copy(
            update={
                "run": cfg.run.model_copy(update={"seed": seed}),
                "model": cfg.model.model_copy(update={"path": warm}),
                "sft": cfg.sft.model_copy(update={"before_rl": False}),
            }
        )
        planned.append(("rl", rl, root / f"rl-seed{seed}"))
        if seed in controlled:
            still = rl.model_copy(update={"actor": rl.actor.model_copy(update={"lr": 0.0})})
            planned.append(("control", still, root / f"control-seed{seed}"))
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # the runs are processes; threads only wait
        done = wait_stopping_children(lambda: list(pool.map(lambda p: _one_run(p[1], console, p[2], jobs), planned)))
    runs: dict[str, list[dict[str, Any]]] = {"rl": [], "control": []}
    for (kind, _, _), result in zip(planned, done, strict=True):
        runs[kind].append(result)
    out: dict[str, Any] = {
        "machine": machine_info(),
        "seeds": seeds,
        "tasks": cfg.train.tasks,
        "steps": cfg.train.steps,
        "samples_per_step": cfg.train.tasks_per_step * cfg.train.group_size,
        "warm_start": str(warm),
        "warm_start_minutes": warm_minutes,
        "control": bool(controlled),
        "control_seeds": controlled,
        "validated_on": "dev" if cfg.train.dev_size else "held-out",
        "minutes_per_run": statistics.fmean(r["minutes"] for rs in runs.values() for r in rs),
        "run_dirs": {k: [r["run_dir"] for r in v] for k, v in runs.items()},
        "teaching_group_share": statistics.fmean(
            [x for r in runs["rl"] for x in _teaching_share(Path(r["run_dir"]))] or [0.0]
        ),
        "control_same_trajectories": [_same_trajectories(Path(r["run_dir"])) for r in runs["control"]],
    }
    for held, infix in (("val", ""), ("val_sampled", "sampled_")):
        if any(r[held][0] for r in runs["rl"]):
            figures = _rise_figures(runs, held, infix)
            out[f"{infix}held_out_tasks"] = figures.pop("tasks")
            out |= figures
    out |= _change_f1_figures(runs)
    out["also"] = [
        {"source": source, **_rise_figures(runs, also_prefix(i))} for i, source in enumerate(cfg.train.val_also)
    ]
    if trained_tasks:
        out |= trained_tasks_figures(cfg, warm, root, [Path(r["run_dir"]) for r in runs["rl"]], console)
    return out


def _same_trajectories(run_dir: Path) -> list[int]:
    """[tasks whose greedy held-out trajectory came out token for token the same, tasks] between a
    run's first and last validation: in a control (weights unchanged) what is left is the engine's own
    run-to-run variation (bfloat16 sums grouped by what else shares a step)."""
    ends = _first_last(run_dir)
    if ends is None or ends[0] == ends[1]:
        return [0, 0]
    first, last = (_token_streams(f) for f in ends)
    shared = set(first) & set(last)
    return [sum(first[t] == last[t] for t in shared), len(shared)]


def _token_streams(folder: Path) -> dict[str, list[list[int]]]:
    """Per held-out task of one greedy validation, the token ids of each part (prompt + response)."""
    streams: dict[str, list[list[int]]] = {}
    for row in read_trajectories(folder) if (folder / "trajectories").is_dir() else []:
        streams.setdefault(row["task_id"], []).append([*row["prompt_ids"], *row["response_ids"]])
    return streams


def _means(rates: list[dict[str, float]]) -> list[float]:
    return [statistics.fmean(r.values()) if r else 0.0 for r in rates]


def _rise_figures(
    runs: dict[str, list[dict[str, Any]]], held: str, infix: str = "", value: str = "pass_at_1", rise: str = "rise"
) -> dict[str, Any]:
    """One held-out set's figures (module doc; ``held`` its key in the runs' results, ``infix`` the
    keys' infix; ``value`` and ``rise`` name the measure, pass@1 unless told): its value before and after
    per seed, the paired rise and its interval, for the RL runs and (when there are any) the controls;
    and ``tasks``, how many tasks the rises pair."""
    figures: dict[str, Any] = {}
    for kind in ("rl", "control") if runs["control"] else ("rl",):
        starts = [r[held][0] for r in runs[kind]]
        ends = [r[held][1] for r in runs[kind]]
        paired = paired_rise(starts, ends)
        if kind == "rl":
            figures[f"warm_{infix}{value}"] = _means(starts)
            figures[f"rl_{infix}{value}"] = _means(ends)
        else:
            figures[f"control_{infix}start_{value}"] = _means(starts)
            figures[f"control_{infix}end_{value}"] = _means(ends)
        figures[f"{kind}_{infix}{rise}"] = paired["mean_rise"]
        figures[f"{kind}_{infix}{rise}_ci95"] = paired["rise_ci95"]
        figures["tasks"] = paired["tasks"]
    return figures


def _change_f1_figures(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The held-out split's change F1 (:func:`coderl.train.signal.change_f1`, per task: the mean over its
    samples, as each validation stored it) before and after RL, as :func:`_rise_figures` gives pass@1:
    keys ``warm_change_f1``, ``rl_change_f1``, ``rl_change_f1_rise`` (``_ci95``), the control's, the
    ``sampled_`` ones, and ``change_f1_tasks`` (how many tasks the rises pair; tasks without a gold patch
    have no F1). Nothing where the validations stored none (runs of an older coderl)."""
    pairs = {kind: [_first_last_f1(Path(r["run_dir"])) for r in rs] for kind, rs in runs.items()}
    out: dict[str, Any] = {}
    for held, infix in (("val", ""), ("val_sampled", "sampled_")):
        if all(p[held][0] and p[held][1] for p in pairs["rl"]):
            figures = _rise_figures(pairs, held, infix, value="change_f1", rise="change_f1_rise")
            out[f"{infix}change_f1_tasks"] = figures.pop("tasks")
            out |= figures
    return out


def _first_last_f1(run_dir: Path) -> dict[str, tuple[dict[str, float], dict[str, float]]]:
    ends = _first_last(run_dir)
    if ends is None:
        return {"val": ({}, {}), "val_sampled": ({}, {})}
    first, last = ends
    return {
        "val": (task_rates(first, "change_f1"), task_rates(last, "change_f1")),
        "val_sampled": (task_rates(first / "val_sampled", "change_f1"), task_rates(last / "val_sampled", "change_f1")),
    }


def _first_last(run_dir: Path) -> tuple[Path, Path] | None:
    """A run's first and last validation folders (None before any)."""
    folders = sorted((run_dir / "validation").iterdir()) if (run_dir / "validation").is_dir() else []
    return (folders[0], folders[-1]) if folders else None
