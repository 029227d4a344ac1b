"""The package layering, checked on every import in the code (function-level imports included): the
records and the config layer at the bottom, ``cli`` on top, and nothing importing upwards."""

from __future__ import annotations

import ast
from pathlib import Path

import coderl

ROOT = Path(coderl.__file__).parent

CONFIG_MODULES = {
    "coderl.engine.config", "coderl.sandbox.config", "coderl.tasks.config", "coderl.rollout.config",
    "coderl.proxy.config", "coderl.train.config", "coderl.rl.config", "coderl.cluster.config",
}  # fmt: skip
"""Each package's own config section (imports nothing of coderl but the bottom layer)."""

LAYERS: list[set[str]] = [
    {"coderl", "coderl.types", "coderl.errors", "coderl.section", "coderl.threads"},
    {"coderl.config", *CONFIG_MODULES},
    {
        "coderl.rl",
        "coderl.chat",
        "coderl.sandbox",
        "coderl.checkpoint",
        "coderl.engine",
        "coderl.rundir",
        "coderl.loopback",
    },
    {"coderl.tasks"},
    {"coderl.proxy"},
    {"coderl.agents"},
    {"coderl.rollout"},
    {"coderl.cluster"},
    {"coderl.train", "coderl.viewer", "coderl.integrations"},
    {"coderl.bench"},
    {"coderl.cli", "coderl.__main__"},
]
"""Bottom to top: a module may import its own layer and the ones below it, never one above."""


def layer_of(module: str) -> int:
    """The layer of a module: its own entry (config modules), else its package's."""
    for name in (module, ".".join(module.split(".")[:2]), "coderl"):
        for depth, members in enumerate(LAYERS):
            if name in members:
                return depth
    raise AssertionError(f"{module} is in no layer; add its package to LAYERS")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every coderl module ``path`` imports, at any depth (``from a import b`` counts as a.b when a.b
    is a module, else as a)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                is_module = (ROOT.parent / sub.replace(".", "/")).with_suffix(".py").exists() or (
                    ROOT.parent / sub.replace(".", "/") / "__init__.py"
                ).exists()
                found.add(sub if is_module else node.module)
    return {name for name in found if name == "coderl" or name.startswith("coderl.")}


def sources() -> list[Path]:
    return [p for p in ROOT.rglob("*.py") if "bundled" not in p.parts]


def test_nothing_imports_upwards() -> None:
    upward = []
    for path in sources():
        here = module_name(path)
        for target in imports(path):
            if layer_of(target) > layer_of(here):
                upward.append(f"{here} (layer {layer_of(here)}) imports {target} (layer {layer_of(target)})")
    assert not upward, "\n".join(sorted(upward))


def test_config_sections_import_only_the_bottom_layer() -> None:
    for name in CONFIG_MODULES:
        path = ROOT.parent / (name.replace(".", "/") + ".py")
        assert imports(path) <= {"coderl.section", "coderl.types", "coderl.errors"}, name


def test_nothing_below_the_cli_imports_it() -> None:
    offenders = [
        module_name(p)
        for p in sources()
        if not module_name(p).startswith(("coderl.cli", "coderl.__main__"))
        and any(t.startswith("coderl.cli") for t in imports(p))
    ]
    assert not offenders


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f():\n    from coderl.train.loop import Trainer\n    from coderl.engine import config\n"
    )
    assert imports(bad) == {"coderl.train.loop", "coderl.engine.config"}
    assert layer_of("coderl.train.loop") > layer_of("coderl.engine") > layer_of("coderl.engine.config")
