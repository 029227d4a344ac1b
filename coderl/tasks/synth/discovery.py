"""Which files of a repository are its tests, as its own pytest would take them.

pytest collects the ``.py`` files whose names match ``python_files`` (default ``test_*.py`` and
``*_test.py``), under ``testpaths`` when it is set (else everywhere), skipping ``norecursedirs``.
A project may change all three (``python_files = tests.py check_*.py``, ``python_files = *.py`` with
``testpaths = tests``): read from the configuration file pytest itself would read at the repository's
root — the first of ``pytest.ini``, ``.pytest.ini``, ``pyproject.toml`` with ``[tool.pytest.ini_options]``
(or pytest 9's ``[tool.pytest]``), ``tox.ini`` with ``[pytest]`` and ``setup.cfg`` with
``[tool:pytest]``. Getting this right matters twice: a test file taken for library code would be
mutated into "bugs", and one not found would leave the bugs it catches untested.
"""

from __future__ import annotations

import configparser
import fnmatch
import logging
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
DEFAULT_NORECURSEDIRS = ("*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}")
NOT_TESTS = ("conftest.py", "__init__.py")
"""Files pytest reads as set-up, never as test modules of their own."""


@dataclass(frozen=True)
class Discovery:
    """A project's pytest discovery settings."""

    python_files: tuple[str, ...] = DEFAULT_PYTHON_FILES
    testpaths: tuple[str, ...] = ()
    norecursedirs: tuple[str, ...] = DEFAULT_NORECURSEDIRS
    config: str | None = None
    """The file they were read from (None: pytest's defaults)."""


def _ini_section(path: Path, section: str) -> dict[str, str] | None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(errors="replace"), source=str(path))
    except configparser.Error as exc:
        log.warning("%s: not read as pytest's configuration (%s)", path, exc)
        return None
    return dict(parser[section]) if parser.has_section(section) else None


def _toml_options(path: Path) -> dict[str, Any] | None:
    try:
        data = tomllib.loads(path.read_text(errors="replace"))
    except tomllib.TOMLDecodeError as exc:
        log.warning("%s: not read as pytest's configuration (%s)", path, exc)
        return None
    tool = data.get("tool", {}).get("pytest")
    if not isinstance(tool, dict):
        return None
    legacy = tool.get("ini_options")
    if isinstance(legacy, dict):
        return legacy
    native = {k: v for k, v in tool.items() if k != "ini_options"}
    return native or None


def _config(repo: Path) -> tuple[str, dict[str, Any]] | None:
    """The options of the file pytest would take as its configuration (module doc), and its name."""
    for name, section in (("pytest.ini", "pytest"), (".pytest.ini", "pytest")):
        if (repo / name).is_file():  # these count even without the section
            return name, _ini_section(repo / name, section) or {}
    if (repo / "pyproject.toml").is_file():
        options = _toml_options(repo / "pyproject.toml")
        if options is not None:
            return "pyproject.toml", options
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        if (repo / name).is_file():
            found = _ini_section(repo / name, section)
            if found is not None:
                return name, found
    return None


def _args(value: Any) -> tuple[str, ...] | None:
    """An option of pytest's ``args`` type: a TOML list, or a string split as a shell would."""
    if value is None:
        return None
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    try:
        return tuple(shlex.split(str(value)))
    except ValueError:
        return tuple(str(value).split())


def read_discovery(repo: Path) -> Discovery:
    """The discovery settings of the project at ``repo`` (pytest's defaults where it sets none)."""
    found = _config(repo)
    if found is None:
        return Discovery()
    name, options = found
    return Discovery(
        python_files=_args(options.get("python_files")) or DEFAULT_PYTHON_FILES,
        testpaths=_args(options.get("testpaths")) or (),
        norecursedirs=_args(options.get("norecursedirs")) or DEFAULT_NORECURSEDIRS,
        config=name,
    )


def matches(rel: str, pattern: str) -> bool:
    """pytest's match of a path against a ``python_files`` pattern: the file's name for a pattern
    without a ``/``, else the path's end."""
    if "/" not in pattern:
        return fnmatch.fnmatch(rel.rsplit("/", 1)[-1], pattern)
    return fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(rel, f"*/{pattern}")


def in_testpaths(rel: str, testpaths: tuple[str, ...]) -> bool:
    """Whether the repository-relative ``rel`` lies under one of ``testpaths`` (folders or globs)."""
    for entry in testpaths:
        root = entry.removeprefix("./").strip("/")
        if root in ("", ".") or rel == root or rel.startswith(root + "/"):
            return True
        if any(c in root for c in "*?[") and (fnmatch.fnmatch(rel, root) or fnmatch.fnmatch(rel, root + "/*")):
            return True  # pytest takes globs in testpaths
    return False


def test_files(repo: Path, discovery: Discovery | None = None) -> list[str]:
    """The repository's test files, relative, sorted (module doc)."""
    d = discovery or read_discovery(repo)
    found = []
    for p in repo.rglob("*.py"):
        parts = p.relative_to(repo).parts
        if p.name in NOT_TESTS or any(part == "__pycache__" or part.startswith(".") for part in parts):
            continue  # hidden folders whatever norecursedirs says: .git, .tox, coderl's own .coderl-synth
        if any(fnmatch.fnmatch(part, skip) for part in parts[:-1] for skip in d.norecursedirs):
            continue
        rel = "/".join(parts)
        if d.testpaths and not in_testpaths(rel, d.testpaths):
            continue
        if any(matches(rel, pattern) for pattern in d.python_files):
            found.append(rel)
    return sorted(found)


def describe(d: Discovery) -> str:
    """The rule, in words, for an error that found no test file."""
    where = f" under {', '.join(d.testpaths)}" if d.testpaths else ""
    said = f" (python_files of {d.config})" if d.config and d.python_files != DEFAULT_PYTHON_FILES else ""
    return f"{' or '.join(d.python_files)}{said}{where}"
