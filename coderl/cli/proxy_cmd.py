"""``coderl proxy serve``: the recording proxy in front of the configured engine, or (proxy.mode=relay)
in front of the inference workers that connect to it (see coderl.proxy)."""

from __future__ import annotations

import argparse
import sys


def run_proxy_serve(ns: argparse.Namespace) -> int:
    from coderl.cli.common import config_from_args
    from coderl.ports import check_host
    from coderl.proxy.app import default_db_path
    from coderl.proxy.server import run_proxy
    from coderl.proxy.standalone import build_proxy, settle_heap

    cfg = config_from_args(ns)
    check_host(cfg.proxy.host, "proxy.host")  # before the engine loads
    app, _ = build_proxy(cfg)
    url = cfg.proxy.public_url or f"http://{cfg.proxy.host}:{cfg.proxy.port}"
    print(f"coderl proxy: {url}  record: {cfg.proxy.db or default_db_path()}", file=sys.stderr)
    if cfg.proxy.mode == "relay":
        ws_url = "ws" + url.rstrip("/").removeprefix("http") + "/ws/worker"
        print(f"coderl proxy: relay mode: workers connect to {ws_url}", file=sys.stderr)
    if cfg.proxy.admin_token is None:
        print(f"coderl proxy: admin token (generated): {app.state.admin_token}", file=sys.stderr)
    sys.stderr.flush()
    settle_heap()
    return run_proxy(app, cfg.proxy.host, cfg.proxy.port, cfg.run.log_level)
