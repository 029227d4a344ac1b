"""The README stands alone in a clone and its Python examples use only public API, and run."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_links_stay_inside_the_repository() -> None:
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            assert not target.startswith(".."), f"{doc.name} links outside the repository: {target}"
            assert (doc.parent / target).exists(), f"{doc.name} links to a missing file: {target}"


def test_python_examples_import_only_public_names() -> None:
    blocks = python_blocks(README)
    assert blocks
    for block in blocks:
        for module, names in re.findall(r"^\s*from (coderl[\w.]*) import ([\w, ]+)", block, re.M):
            public = getattr(importlib.import_module(module), "__all__", None)
            assert public is not None, f"{module} has no __all__: not a public package"
            for name in (n.strip() for n in names.split(",")):
                assert name in public, f"README imports {name} from {module}, which does not export it"


@pytest.mark.slow
def test_the_python_api_example_runs(tmp_path: Path) -> None:
    section = README.split("## Python API", 1)[1]
    code = python_blocks(section)[0].replace("max_tokens=64", "max_tokens=8")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "prompt tokens came from the session's prefix cache" in out.stdout
    cached = int(out.stdout.strip().splitlines()[-1].split()[0])
    assert cached > 0  # the second turn reused the first turn's KV
