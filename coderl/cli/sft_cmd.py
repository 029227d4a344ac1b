"""``coderl sft``: a supervised warm start of the policy on demonstrations (gold patches, resolved rollouts)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from coderl.cli.common import refuse_early
from coderl.cli.train_cmd import train_config
from coderl.config import Config
from coderl.errors import ConfigError
from coderl.progress import progress_bars
from coderl.rundir import create_run_dir
from coderl.runlog import run_log
from coderl.signals import run as run_command

if TYPE_CHECKING:
    from coderl.train.actor import Policy
    from coderl.types import Trajectory


def run_sft(ns: argparse.Namespace) -> int:
    from coderl.train.export import check_model_out

    cfg = train_config(ns.config_path, list(ns.config_overrides), bare=ns.bare)  # the loop RL will use
    if cfg.cluster.actor == "ray":
        raise ConfigError(
            "cluster.actor: got ray — coderl sft runs its ranks on this machine (actor.ranks); the warm start "
            "on Ray ranks runs inside coderl train (sft.before_rl=true), set cluster.actor=local here"
        )
    if ns.out:
        check_model_out(Path(ns.out))  # before the demonstrations and the training, not after
    refuse_early(cfg)
    console = Console(stderr=True)
    run_dir = create_run_dir(cfg, "sft")
    if ns.out and run_dir.resolve().is_relative_to(Path(ns.out).resolve()):
        raise ConfigError(f"--out {ns.out}: the run directory {run_dir} is there, and writing the model would delete it")
    with run_log(run_dir, "sft", console):
        return _sft(ns, cfg, console, run_dir)


def _sft(ns: argparse.Namespace, cfg: Config, console: Console, run_dir: Path) -> int:
    """The demonstrations, the training and the export of ``coderl sft``, into ``run_dir``."""
    from coderl.chat import ChatFormat
    from coderl.tasks.split import train_and_held_out
    from coderl.train.sft import build_demos, check_demos, read_demonstrated
    from coderl.train.sharded import build_actor

    t = cfg.train
    before = read_demonstrated(cfg.model.path)  # model.path may be a warm start itself
    unseen = train_and_held_out(t.tasks, t.val_tasks, t.val_size, t.val_also, t.dev_size, before).unseen()
    chat = ChatFormat.for_model(cfg.model)
    with console.status("making demonstrations"):
        demos, made = run_command(build_demos(cfg, chat, unseen))
    console.print(f"{len(demos)} demonstrations: {json.dumps(made)}")
    check_demos(demos, made)
    (run_dir / "demos.json").write_text(json.dumps({"sources": made, "task_ids": [d.task_id for d in demos]}))
    actor = build_actor(
        cfg.sft.actor_config(cfg.actor).model_copy(update={"seed": cfg.run.seed}), cfg.model.path, cfg.model.cache_dir
    )
    with console.status("loading the policy"):
        actor.setup()
    try:
        return _train_and_export(ns, cfg, console, run_dir, actor, demos)
    finally:
        actor.close()


def _train_and_export(
    ns: argparse.Namespace, cfg: Config, console: Console, run_dir: Path, actor: Policy, demos: list[Trajectory]
) -> int:
    from coderl.train.sft import read_demonstrated, sft_steps, train_sft, write_demonstrated
    from coderl.train.sync import export_checkpoint

    steps = sft_steps(len(demos), cfg.sft)
    with progress_bars(console, name="sft") as progress:
        bar = progress.add_task("steps", total=steps, info="")
        rows = train_sft(
            actor,
            demos,
            cfg.sft,
            cfg.run.seed,
            lambda r: progress.update(bar, advance=1, info=f"nll {r['nll']:.3f}"),
        )
    with (run_dir / "sft.jsonl").open("w") as out:
        out.writelines(json.dumps(r) + "\n" for r in rows)
    model = Path(ns.out) if ns.out else run_dir / "model"
    export_checkpoint(actor, cfg.model, model)
    write_demonstrated(model, demos, read_demonstrated(cfg.model.path))  # coderl train's calibration reads it
    console.print(
        f"nll {rows[0]['nll']:.3f} -> {rows[-1]['nll']:.3f} over {len(rows)} steps; the warm-started model: {model}\n"
        f"start RL from it: coderl train model.path={model}"
    )
    return 0
