"""The Python that has verl and Ray for the tests that need them: this one, or the ``.venv-verl`` that
scripts/test.sh makes (verl 0.9.1 and Ray beside this Python's torch, transformers and coderl)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_with(module: str) -> str:
    """This Python if it can import ``module``, else .venv-verl's; skips the test where neither is."""
    if importlib.util.find_spec(module) is not None:
        return sys.executable
    venv = ROOT / ".venv-verl" / "bin" / "python"
    if not venv.exists():
        pytest.skip(
            f"{module} is not installed here, and there is no .venv-verl (bash scripts/test.sh makes one)"
        )
    return str(venv)
