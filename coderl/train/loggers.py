"""Where per-step metrics go: ``metrics.jsonl`` always, TensorBoard and W&B when enabled."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from coderl.errors import ConfigError
from coderl.rundir import append_jsonl
from coderl.train.config import TrainConfig


def flatten(row: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a (nested) metrics row as ``a/b`` keys."""
    out: dict[str, float] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


class MetricSinks:
    """Writes one row per step to every enabled sink. Heavy imports happen only when enabled."""

    def __init__(self, run_dir: Path, cfg: TrainConfig, run_config: dict[str, Any]) -> None:
        self.path = run_dir / "metrics.jsonl"
        self._tb: Any = None
        self._wandb: Any = None
        if "tensorboard" in cfg.loggers:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ConfigError(
                    "train.loggers has tensorboard but the tensorboard package is not installed "
                    "(pip install tensorboard), or drop it from train.loggers"
                ) from None
            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        if "wandb" in cfg.loggers:
            try:
                import wandb
            except ImportError:
                raise ConfigError(
                    "train.loggers has wandb but the wandb package is not installed (pip install wandb), "
                    "or drop it from train.loggers"
                ) from None
            self._wandb = wandb.init(
                project=cfg.wandb_project,
                name=run_dir.name,
                dir=str(run_dir),
                config=run_config,
                resume="allow",
            )

    def write(self, row: dict[str, Any]) -> None:
        append_jsonl(self.path, row)
        step = int(row["step"])
        numbers = flatten(row)
        warning = row.get("signal_warning")  # text: a run with no training signal (coderl.train.signal)
        if self._tb is not None:
            for key, value in numbers.items():
                self._tb.add_scalar(key, value, step)
            if warning:
                self._tb.add_text("signal_warning", str(warning), step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(numbers, step=step)
            if warning:  # the warning text is in metrics.jsonl and the console too: an alert W&B refuses
                with contextlib.suppress(Exception):  # (offline mode) must not end the run
                    self._wandb.alert(title="coderl: no training signal", text=str(warning))

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
