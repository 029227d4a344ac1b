"""Run directories: runs/<command>-<timestamp>/ with the resolved config.yaml written first, and
``coderl-run.json`` naming the command that made it, so that no command writes into another's run."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from coderl.config import Config, dump_config
from coderl.errors import ConfigError

MARK = "coderl-run.json"
"""A run directory's marker: ``{"command": ...}``."""


def run_kind(path: Path) -> str | None:
    """The command that made the run directory ``path`` (None: none, or one from before the marker)."""
    try:
        return str(json.loads((path / MARK).read_text())["command"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def create_run_dir(cfg: Config, command: str, resume: bool = False) -> Path:
    """Create ``cfg.run.dir`` — default ``runs/<command>-<timestamp>`` — and write config.yaml. An
    existing folder is reused only when it holds nothing but a config.yaml (a bench lays one out and
    runs the command on it) or, with ``resume``, the same command's run; ConfigError otherwise, before
    anything in it is touched."""
    path = cfg.run.dir or _fresh(Path("runs") / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}")
    _check_reuse(path, command, resume)
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.yaml").write_text(dump_config(cfg))
        (path / MARK).write_text(json.dumps({"command": command}) + "\n")
    except OSError as exc:
        raise ConfigError(f"run.dir {str(path)!r}: cannot write the run there ({exc.strerror or exc})") from None
    return path


def _fresh(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3``... : a default run directory nobody has made (two runs started
    within one second), made now so that a second process cannot take it too."""
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise ConfigError(f"run.dir: {base} and 998 more like it exist already; name a folder with run.dir=...")


def _check_reuse(path: Path, command: str, resume: bool) -> None:
    if not path.exists():
        return
    if not path.is_dir():
        raise ConfigError(
            f"run.dir {str(path)!r} is a file, not a folder; name a new folder (or leave run.dir out: "
            f"runs/{command}-<time>)"
        )
    kind = run_kind(path)
    if kind is not None and kind != command:
        raise ConfigError(
            f"run.dir {str(path)!r} holds a coderl {kind} run; {command} would overwrite its config.yaml "
            f"and mix its files with that run's: name a new folder (or leave run.dir out)"
        )
    if resume:
        return
    # the same command's own log does not make a run: an attempt that failed before it made anything
    # else (an engine that did not start) may be tried again in its folder, the log appended to
    held = sorted(p.name for p in path.iterdir() if p.name not in ("config.yaml", MARK, f"{command}.log"))
    if held:
        again = f", or continue it with `coderl train --resume {path}`" if command == "train" else ""
        shown = ", ".join(held[:4]) + (", ..." if len(held) > 4 else "")
        raise ConfigError(
            f"run.dir {str(path)!r} already holds a run ({shown}); {command} would mix its files with it: "
            f"name a new folder, leave run.dir out{again}"
        )


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON object as a line (flushed, so a crash keeps every finished record)."""
    with path.open("a") as fh:
        fh.write(json.dumps(record) + "\n")
