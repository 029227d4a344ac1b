"""``coderl proxy worker``: serve the configured engine to a relay-mode proxy (see coderl.proxy.relay_worker)."""

from __future__ import annotations

import argparse
from pathlib import Path

from coderl.cli.common import config_from_args
from coderl.config import Config
from coderl.signals import run as run_command


def served_model_name(cfg: Config) -> str:
    """The model name a worker announces (the proxy warns when it renders prompts for another one)."""
    from coderl.checkpoint import DEFAULT_MODEL_NAME

    if cfg.engine.type == "http":
        return cfg.engine.served_model or ""
    return DEFAULT_MODEL_NAME if cfg.model.path is None else Path(cfg.model.path).name


def run_proxy_worker(ns: argparse.Namespace) -> int:
    from coderl.engine import create_engine
    from coderl.proxy.relay_worker import serve_worker

    cfg = config_from_args(ns)
    engine = create_engine(cfg.engine, cfg.model, seed=cfg.run.seed)
    run_command(serve_worker(engine, cfg.relay, model=served_model_name(cfg)))
    return 0
