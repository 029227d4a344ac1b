"""``coderl proxy serve``: the recording proxy in front of the configured engine, or (proxy.mode=relay)
in front of the inference workers that connect to it (see coderl.proxy)."""

from __future__ import annotations

import argparse
import sys


def run_proxy_serve(ns: argparse.Namespace) -> int:
    import uvicorn

    from coderl.chat import ChatFormat
    from coderl.checkpoint import DEFAULT_MODEL_NAME, load_tokenizer, resolve_checkpoint
    from coderl.cli.common import config_from_args
    from coderl.engine import Engine, create_engine
    from coderl.proxy.app import create_app, default_db_path
    from coderl.proxy.relay import RelayEngine

    cfg = config_from_args(ns)
    folder = resolve_checkpoint(cfg.model.path, cfg.model.cache_dir)
    name = DEFAULT_MODEL_NAME if cfg.model.path is None else folder.name
    engine: Engine
    if cfg.proxy.mode == "relay":  # no local engine: only the tokenizer, to render prompts
        engine = RelayEngine(cfg.proxy, model=name)
    else:
        engine = create_engine(cfg.engine, cfg.model, seed=cfg.run.seed)
    app = create_app(cfg.proxy, engine, ChatFormat(load_tokenizer(folder)), model_name=name)
    url = cfg.proxy.public_url or f"http://{cfg.proxy.host}:{cfg.proxy.port}"
    print(f"coderl proxy: {url}  record: {cfg.proxy.db or default_db_path()}", file=sys.stderr)
    if cfg.proxy.mode == "relay":
        ws_url = "ws" + url.rstrip("/").removeprefix("http") + "/ws/worker"
        print(f"coderl proxy: relay mode: workers connect to {ws_url}", file=sys.stderr)
    if cfg.proxy.admin_token is None:
        print(f"coderl proxy: admin token (generated): {app.state.admin_token}", file=sys.stderr)
    sys.stderr.flush()
    uvicorn.run(app, host=cfg.proxy.host, port=cfg.proxy.port, log_level=cfg.run.log_level)
    return 0
