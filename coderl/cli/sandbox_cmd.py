"""``coderl sandbox serve`` (the remote sandbox server, coderl.sandbox.server) and
``coderl sandbox image build`` (the docker backend's task image, coderl.sandbox.image)."""

from __future__ import annotations

import argparse
import secrets
import sys

from coderl.cli.common import config_from_args
from coderl.ports import check_host


def run_sandbox_serve(ns: argparse.Namespace) -> int:
    from coderl.sandbox.server import SandboxServer, create_sandbox_app
    from coderl.serving import serve_until_stopped, server_config

    cfg = config_from_args(ns)
    check_host(cfg.server.host)
    tokens = list(cfg.server.tokens)
    if cfg.server.api_key:
        tokens.append(cfg.server.api_key)
    if not tokens:
        token = secrets.token_urlsafe(24)
        tokens = [token]
        print(
            f"coderl sandbox serve: no server.tokens given; generated client token: {token}", file=sys.stderr
        )
    spec = (
        cfg.sandbox.model_copy(update={"backend": "bwrap"})
        if cfg.sandbox.backend == "remote"
        else cfg.sandbox
    )
    app = create_sandbox_app(
        tokens, spec, max_sandboxes=cfg.server.max_sandboxes, idle_s=cfg.server.sandbox_idle_s
    )
    config = server_config(app, cfg.server.host, cfg.server.port, cfg.run.log_level)
    return serve_until_stopped(SandboxServer(config, app.state.stop_commands))


def run_sandbox_image_build(ns: argparse.Namespace) -> int:
    from coderl.sandbox.image import MIRROR, build_image

    result = build_image(
        ns.tag,
        mirror=ns.mirror or MIRROR,
        rebuild=ns.rebuild,
        say=lambda line: print(f"coderl: {line}", file=sys.stderr),
    )
    what = {
        "present": "already present",
        "imported": "imported from the cached root file system",
        "built": "built",
    }
    print(f"coderl: {result.tag}: {what[result.step]} (root file system: {result.tarball})", file=sys.stderr)
    print(result.tag)
    return 0
