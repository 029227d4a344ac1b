"""``coderl bench WHAT``: the benchmarks behind BENCHMARKS.md, with their common flags handled once.

Every benchmark takes ``[CONFIG.yaml] [key=value ...]``, ``--json`` (one JSON object on stdout),
``--quick`` (a smoke run, never for BENCHMARKS.md) and ``--write FILE`` (its section of a Markdown
file, with the command and the machine); each adds its own flags in :data:`BENCHES`. The benchmarks
themselves are library functions in :mod:`coderl.bench` returning one dict.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coderl.cli.argtypes import at_least, number_list
from coderl.signals import run as run_command

if TYPE_CHECKING:  # the parser is built for --help: nothing heavy is imported until a bench runs
    from rich.console import Console

    from coderl.config import Config

Run = Callable[["Config", argparse.Namespace, "Console"], dict[str, Any]]
SYNTH_LIBRARIES = ("toolz==0.12.1", "cachetools==5.5.0", "humanize==4.11.0", "boltons==24.1.0", "tomlkit==0.13.2",
                   "inflection==0.5.1", "markupsafe==3.0.2", "ujson==5.10.0", "sortedcontainers==2.4.0",
                   "jmespath==1.1.0")  # fmt: skip
"""``coderl bench synth``'s default libraries (coderl.bench.synth.LIBRARIES, named here so --help imports nothing)."""


@dataclass
class Bench:
    help: str
    module: str
    """``coderl.bench.<module>``: its ``to_markdown(result)`` renders the section."""
    run: Run
    flags: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    train_defaults: bool = False
    """Start from ``coderl train``'s packaged defaults (the benchmark measures the main job's recipe)."""
    quick_help: str = "a smaller, faster run (a smoke test, not for BENCHMARKS.md)"
    overrides: Callable[[argparse.Namespace], list[str]] = lambda ns: []
    """Config overrides the benchmark's flags imply, applied before the user's own."""


def _engine(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.engine import bench_engine

    return run_command(bench_engine(cfg, quick=ns.quick, console=console))


def _speculate(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.speculate import bench_speculate

    path = Path(ns.trajectories) if ns.trajectories else None
    return run_command(bench_speculate(cfg, path, ns.speculate, quick=ns.quick, console=console))


def _invariant(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.invariant import bench_invariant

    path = Path(ns.trajectories) if ns.trajectories else None
    return run_command(bench_invariant(cfg, path, quick=ns.quick, console=console))


def _load(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.load import bench_load

    return bench_load(cfg, quick=ns.quick, hogs=ns.hogs, console=console)


def _dtype(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.dtype import bench_dtype

    return bench_dtype(cfg, quick=ns.quick, console=console)


def _engine_cuda(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.engine_cuda import bench_engine_cuda

    modes = tuple(m.strip() for m in ns.modes.split(",") if m.strip())
    return run_command(bench_engine_cuda(cfg, quick=ns.quick, console=console, modes=modes))


def _sandbox(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.sandbox import bench_sandbox

    return run_command(bench_sandbox(cfg.sandbox, quick=ns.quick, console=console))


def _synth(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.synth import run

    return run(cfg, [x.strip() for x in ns.libraries.split(",") if x.strip()], ns.n, ns.quick, console)


def _rollout(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.rollout import bench_rollout

    return run_command(
        bench_rollout(cfg, ns.latency, quick=ns.quick, model_eval=not ns.no_model_eval, console=console)
    )


def _train(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.train import bench_train

    return bench_train(cfg, quick=ns.quick, default_step=not ns.no_step, console=console)


def _learn(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.learn import bench_learn

    seeds: list[int] = ns.seeds
    return bench_learn(cfg, seeds=seeds[:1] if ns.quick else seeds, console=console, jobs=ns.jobs)


def _rl(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.rl import bench_rl

    seeds: list[int] = ns.seeds
    temperatures: list[float] = ns.temperatures
    return bench_rl(
        cfg, seeds=seeds[:1] if ns.quick else seeds, console=console, jobs=ns.jobs, temperatures=temperatures,
        sweep_tasks=2 if ns.quick else ns.sweep_tasks, warm_from=Path(ns.warm) if ns.warm else None,
        control=not ns.no_control,
        control_seeds=ns.control_seeds or None,
        trained_tasks=ns.trained_tasks,
    )  # fmt: skip


def _proxy(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.proxy import bench_proxy

    return run_command(
        bench_proxy(
            quick=ns.quick, latency_s=ns.latency, calls=ns.calls, litellm=not ns.no_litellm, console=console
        )
    )


def _scale(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.scale import bench_scale

    latency = ns.latency if ns.latency is not None else (0.5 if ns.quick else 12.0)
    return bench_scale(cfg, latency, console=console, quick=ns.quick)


def _shard(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.shard import bench_shard

    return bench_shard(cfg, ns.ranks, 2 if ns.quick else 4, ns.quick, console=console)


def _agents(cfg: Config, ns: argparse.Namespace, console: Console) -> dict[str, Any]:
    from coderl.bench.agents import bench_agents

    agents = [a.strip() for a in ns.agents.split(",") if a.strip()]
    tasks = 1 if ns.quick else ns.tasks
    return run_command(bench_agents(cfg, agents, tasks, console=console, overrides=list(ns.config_overrides)))


RL_QUICK = [
    "train.steps=1", "train.val_size=2", "train.val_samples=1", "train.val_sampled=0", "sft.max_demos=4",
    "train.calibrate_tasks=2", "train.calibrate_samples=1", "train.tasks_per_step=1", "train.group_size=2",
    "train.val_also=[]",
]  # fmt: skip
"""What ``coderl bench rl --quick`` sets: a smoke run of every stage."""

SCALE_RUN = [
    "train.val_tasks=none", "train.val_also=[]", "train.dev_size=0", "sft.before_rl=false", "train.save_every=1000",
    "train.calibrate_tasks=0", "algo.dynamic_sampling=false", "rollout.max_format_errors=null",
]  # fmt: skip
"""What every run of ``coderl bench scale`` sets: no validation, no warm start, no calibration, one
checkpoint; every step rolls out once and updates (no group refilled), so the modes time the same work;
the scripted engine's replies call no tool, and each rollout still runs its rollout.max_turns calls."""


BENCHES: dict[str, Bench] = {
    "engine": Bench(
        "engine throughput, TTFT and prefix-cache speedup vs Hugging Face generate", "engine", _engine
    ),
    "speculate": Bench(
        "the embedded engine with drafts from the context (engine.speculate) vs without, on agent turns: "
        "tok/s, steps, drafts kept, same tokens",
        "speculate",
        _speculate,
        [
            ("--speculate", {"type": at_least(1), "default": 4, "help": "draft length compared with 0 (default 4)"}),
            ("--trajectories", {"default": "", "metavar": "FILE", "help": "replay the model turns of a run's trajectories.jsonl (with model.path the model that wrote them) instead of asking the model to copy bundled functions"}),
        ],
        train_defaults=True,
    ),
    "invariant": Bench(
        "what engine.batch_invariant costs on greedy agent sessions (off vs greedy, and a packed step's rows "
        "in one call vs 32-row blocks): tok/s, steps, same tokens",
        "invariant",
        _invariant,
        [
            ("--trajectories", {"default": "", "metavar": "FILE", "help": "replay the sessions of a run's trajectories.jsonl (with model.path the model that wrote them) instead of asking the model to copy bundled functions"}),
        ],
        train_defaults=True,
    ),
    "load": Bench(
        "the embedded engine on a shared machine: decode tok/s alone and beside CPU hogs (other torch "
        "processes), per OpenMP wait policy",
        "load",
        _load,
        [("--hogs", {"type": at_least(0), "default": None,
                     "help": "hog processes beside the engine (default: one per core)"})],
        train_defaults=True,
    ),
    "dtype": Bench(
        "float32 vs bfloat16 on this machine: projection matmuls and the engine's greedy decode tok/s, "
        "side by side, and what dtype=auto picks here",
        "dtype",
        _dtype,
        train_defaults=True,
    ),
    "engine-cuda": Bench(
        "the embedded engine on a GPU (each decode mode) vs Hugging Face generate batched, at 1/8/64 concurrent",
        "engine_cuda",
        _engine_cuda,
        [
            (
                "--modes",
                {
                    "default": "graphs,batched",
                    "help": "decode modes to measure, comma-separated; the first is compared with HF "
                    "(default graphs,batched; per_sequence, the CPU's mode, is slow on a GPU)",
                },
            )
        ],
    ),
    "sandbox": Bench("sandbox create/exec/close latency, throughput and grading time", "sandbox", _sandbox),
    "synth": Bench(
        "coderl tasks synth on public libraries fetched from PyPI: per library, mutants tried, kept, dropped by reason, validated, minutes",
        "synth",
        _synth,
        [
            ("--libraries", {"default": ",".join(SYNTH_LIBRARIES), "help": "comma-separated NAME==VERSION of PyPI projects (default: the pinned list in coderl/bench/synth.py); --quick runs the first with --n 3"}),
            ("--n", {"type": at_least(1), "default": 30, "help": "tasks wanted per library (default 30)"}),
        ],
    ),
    "rollout": Bench(
        "rollout throughput vs the latency-bound ideal, per-turn overhead, real-model pass@1",
        "rollout",
        _rollout,
        [
            (
                "--latency",
                {"type": at_least(0, float), "default": 2.0, "help": "scripted engine seconds per call (default 2.0)"},
            ),
            (
                "--no-model-eval",
                {"action": "store_true", "help": "skip the real-model eval of warmup + easy"},
            ),
        ],
    ),
    "train": Bench(
        "trainer tokens/s packed vs padded (packing_speedup), peak memory, stage times of one step",
        "train",
        _train,
        [("--no-step", {"action": "store_true", "help": "skip the timed default training step"})],
        train_defaults=True,
    ),
    "learn": Bench(
        "the learning check: the main job's recipe over seeds and an lr-0 control; held-out pass@1 start -> end",
        "learn",
        _learn,
        [
            (
                "--seeds",
                {"type": number_list(), "default": "0,1,2", "help": "comma-separated seeds (default 0,1,2); --quick runs the first"},
            ),
            (
                "--jobs",
                {
                    "type": at_least(1),
                    "default": 1,
                    "help": "runs at once, each a coderl train process with its share of the cores (default 1; the main job peaks at about 3.5 GB)",
                },
            ),
        ],
        train_defaults=True,
        overrides=lambda ns: (
            ["train.steps=1", "train.val_size=2", "train.val_samples=1", "train.val_also=[]", "sft.max_demos=4"]
            if ns.quick
            else []
        ),
    ),
    "rl": Bench(
        "RL's own share: one warm start, then the RL phase over seeds against an lr-0 control; held-out pass@1",
        "rl",
        _rl,
        [
            (
                "--seeds",
                {"type": number_list(), "default": "0,1,2", "help": "comma-separated seeds (default 0,1,2); --quick runs the first"},
            ),
            (
                "--jobs",
                {"type": at_least(1), "default": 1, "help": "runs at once, each a coderl train process with its share of the cores (default 1)"},
            ),
            (
                "--temperatures",
                {"type": number_list(float, allow_empty=True), "default": "", "help": "comma-separated rollout temperatures: measure how many groups can teach at each (the warm start's policy on training tasks) instead of the seeds"},
            ),
            ("--sweep-tasks", {"type": at_least(1), "default": 16, "help": "training tasks per temperature of --temperatures (default 16)"}),
            ("--warm", {"default": "", "metavar": "DIR", "help": "a warm-started model folder to start from (a main job's RUN/warm, or coderl sft --out) instead of making one"}),
            ("--no-control", {"action": "store_true", "help": "leave out the control runs (learning rate 0): for comparing RL settings on a dev split (train.dev_size); refused with --write"}),
            ("--control-seeds", {"type": number_list(allow_empty=True), "default": "", "metavar": "SEEDS", "help": "comma-separated seeds (some of --seeds) to run the control on (default: every seed); a control costs a run"}),
            ("--trained-tasks", {"action": "store_true", "help": "also roll out the tasks each RL run trained on (train.group_size samples at the rollout temperature) under the warm start and under the run's final weights: did RL get better at what it trained on (an optimisation check, not held out)"}),
        ],
        train_defaults=True,
        overrides=lambda ns: (
            RL_QUICK if ns.quick else []
        ),
    ),
    "shard": Bench(
        "the sharded actor (FSDP2, actor.ranks) vs one process: same update, time per step",
        "shard",
        _shard,
        [("--ranks", {"type": at_least(2), "default": 2, "help": "ranks to compare with one process (default 2)"})],
    ),
    "scale": Bench(
        "sync vs async training steps/s (max_staleness 1 and 2): scripted engine, real sandboxes and actor",
        "scale",
        _scale,
        [
            (
                "--latency",
                {
                    "type": at_least(0, float),
                    "default": None,
                    "help": "scripted engine seconds per call (default 12.0: rollouts about as long as the update on a 2-core CPU; 0.5 with --quick)",
                },
            )
        ],
        train_defaults=True,
        overrides=lambda ns: (
            SCALE_RUN
            + (
                [
                    "train.steps=2",
                    "train.tasks_per_step=1",
                    "train.group_size=2",
                    "rollout.max_tokens=16",
                    "rollout.max_turns=1",
                ]
                if ns.quick
                else [
                    "train.steps=6",
                    "train.tasks_per_step=2",
                    "train.group_size=4",
                    "rollout.max_tokens=64",
                ]
            )
        ),
    ),
    "agents": Bench(
        "the packaged agent programs (Codex CLI, Claude Code, aider, opencode, mini-swe-agent) through the proxy with the real model: sequences per rollout, shared-prefix share, token-exactness",
        "agents",
        _agents,
        [
            (
                "--agents",
                {"default": "mini_swe_agent,codex,claude_code,aider,opencode", "help": "comma-separated agents, each with a packaged coderl/configs/remote_<agent>.yaml (default all five); a recipe's remote_setup installs its pinned program where it is missing"},
            ),
            ("--tasks", {"type": at_least(1), "default": 4, "help": "rollouts per agent, one per bundled warmup task (default 4)"}),
        ],
    ),
    "proxy": Bench(
        "recording proxy: added latency p50/p99 and throughput at 1/64/256 sessions vs direct and LiteLLM",
        "proxy",
        _proxy,
        [
            (
                "--latency",
                {"type": at_least(0, float), "default": 1.0, "help": "scripted engine seconds per call for throughput"},
            ),
            (
                "--calls",
                {"type": at_least(1), "default": 4, "help": "calls per session in the throughput runs (default 4)"},
            ),
            ("--no-litellm", {"action": "store_true", "help": "skip the LiteLLM reference"}),
        ],
    ),
}


def add_bench_parsers(sub: Any, config_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """One sub-command per benchmark, each with the common flags and its own."""
    for name, bench in BENCHES.items():
        p = sub.add_parser(name, help=bench.help, description=bench.help)
        config_args(p)
        p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        p.add_argument("--quick", action="store_true", help=bench.quick_help)
        p.add_argument(
            "--write",
            metavar="FILE",
            help="also write the figures into this Markdown file (e.g. BENCHMARKS.md)",
        )
        for flag, kwargs in bench.flags:
            p.add_argument(flag, **kwargs)
        p.set_defaults(func=run_bench, bench_name=name)


def run_bench(ns: argparse.Namespace) -> int:
    from rich.console import Console

    from coderl.bench.report import command_line, write_section
    from coderl.config import load_config
    from coderl.config.packaged import default_train_config
    from coderl.errors import ConfigError

    bench = BENCHES[ns.bench_name]
    if ns.write and not Path(ns.write).resolve().parent.is_dir():
        raise ConfigError(f"--write {ns.write}: its folder does not exist; name a file in an existing folder")
    defaults = default_train_config() if bench.train_defaults else None
    cfg = load_config(ns.config_path, [*bench.overrides(ns), *ns.config_overrides], defaults=defaults)
    if ns.write and getattr(ns, "no_control", False):
        raise ConfigError(
            f"--write {ns.write}: refused with --no-control — BENCHMARKS.md's figures stand beside their control "
            "(leave out --write, or --no-control)"
        )
    if ns.write and cfg.train.dev_size:
        raise ConfigError(
            f"--write {ns.write}: refused with train.dev_size={cfg.train.dev_size} — a dev split's figures are "
            "for choosing settings; BENCHMARKS.md reports held-out ones (leave out --write, or train.dev_size)"
        )
    result = bench.run(cfg, ns, Console(stderr=True))
    result["command"] = command_line()
    module = importlib.import_module(f"coderl.bench.{bench.module}")
    markdown: Callable[[dict[str, Any]], str] = module.to_markdown
    if ns.write:  # a bench with more than one kind of result names each one's section (section_name)
        section = module.section_name(result) if hasattr(module, "section_name") else ns.bench_name
        write_section(Path(ns.write), section, markdown(result))
    print(json.dumps(result) if ns.json else markdown(result))
    return 0
