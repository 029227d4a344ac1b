"""A train run's checkpoint as a model folder: what ``coderl eval``, ``coderl train`` and servers load.

Owns: finding the checkpoint (a step, or the newest) and the weights it sits on (the run's warm start
under a LoRA RL phase, else ``model.path``), rebuilding the run's actor, loading the
checkpoint into it, and writing a Hugging Face checkpoint folder with the LoRA adapters merged the way
the run's own engine received them (:func:`coderl.train.sync.export_checkpoint`), so a greedy
evaluation of the folder decodes what the run's greedy validation of that step decoded. Beside the
weights, ``coderl-demos.json`` lists every task the weights trained on: those their starting weights
imitated and those the run rolled out for training up to that step, so a later run from the folder
never holds one of them out. It does not evaluate or train.
"""

from __future__ import annotations

import json
from pathlib import Path

from coderl.config import Config
from coderl.config.loader import load_config
from coderl.errors import ConfigError, ModelError
from coderl.rollout.store import read_trajectories
from coderl.train import checkpoints
from coderl.train.sft import read_demonstrated

MODEL_FILES = frozenset({"config.json", "model.safetensors"})
"""What marks a folder as a model folder an export may replace."""


def check_model_out(out: Path, flag: str = "--out") -> None:
    """ConfigError unless ``out`` may receive a model folder: absent, empty, or an earlier model folder
    (config.json and model.safetensors; it is replaced whole). Anything else (a run directory, a folder
    of other files) would be deleted by the write, so it is refused before any work starts."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"{flag} {str(out)!r} is a file; name a new folder for the model")
    held = sorted(p.name for p in out.iterdir())
    if not held or (MODEL_FILES <= set(held) and not {"config.yaml", "coderl-run.json"} & set(held)):
        return
    shown = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
    raise ConfigError(
        f"{flag} {str(out)!r} holds other files ({shown}) and writing the model there would delete them: "
        "name a new or empty folder, or an earlier exported model to replace"
    )


def exported_model(run_dir: Path, step: int | None = None, out: Path | None = None) -> tuple[Path, int]:
    """Write step ``step``'s weights (default: the newest checkpoint) of the train run in ``run_dir`` to
    ``out`` (default ``<run_dir>/export/step-N``); returns the folder and the step."""
    from coderl.train.loop import build_policy
    from coderl.train.sync import export_checkpoint

    if out is not None:
        check_model_out(out)
    cfg = _run_config(run_dir)
    folder, step = _checkpoint(run_dir, step)
    base = _base_weights(cfg, run_dir)
    out = out or run_dir / "export" / f"step-{step}"
    actor = build_policy(cfg, cfg.actor.lora_rank > 0, base)
    try:
        actor.load(folder / "actor")
        export_checkpoint(actor, cfg.model.model_copy(update={"path": base}), out)
    finally:
        actor.close()
    trained = read_demonstrated(base) | read_demonstrated(run_dir) | trained_tasks(run_dir, step)
    (out / "coderl-demos.json").write_text(json.dumps({"task_ids": sorted(trained)}) + "\n")
    return out, step


def trained_tasks(run_dir: Path, step: int) -> set[str]:
    """The tasks of the run's training rollouts (``trajectories.jsonl``) up to ``step``; not those of
    steps a resume redid (rolled out, never trained on)."""
    return {
        r["task_id"] for r in read_trajectories(run_dir) if int(r.get("step", 0)) <= step and not r.get("lost")
    }


def _run_config(run_dir: Path) -> Config:
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"export: {str(run_dir)!r} has no config.yaml; pass the run directory of a coderl train run")
    return load_config(str(path), [], env={})  # the run's own settings, every key written


def _checkpoint(run_dir: Path, step: int | None) -> tuple[Path, int]:
    done = checkpoints.complete(run_dir)
    steps = [int(p.name.removeprefix("step-")) for p in done]
    if not done:
        raise ModelError(f"export: {str(run_dir)!r} has no complete checkpoint (checkpoints/step-N with trainer.json)")
    if step is None:
        return done[-1], steps[-1]
    if step not in steps:
        raise ModelError(
            f"export: {str(run_dir)!r} has no checkpoint of step {step}; it keeps steps {', '.join(map(str, steps))} "
            "(train.keep_checkpoints sets how many)"
        )
    return done[steps.index(step)], step


def _base_weights(cfg: Config, run_dir: Path) -> Path | None:
    """What the run's actor sat on: its warm start when a LoRA RL phase followed one, else model.path."""
    if cfg.sft.before_rl and cfg.actor.lora_rank > 0:
        warm = run_dir / "warm"
        if not (warm / "config.json").is_file():
            raise ModelError(f"export: {str(run_dir)!r} trained LoRA adapters on a warm start, but {warm} is missing")
        return warm
    return cfg.model.path
