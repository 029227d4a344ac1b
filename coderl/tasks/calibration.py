"""Per-task difficulty: how often a given policy solves each task, stored beside the tasks.

``coderl tasks calibrate`` rolls every task out k times and records, per task, samples and passes; a
file holds the estimates of one *setting* — the model and the rollout settings that change how often
it succeeds — so a file never mixes two policies. Estimates live beside a task folder
(``<suite>/calibration/<key>.json`` for a writable ``native:DIR``) or, for the bundled suite (part of
the package) and sources that are files, in the user cache. The training curriculum (:mod:`coderl.train.curriculum`) reads them and
keeps them up to date from training rollouts.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coderl.checkpoint import cache_root
from coderl.engine.config import ModelConfig
from coderl.rollout.config import RolloutConfig

SETTINGS = (
    "agent", "temperature", "top_p", "max_tokens", "max_turns", "max_total_tokens", "max_context_tokens",
    "max_tool_output_chars", "response_prefix", "remote_command", "tools",
)  # fmt: skip
"""The rollout keys that change how often a policy succeeds (the rest only change how fast)."""


@dataclass
class Estimate:
    samples: int = 0
    passed: int = 0

    @property
    def rate(self) -> float | None:
        return self.passed / self.samples if self.samples else None


def setting_key(model: ModelConfig, rollout: RolloutConfig, policy: str = "") -> tuple[str, dict[str, Any]]:
    """(short key, the setting it stands for): the model, its weights' tag (``policy``, e.g. a step)
    and the rollout settings in :data:`SETTINGS`."""
    setting = {
        "model": str(model.path) if model.path else "default",
        "dtype": model.dtype,
        "policy": policy,
        **{k: getattr(rollout, k) for k in SETTINGS},
    }
    key = hashlib.sha256(json.dumps(setting, sort_keys=True).encode()).hexdigest()[:16]
    return key, setting


def calibration_dir(source: str) -> Path:
    """Where the estimates of a task source live: its suite folder when it has a writable one, else
    the user cache. The bundled suite's go to the cache: its folder is part of the package (in an
    editable install, the source tree)."""
    kind, _, rest = source.partition(":")
    folder: Path | None = None
    if kind == "native":
        folder = Path(rest.partition("?")[0])
    elif Path(source).is_dir():
        folder = Path(source)
    if folder is not None and folder.is_dir() and os.access(folder, os.W_OK):
        return folder / "calibration"
    return cache_root() / "calibration" / hashlib.sha256(source.encode()).hexdigest()[:12]


def load_estimates(source: str, key: str) -> dict[str, Estimate]:
    """task id -> estimate (empty when the setting was never calibrated)."""
    path = calibration_dir(source) / f"{key}.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {tid: Estimate(int(v["samples"]), int(v["passed"])) for tid, v in data.get("tasks", {}).items()}


def save_estimates(source: str, key: str, setting: dict[str, Any], estimates: dict[str, Estimate]) -> Path:
    """Merge ``estimates`` into the setting's file (counts add up); returns its path."""
    folder = calibration_dir(source)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{key}.json"
    merged = load_estimates(source, key)
    for tid, est in estimates.items():
        old = merged.get(tid, Estimate())
        merged[tid] = Estimate(old.samples + est.samples, old.passed + est.passed)
    body = {
        "setting": setting,
        "tasks": {
            tid: {"samples": e.samples, "passed": e.passed, "rate": e.rate}
            for tid, e in sorted(merged.items())
        },
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=1))
    tmp.replace(path)
    return path
