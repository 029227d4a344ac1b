"""``coderl engine serve``: the configured engine over HTTP (see coderl.engine.server)."""

from __future__ import annotations

import argparse

from coderl.cli.common import config_from_args
from coderl.errors import ConfigError
from coderl.ports import check_host


def run_engine_serve(ns: argparse.Namespace) -> int:
    import uvicorn

    from coderl.checkpoint import DEFAULT_MODEL_NAME, load_tokenizer, resolve_checkpoint
    from coderl.engine import create_engine
    from coderl.engine.server import create_app
    from coderl.serving import serve_until_stopped, server_config

    cfg = config_from_args(ns)
    if cfg.engine.type != "embedded":
        raise ConfigError("engine.type: coderl engine serve serves the embedded engine; got engine.type=http")
    check_host(cfg.server.host)  # before the model loads
    folder = resolve_checkpoint(cfg.model.path, cfg.model.cache_dir)
    name = DEFAULT_MODEL_NAME if cfg.model.path is None else folder.name
    engine = create_engine(cfg.engine, cfg.model, seed=cfg.run.seed)
    app = create_app(engine, name, tokenizer=load_tokenizer(folder), api_key=cfg.server.api_key)
    return serve_until_stopped(uvicorn.Server(server_config(app, cfg.server.host, cfg.server.port, cfg.run.log_level)))
