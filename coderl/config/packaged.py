"""Config files shipped in ``coderl/configs/``: the defaults of ``coderl train`` and ready-made recipes."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from coderl.errors import ConfigError

TRAIN_DEFAULTS = "train.yaml"
"""Packaged defaults of ``coderl train`` (coderl/configs/train.yaml): what runs with no arguments."""


def packaged_config(name: str) -> Path:
    """A config file shipped in coderl/configs/."""
    return Path(str(resources.files("coderl") / "configs" / name))


DEFAULTS_VARIABLE = "CODERL_TRAIN_DEFAULTS"
"""An environment variable naming another YAML file for :func:`default_train_config` (a site's own
defaults; the test suite's, which leave out the held-out set synthesised from PyPI)."""


def default_train_config() -> Path:
    """The YAML ``coderl train`` reads when given no config file: the packaged ``train.yaml``, or the
    file :data:`DEFAULTS_VARIABLE` names."""
    named = os.environ.get(DEFAULTS_VARIABLE, "").strip()
    if not named:
        return packaged_config(TRAIN_DEFAULTS)
    path = Path(named).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"{DEFAULTS_VARIABLE}={named}: no such file; name a YAML file of coderl train's defaults, or unset it "
            f"for the packaged {packaged_config(TRAIN_DEFAULTS)}"
        )
    return path
