"""YAML reading with libyaml's C parser where PyYAML was built with it (10x faster than the pure-Python
one: loading the bundled suite's 431 ``task.yaml`` files took 4.5 s with it missing)."""

from __future__ import annotations

from typing import Any

import yaml

_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` semantics (plain data only), parsed by libyaml when it is available."""
    return yaml.load(text, Loader=_Loader)
