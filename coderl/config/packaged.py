"""Config files shipped in ``coderl/configs/``: the defaults of ``coderl train`` and ready-made recipes."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

TRAIN_DEFAULTS = "train.yaml"
"""Packaged defaults of ``coderl train`` (coderl/configs/train.yaml): what runs with no arguments."""


def packaged_config(name: str) -> Path:
    """A config file shipped in coderl/configs/."""
    return Path(str(resources.files("coderl") / "configs" / name))


def default_train_config() -> Path:
    """The YAML ``coderl train`` reads when given no config file."""
    return packaged_config(TRAIN_DEFAULTS)
