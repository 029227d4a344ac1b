"""``coderl export RUN_DIR``: a train run's checkpoint as a model folder (:mod:`coderl.train.export`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console


def run_export(ns: argparse.Namespace) -> int:
    from coderl.train.export import exported_model

    console = Console(stderr=True)
    run_dir = Path(ns.run_dir)
    folder, step = exported_model(run_dir, ns.step, Path(ns.out) if ns.out else None)
    console.print(
        f"step {step} of {run_dir}: {folder}\nevaluate it: coderl eval model.path={folder} tasks.source=...\n"
        f"(with the run's loop: coderl eval {run_dir / 'config.yaml'} model.path={folder} tasks.source=...)"
    )
    return 0
