"""Which files `coderl tasks synth` takes for a project's tests: its own pytest configuration's
``python_files``, ``testpaths`` and ``norecursedirs``, from the file pytest itself would read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coderl.errors import TaskError
from coderl.tasks.synth.build import SynthOptions, library_files, synthesize
from coderl.tasks.synth.discovery import DEFAULT_PYTHON_FILES, matches, read_discovery
from coderl.tasks.synth.discovery import test_files as found_tests  # as test_files pytest would collect it


def _files(root: Path, *names: str) -> Path:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    return root


def test_without_a_configuration_pytests_defaults_apply(tmp_path: Path) -> None:
    repo = _files(tmp_path, "tests/test_a.py", "tests/b_test.py", "tests/helpers.py", "tests/conftest.py",
                  "pkg/tests.py", "build/test_old.py", ".tox/test_x.py", "pkg/__pycache__/test_c.py")  # fmt: skip
    assert read_discovery(repo).python_files == DEFAULT_PYTHON_FILES and read_discovery(repo).config is None
    assert found_tests(repo) == ["tests/b_test.py", "tests/test_a.py"]


@pytest.mark.parametrize(
    ("config", "text"),
    [
        ("pytest.ini", "[pytest]\npython_files = tests.py check_*.py\n"),
        ("pyproject.toml", '[tool.pytest.ini_options]\npython_files = ["tests.py", "check_*.py"]\n'),
        ("pyproject.toml", '[tool.pytest]\npython_files = ["tests.py", "check_*.py"]\n'),  # pytest 9's native table
        ("tox.ini", "[tox]\nenvlist = py311\n\n[pytest]\npython_files =\n    tests.py\n    check_*.py\n"),
        ("setup.cfg", "[metadata]\nname = x\n\n[tool:pytest]\npython_files = tests.py check_*.py\n"),
    ],
)
def test_python_files_is_read_from_each_kind_of_configuration(tmp_path: Path, config: str, text: str) -> None:
    repo = _files(tmp_path, "pkg/tests.py", "pkg/core.py", "check_core.py", "tests/test_old_style.py")
    (repo / config).write_text(text)
    d = read_discovery(repo)
    assert d.python_files == ("tests.py", "check_*.py") and d.config == config
    assert found_tests(repo) == ["check_core.py", "pkg/tests.py"]  # test_*.py is no test file here
    assert "pkg/tests.py" not in library_files(repo) and "pkg/core.py" in library_files(repo)


def test_the_first_configuration_pytest_would_read_wins(tmp_path: Path) -> None:
    """pytest.ini counts even without a [pytest] section; pyproject.toml and tox.ini only with theirs."""
    repo = _files(tmp_path, "check_a.py", "test_b.py")
    (repo / "tox.ini").write_text("[pytest]\npython_files = check_*.py\n")
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no pytest table: not pytest's file
    assert found_tests(repo) == ["check_a.py"] and read_discovery(repo).config == "tox.ini"
    (repo / "pytest.ini").write_text("[other]\nx = 1\n")  # pytest's own file, with nothing set
    assert found_tests(repo) == ["test_b.py"] and read_discovery(repo).config == "pytest.ini"


def test_testpaths_and_norecursedirs_limit_where_tests_are_found(tmp_path: Path) -> None:
    repo = _files(tmp_path, "tests/unit/test_a.py", "tests/fixtures/test_data.py", "docs/test_conf.py",
                  "pkg/test_inline.py", "bench/test_speed.py")  # fmt: skip
    (repo / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\ntestpaths = ["tests", "pkg"]\nnorecursedirs = ["fixtures"]\n'
    )
    assert found_tests(repo) == ["pkg/test_inline.py", "tests/unit/test_a.py"]
    (repo / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["test*"]\npython_files = ["*.py"]\n')
    assert found_tests(repo) == ["tests/fixtures/test_data.py", "tests/unit/test_a.py"]  # a glob, every .py in it


@pytest.mark.parametrize(
    ("path", "pattern", "hit"),
    [
        ("a/b/test_x.py", "test_*.py", True),
        ("a/b/x_test.py", "test_*.py", False),
        ("a/tests/x.py", "tests/*.py", True),  # a pattern with a folder matches the path's end
        ("a/other/x.py", "tests/*.py", False),
    ],
)
def test_a_pattern_matches_as_pytest_matches_it(path: str, pattern: str, hit: bool) -> None:
    assert matches(path, pattern) is hit


def test_a_broken_configuration_falls_back_to_the_defaults(tmp_path: Path) -> None:
    repo = _files(tmp_path, "tests/test_a.py")
    (repo / "pyproject.toml").write_text("[tool.pytest.ini_options\npython_files = 1\n")
    assert found_tests(repo) == ["tests/test_a.py"]


CALC = """def total(xs):
    s = 0
    for x in xs:
        s += x
    return s


def largest(xs):
    best = xs[0]
    for x in xs[1:]:
        if x > best:
            best = x
    return best
"""
CHECKS = """from calc.core import largest, total


def test_total():
    assert total([1, 2, 3]) == 6


def test_total_empty():
    assert total([]) == 0


def test_largest():
    assert largest([3, 9, 2]) == 9
"""


async def test_a_project_with_its_own_python_files_is_synthesised_and_its_tests_never_mutated(tmp_path: Path) -> None:
    """A project whose tests are pkg/tests.py (python_files = tests.py): before, it was refused as
    having no test files, and its tests.py was taken for library code to mutate."""
    repo = tmp_path / "calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "core.py").write_text(CALC)
    (repo / "calc" / "tests.py").write_text(CHECKS)
    (repo / "setup.cfg").write_text("[tool:pytest]\npython_files = tests.py\n")
    out = tmp_path / "out"
    summary = await synthesize(repo, out, SynthOptions(n=2, validate=True))
    assert summary["kept"] == 2 and summary["test_files"] == 1 and summary["baseline_passing_tests"] == 3
    for task_id in summary["task_ids"]:
        meta = (out / "tasks" / task_id / "task.yaml").read_text()
        assert "calc/tests.py" in meta  # the withheld test file, graded
        assert "calc/core.py" in (out / "tasks" / task_id / "gold.patch").read_text()
        assert "calc/tests.py" not in (out / "tasks" / task_id / "gold.patch").read_text()
    assert json.loads((out / "synth-calc.json").read_text())["kept"] == 2


async def test_no_test_file_by_the_projects_own_rule_is_refused_naming_the_rule(tmp_path: Path) -> None:
    repo = _files(tmp_path / "lib", "lib/core.py", "tests/test_core.py")
    (repo / "pytest.ini").write_text("[pytest]\npython_files = check_*.py\ntestpaths = tests\n")
    with pytest.raises(TaskError, match=r"no test files \(check_\*\.py \(python_files of pytest\.ini\) under tests;"):
        await synthesize(repo, tmp_path / "out", SynthOptions(n=1))
