"""``coderl view RUN_DIR``: serve the trajectory viewer on loopback."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coderl.errors import ConfigError
from coderl.ports import check_host, free_port


def run_view(ns: argparse.Namespace) -> int:
    import uvicorn

    from coderl.serving import serve_until_stopped, server_config
    from coderl.viewer.app import create_viewer_app
    from coderl.viewer.data import find_runs

    root = Path(ns.run_dir)
    if not root.is_dir() or not find_runs(root):
        raise ConfigError(
            f"RUN_DIR {str(root)!r} holds no run (a folder with config.yaml, or a folder of them)"
        )
    check_host(ns.host, "--host")
    port = ns.port or free_port(ns.host)  # 0: a free one, named in the URL printed below
    print(f"coderl view: http://{ns.host}:{port}/  (Ctrl-C to stop)", file=sys.stderr)
    return serve_until_stopped(uvicorn.Server(server_config(create_viewer_app(root), ns.host, port, "warning")))
