"""``coderl train``: the main job (rollout -> grade -> advantages -> update -> sync, step after step)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from coderl.cli.common import refuse_early
from coderl.config import Config, load_config
from coderl.config.packaged import default_train_config
from coderl.errors import ConfigError
from coderl.hardware import describe_bf16
from coderl.rundir import create_run_dir, run_kind
from coderl.runlog import run_log
from coderl.signals import run as run_command


def train_config(config_path: str | None, overrides: list[str], bare: bool = False) -> Config:
    """The run's config: the packaged recipe (coderl/configs/train.yaml), then the config file, then
    the overrides, each changing only the keys it names (a resumed run's config.yaml holds every key);
    ``bare``: the built-in defaults instead of the packaged recipe."""
    return load_config(config_path, overrides, defaults=None if bare else default_train_config())


def run_train(ns: argparse.Namespace) -> int:
    from coderl.train.loop import Trainer

    console = Console(stderr=True)
    config_path, overrides = ns.config_path, list(ns.config_overrides)
    resume = getattr(ns, "resume", None)
    if resume:
        run_dir = Path(resume)
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(
                f"--resume {resume!r}: no config.yaml there; pass the run directory of a train run"
            )
        if run_kind(run_dir) not in (None, "train"):
            raise ConfigError(
                f"--resume {resume!r}: that is a coderl {run_kind(run_dir)} run, not a train run; pass the run "
                "directory of a train run"
            )
        config_path = config_path or str(run_dir / "config.yaml")
        named = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].strip() == "run.dir" and "=" in o]
        if named and Path(named[-1]).resolve() != run_dir.resolve():
            raise ConfigError(
                f"--resume {resume!r} with run.dir={named[-1]}: a resumed run goes on in its own directory; "
                "leave run.dir out"
            )
        overrides.append(f"run.dir={run_dir}")
    cfg = train_config(config_path, overrides, bare=getattr(ns, "bare", False))
    refuse_early(cfg)
    run_dir = create_run_dir(cfg, "train", resume=bool(resume))
    with run_log(run_dir, "train", console, resumed=bool(resume)) as log_path:
        console.print(f"run directory: {run_dir} (its log: {log_path.name})")
        console.print(
            f"compute dtype: engine {cfg.model.dtype}, actor {cfg.actor.dtype} ({describe_bf16(cfg.model.device)})",
            highlight=False,
        )
        report = run_command(Trainer(cfg, run_dir, console).run(resume=bool(resume)))
        console.print(f"report: {report}")
    return 0
