"""The README stands alone in a clone: its links and anchors resolve, its Python examples use only
public API and run, every command it and docs/ show parses with coderl's own parser and loads its
config, and its configuration table and cross-section rules list match the code."""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import logging
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel

from coderl.cli.bench_cmd import BENCHES
from coderl.cli.common import config_from_args
from coderl.cli.main import _parse, _split_config, build_parser
from coderl.cli.train_cmd import train_config
from coderl.config import load_config
from coderl.config.models import Config
from coderl.config.packaged import default_train_config
from coderl.config.rules import RULES
from coderl.errors import ConfigError

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def fenced_blocks(text: str) -> list[tuple[str, str, str]]:
    """(the ``##`` heading above it, the info string, the body) of every fenced block, in order."""
    blocks: list[tuple[str, str, str]] = []
    heading, fence, lang, body = "", None, "", list[str]()
    for line in text.splitlines():
        if fence is None and line.startswith("```"):
            fence, lang, body = "`" * (len(line) - len(line.lstrip("`"))), line.strip("`").strip(), []
        elif fence is not None and line.strip() == fence:
            blocks.append((heading, lang, "\n".join(body)))
            fence = None
        elif fence is not None:
            body.append(line)
        elif line.startswith("## "):
            heading = line
    return blocks


def prose(text: str) -> str:
    """``text`` without its fenced blocks (a ``# comment`` in a shell block is no heading)."""
    return re.sub(r"^(`{3,}).*?^\1\s*$", "", text, flags=re.S | re.M)


def anchors(doc: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", prose(doc.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


def test_links_stay_inside_the_repository() -> None:
    for doc in DOCS:
        for link in re.findall(r"\]\(([^)\s]+)\)", prose(doc.read_text())):
            if link.startswith(("http://", "https://")):
                continue
            path, _, anchor = link.partition("#")
            target = (doc.parent / path).resolve() if path else doc
            assert target.is_relative_to(ROOT.resolve()), f"{doc.name} links outside the repository: {link}"
            assert target.exists(), f"{doc.name} links to a missing file: {link}"
            if anchor and target.suffix == ".md":
                assert anchor in anchors(target), f"{doc.name} links to a missing heading: {link}"


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


def section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading."""
    return re.split(r"^#{1,6} ", text.split(f"\n{heading}\n", 1)[1], maxsplit=1, flags=re.M)[0]


def config_table() -> dict[str, list[str]]:
    """Section -> the keys its row of the README's configuration table names. A backticked word in
    parentheses is an allowed value or a note (`type` (`embedded` / `http`)), not a key."""
    rows = {}
    for name, cells in re.findall(r"^\| `(\w+)` \| (.*) \|$", section(README, "## Configuration"), re.M):
        while re.search(r"\([^()]*\)", cells):
            cells = re.sub(r"\([^()]*\)", "", cells)
        rows[name] = re.findall(r"`([^`]+)`", cells)
    return rows


def test_the_config_table_names_every_key() -> None:
    rows = config_table()
    assert list(rows) == list(Config.model_fields), "the table's sections are not the root Config's, in order"
    for name, field in Config.model_fields.items():
        model = field.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel), name
        missing = [k for k in model.model_fields if k not in rows[name]]
        unknown = [k for k in rows[name] if k not in model.model_fields]
        assert not missing, f"the README's `{name}` row lacks keys of {model.__name__}: {missing}"
        assert not unknown, f"the README's `{name}` row names keys {model.__name__} does not have: {unknown}"


def keys_read(rule: Callable[..., object]) -> set[str]:
    """The ``section.key`` names a rule of coderl/config/rules.py reads (``cfg.a.b``, or ``c.b`` after
    ``c = cfg.a``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(rule)))
    sections = set(Config.model_fields)

    def section_of(node: ast.expr) -> str | None:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cfg":
            return node.attr if node.attr in sections else None
        return None

    aliases = {
        node.targets[0].id: sec
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        and (sec := section_of(node.value)) is not None
    }  # fmt: skip
    keys = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if (sec := section_of(node.value)) is not None:
            keys.add(f"{sec}.{node.attr}")
        elif isinstance(node.value, ast.Name) and node.value.id in aliases:
            keys.add(f"{aliases[node.value.id]}.{node.attr}")
    return keys


def test_the_rules_list_matches_the_code() -> None:
    text = section(README, "### Settings checked together")
    bullets = re.findall(r"^- (.*(?:\n  .*)*)", text, re.M)
    assert len(bullets) == len(RULES), (
        f"the README lists {len(bullets)} cross-section rules, coderl/config/rules.py checks {len(RULES)}"
    )
    for rule, bullet in zip(RULES, bullets, strict=True):
        keys = keys_read(rule)
        assert keys, f"{rule.__name__} reads no config key this test can see"
        missing = sorted(k for k in keys if k not in bullet)
        assert not missing, f"the README's bullet for {rule.__name__} ({bullet!r}) does not name {missing}"


ENV_ASSIGNMENT = r"[A-Z][A-Z0-9_]*=\S+"


def shown_commands(doc: Path) -> list[str]:
    """Every ``coderl ...`` line of the shell blocks of ``doc`` (continuations joined, comments off),
    but the README's synopsis and lines with a placeholder for the user to fill in (… or <...>)."""
    lines = []
    for heading, lang, body in fenced_blocks(doc.read_text()):
        if lang not in ("bash", "") or (doc.name == "README.md" and heading == "## Commands" and not lang):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            for part in re.sub(r"\s+#.*$", "", line).split("&&"):  # `bash scripts/setup.sh && coderl train`
                part = part.strip()
                if re.match(rf"(?:{ENV_ASSIGNMENT}\s+)*coderl(\s|$)", part) and "…" not in part and "<" not in part:
                    lines.append(part)
    return lines


def load_as_the_command_would(ns: argparse.Namespace) -> None:
    """Resolve the config the way the parsed command's handler does, without running it."""
    if ns.config_path is not None and not (ROOT / ns.config_path).is_file():
        ns.config_path = None  # a file of the user's (my.yaml): its overrides still count
    overrides = list(ns.config_overrides)
    if ns.command == "bench":
        bench = BENCHES[ns.bench_name]
        defaults = default_train_config() if bench.train_defaults else None
        load_config(ns.config_path, [*bench.overrides(ns), *overrides], defaults=defaults)
    elif ns.command in ("train", "sft") or getattr(ns, "tasks_cmd", None) == "calibrate":
        train_config(ns.config_path, overrides, bare=getattr(ns, "bare", False))
    else:
        config_from_args(ns)


def test_every_command_shown_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command line of the README and docs/ parses with coderl's own parser and its config loads as
    that command would load it, so a wrong flag, key or value in a doc fails here. Nothing is run."""
    monkeypatch.chdir(ROOT)
    shown = {doc: shown_commands(doc) for doc in DOCS}
    assert len(shown[ROOT / "README.md"]) >= 8, shown[ROOT / "README.md"]
    coderl_log = logging.getLogger("coderl")
    level = coderl_log.level
    for doc, lines in shown.items():
        for line in lines:
            words = shlex.split(line)
            env = words[: words.index("coderl")]
            argv = words[words.index("coderl") + 1 :]
            with monkeypatch.context() as mp:
                for assignment in env:
                    mp.setenv(*assignment.split("=", 1))
                try:
                    ns = _parse(build_parser(), argv)
                except SystemExit:
                    pytest.fail(f"{doc.name}: coderl's parser refuses {line!r}")
                assert getattr(ns, "func", None), f"{doc.name}: {line!r} names no command"
                if hasattr(ns, "overrides"):
                    ns.config_path, ns.config_overrides = _split_config(ns)
                    try:
                        load_as_the_command_would(ns)
                    except ConfigError as exc:
                        pytest.fail(f"{doc.name}: the config of {line!r} does not load: {exc}")
                    finally:
                        coderl_log.setLevel(level)
