"""Helpers shared by command handlers."""

from __future__ import annotations

import argparse
import logging

from coderl.config import Config, load_config


def config_from_args(ns: argparse.Namespace) -> Config:
    """Resolve the config from the command's YAML path and overrides (CLI > env > YAML > defaults)."""
    cfg = load_config(ns.config_path, ns.config_overrides)
    if not getattr(ns, "verbose", False):
        logging.getLogger("coderl").setLevel(cfg.run.log_level.upper())
    return cfg


def refuse_early(cfg: Config) -> None:
    """What a run command checks before it makes its run directory or loads anything: the agent loop
    (``rollout.agent``) and ``model.path``, so a typo leaves no ``runs/`` folder behind."""
    from coderl.agents.base import get_loop
    from coderl.checkpoint import checked_model_path

    get_loop(cfg.rollout.agent)
    if cfg.model.path is not None:
        checked_model_path(cfg.model.path)
