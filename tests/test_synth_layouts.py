"""`coderl tasks synth` on the layouts real projects use: a ``src/`` layout, a test file whose optional
dependency is missing, a flaky test, a suite slower than the limit, a project that needs a C build,
the ``pypi:`` form; and each mutant run against the test files that call into its file only."""

from __future__ import annotations

import io
import json
import logging
import tarfile
from pathlib import Path

import pytest
import yaml

from coderl.cli.main import main
from coderl.errors import TaskError
from coderl.tasks.synth.baseline import imports_own_tests, relevant_files
from coderl.tasks.synth.build import SynthOptions, synthesize
from coderl.tasks.synth.mutate import Mutation
from coderl.tasks.synth.source import _unpack, fetch_pypi, native_sources

LIB = '''def area(w, h):
    if w < 0 or h < 0:
        raise ValueError("negative side")
    return w * h


def label(name, upper=False):
    text = name.strip()
    return text.upper() if upper else text
'''
TEST_AREA = '''import pytest
from shapes import area


def test_area():
    assert area(2, 3) == 6


def test_square():
    assert area(4, 4) == 16


def test_negative():
    with pytest.raises(ValueError):
        area(-1, 2)
'''
TEST_LABEL = '''from shapes import label


def test_label():
    assert label(" a ") == "a"


def test_upper():
    assert label("b", upper=True) == "B"
'''
FLAKY = '''import sys


def test_flip():  # passes in the first pristine run, fails in the second (the traced one)
    assert "coderl_synth_trace" not in sys.modules
'''
MISSING = '''import a_package_nobody_installed  # an optional test dependency this machine lacks


def test_never_collected():
    assert a_package_nobody_installed
'''


def _project(root: Path) -> Path:
    (root / "src" / "shapes").mkdir(parents=True)
    (root / "src" / "shapes" / "__init__.py").write_text(LIB)
    (root / "tests").mkdir()
    for name, text in {"test_area.py": TEST_AREA, "test_label.py": TEST_LABEL, "test_flaky.py": FLAKY,
                       "test_optional.py": MISSING}.items():  # fmt: skip
        (root / "tests" / name).write_text(text)
    # settings of a plugin this Python lacks, and warnings made errors: the suite stops before any test
    (root / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\naddopts = "--a-plugins-option"\nfilterwarnings = ["error"]\n'
    )
    return root


@pytest.mark.slow
async def test_a_src_layout_with_a_flaky_test_and_a_missing_dependency(tmp_path: Path) -> None:
    summary = await synthesize(_project(tmp_path / "shapes"), tmp_path / "out", SynthOptions(n=3, seed=0))
    assert summary["kept"] >= 1 and summary["env"].get("PYTHONPATH") == "src"
    assert summary["flaky_tests"] == ["tests/test_flaky.py::test_flip"]  # never FAIL_TO_PASS or PASS_TO_PASS
    assert list(summary["test_files_dropped"]) == ["tests/test_optional.py"]
    assert "a_package_nobody_installed" in summary["test_files_dropped"]["tests/test_optional.py"]
    assert summary["test_files"] == 3 and summary["mutant_run_s_mean"] > 0
    assert summary["lenient_settings"]  # the project's addopts and filterwarnings emptied
    for task_id in summary["task_ids"]:
        meta = (tmp_path / "out" / "tasks" / task_id / "task.yaml").read_text()
        assert "test_flip" not in meta and "test_never_collected" not in meta
        command = yaml.safe_load(meta)["test_command"]
        assert "--continue-on-collection-errors -o addopts= -o filterwarnings= -W ignore" in command  # graded the same way


def test_a_mutant_runs_the_test_files_that_call_into_its_file() -> None:
    trace = {"tests/test_a.py": ["src/shapes/__init__.py"], "tests/test_b.py": ["src/shapes/other.py"]}
    every = ["tests/test_a.py", "tests/test_b.py"]
    inside = Mutation("src/shapes/__init__.py", "operator", 0, 1, "-", 3, "area")
    assert relevant_files(inside, trace, every) == ["tests/test_a.py"]
    module_level = Mutation("src/shapes/__init__.py", "constant", 0, 1, "2", 1, "")
    assert relevant_files(module_level, trace, every) is None  # read at import, by anyone: every file
    nobody = Mutation("src/shapes/third.py", "operator", 0, 1, "-", 3, "f")
    assert relevant_files(nobody, trace, every) is None  # no known caller: every file
    assert relevant_files(inside, {}, every) is None  # no trace: every file


@pytest.mark.slow
async def test_a_suite_slower_than_the_limit_says_so_and_how_to_raise_it(tmp_path: Path) -> None:
    root = _project(tmp_path / "slow")
    (root / "tests" / "test_slow.py").write_text("import time\n\n\ndef test_wait():\n    time.sleep(30)\n")
    with pytest.raises(TaskError, match=r"did not finish within 3 s; raise the limit with --timeout"):
        await synthesize(root, tmp_path / "out", SynthOptions(n=1, timeout_s=3))


HELPER_IMPORT = """from tests import helper_value  # tests/__init__.py defines it; the sdist left it out


def test_uses_the_helper():
    assert helper_value
"""


async def test_a_suite_whose_test_files_cannot_be_imported_is_refused_naming_them(tmp_path: Path) -> None:
    """jmespath 1.1.0's sdist leaves out tests/__init__.py, which five of its six test files import from:
    one test passed, and 1,336 mutants ran for six minutes to keep none. Fewer than two passing tests
    can make no task (a test the bug breaks, another it leaves passing): refused at once, naming why."""
    root = tmp_path / "lib"
    (root / "shapes").mkdir(parents=True)
    (root / "shapes" / "__init__.py").write_text(LIB)
    (root / "tests").mkdir()
    for i in range(3):
        (root / "tests" / f"test_helper{i}.py").write_text(HELPER_IMPORT)
    (root / "tests" / "test_one.py").write_text("from shapes import area\n\n\ndef test_area():\n    assert area(2, 3) == 6\n")
    with pytest.raises(TaskError) as refused:
        await synthesize(root, tmp_path / "out", SynthOptions(n=1))
    said = str(refused.value)
    assert "passes 1 test (1 collected, 1 passing both runs, 0 flaky)" in said and "at least two" in said
    assert "3 test files could not be imported" in said
    assert "tests/test_helper0.py: ImportError: cannot import name 'helper_value' from 'tests'" in said
    assert "the project's own tests package" in said and "Output:\n" in said  # pytest's own words follow


@pytest.mark.parametrize(
    ("error", "own"),
    [
        ("ImportError: cannot import name 'OrderedDict' from 'tests' (unknown location)", True),
        ("ModuleNotFoundError: No module named 'tests.helpers'", True),
        ("ModuleNotFoundError: No module named 'tests'", True),
        ("ModuleNotFoundError: No module named 'testscenarios'", False),
        ("ModuleNotFoundError: No module named 'freezegun'", False),
    ],
)
def test_a_collection_error_is_told_from_the_projects_own_tests_package(error: str, own: bool) -> None:
    """Only an import from the project's own ``tests`` package points at a file an sdist left out; a
    missing dependency is to be installed."""
    assert imports_own_tests(error) is own


def test_a_synth_with_unimportable_test_files_warns_before_the_mutants_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _project(tmp_path / "shapes")
    (root / "tests" / "test_optional.py").unlink()
    (root / "tests" / "test_helper.py").write_text(HELPER_IMPORT)
    args = ["tasks", "synth", str(root), str(tmp_path / "out"), "--n", "1", "--no-validate"]
    assert main(args) == 0
    err = capsys.readouterr().err
    said = " ".join(err.split())  # the console wraps its lines (and folds a long path)
    assert "warning: 1 test file could not be imported and is left out (e.g. tests/test_helper.py" in said
    assert f"test_files_dropped in {tmp_path / 'out' / 'synth-shapes.json'}" in "".join(err.split()).replace(
        "test_files_droppedin", "test_files_dropped in "
    )  # where to read them all
    summary = json.loads((tmp_path / "out" / "synth-shapes.json").read_text())  # JSON, as named
    assert list(summary["test_files_dropped"]) == ["tests/test_helper.py"]
    assert summary["baseline_failing_tests"] == 0  # the file pytest could not import is counted above


def test_native_sources_are_found_where_a_build_would_compile_them(tmp_path: Path) -> None:
    (tmp_path / "fast").mkdir()
    (tmp_path / "fast" / "_speedups.c").write_text("int x;\n")
    assert native_sources(tmp_path) == ["fast/_speedups.c"]
    (tmp_path / "fast" / "_speedups.c").unlink()
    (tmp_path / "setup.py").write_text("from setuptools import Extension, setup\nsetup(ext_modules=[])\n")
    assert native_sources(tmp_path) == ["setup.py declares ext_modules"]
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    assert native_sources(tmp_path) == []  # pure Python


def _c_project(root: Path, fallback: bool) -> Path:
    """shapes with a C speedup module: imported with a pure-Python fallback (markupsafe's way), or
    needed (``from shapes._speedups import ...`` and nothing else)."""
    (root / "shapes").mkdir(parents=True)
    (root / "shapes" / "_speedups.c").write_text("/* area() and label() in C */\n")
    (root / "shapes" / "_native.py").write_text(LIB)
    (root / "shapes" / "__init__.py").write_text(
        "try:\n    from shapes._speedups import area, label\nexcept ImportError:\n    from shapes._native import area, label\n"
        if fallback else "from shapes._speedups import area, label\n"
    )  # fmt: skip
    (root / "tests").mkdir()
    (root / "tests" / "test_area.py").write_text(TEST_AREA)
    (root / "tests" / "test_label.py").write_text(TEST_LABEL)
    return root


async def test_a_project_that_needs_its_c_build_is_refused_by_what_its_suite_shows(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"needs a C build \(shapes/_speedups.c\): without it its test suite passes 0 tests"):
        await synthesize(_c_project(tmp_path / "needs", fallback=False), tmp_path / "out", SynthOptions(n=1))


def test_c_speedups_with_a_pure_python_fallback_are_run_without(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """markupsafe and simplejson build C speedups when they can and run without them: such a
    project was refused as needing a C build; its tests pass unbuilt, so tasks are made from it."""
    root = _c_project(tmp_path / "shapes", fallback=True)
    assert main(["tasks", "synth", str(root), str(tmp_path / "out"), "--n", "1", "--no-validate"]) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert "note: C sources (shapes/_speedups.c) are not built here" in said and "1 tasks in" in said
    assert "counts in" in said and "fewer than --n" not in said
    summary = json.loads((tmp_path / "out" / "synth-shapes.json").read_text())
    assert summary["native_sources"] == ["shapes/_speedups.c"] and summary["kept"] == 1
    assert "shapes/_native.py" in next((tmp_path / "out" / "tasks").glob("shapes-s*/gold.patch")).read_text()


def test_a_bad_pypi_name_is_refused_before_pip_runs(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"'pypi:two words' is not a PyPI project: write pypi:NAME or pypi:NAME==VERSION"):
        fetch_pypi("pypi:two words", tmp_path)


def test_an_sdist_unpacks_to_its_top_folder_and_nothing_escapes(tmp_path: Path) -> None:
    def archive(name: str, members: dict[str, bytes]) -> Path:
        path = tmp_path / name
        with tarfile.open(path, "w:gz") as tf:
            for member, data in members.items():
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        return path

    _unpack(archive("lib-1.0.tar.gz", {"lib-1.0/lib/__init__.py": b"X = 1\n", "lib-1.0/tests/test_x.py": b""}),
            tmp_path / "lib-1.0")  # fmt: skip
    assert (tmp_path / "lib-1.0" / "lib" / "__init__.py").read_text() == "X = 1\n"
    with pytest.raises(tarfile.TarError):  # tarfile's data filter: a member outside the folder
        _unpack(archive("evil.tar.gz", {"../escaped.py": b"boom"}), tmp_path / "evil")
    assert not (tmp_path / "escaped.py").exists() and not (tmp_path / "evil").exists()


def test_bench_synth_names_the_same_libraries_as_its_help() -> None:
    from coderl.bench.synth import LIBRARIES
    from coderl.cli.bench_cmd import SYNTH_LIBRARIES

    assert SYNTH_LIBRARIES == LIBRARIES


def test_bench_synth_table_gives_each_library_its_row() -> None:
    from coderl.bench.synth import to_markdown

    kept = {"library": "toolz==0.12.1", "tried": 10, "kept": 4, "dropped": {"uncaught": 5, "timeout": 1},
            "by_kind": {"operator": {"tried": 6, "kept": 3}, "key": {"tried": 4, "kept": 1}},
            "baseline_passing_tests": 180, "flaky_tests": [], "test_files": 12, "test_files_dropped": {},
            "lenient_settings": False, "pristine_s": 5.8, "mutant_run_s_mean": 3.0, "validation_failures": {},
            "src_layout": False, "minutes": 2.5}  # fmt: skip
    refused = {"library": "ujson==5.10.0", "refused": "ujson==5.10.0 needs a C build (a|b)", "minutes": 0.2}
    one = {**kept, "library": "inflection==0.5.1", "test_files": 1}
    dropped = {**kept, "library": "humanize==4.11.0", "test_files": 3, "test_files_dropped": {"a": "e", "b": "e"}}
    md = to_markdown({"libraries": [kept, one, dropped, refused], "n": 30, "timeout_s": 120, "machine": {"cpu": "x", "cores": 2}})
    assert "| `toolz==0.12.1` | flat; 12 test files; 180 tests pass | 10 | 4 | uncaught 5, timeout 1 | 4 of 4 | 2.5 |" in md
    assert "| `inflection==0.5.1` | flat; 1 test file; 180 tests pass |" in md
    assert "| `humanize==4.11.0` | flat; 3 test files (+2 left out: pytest could not import them); 180 tests pass |" in md
    assert "a suite run may take 120 s" in md
    assert "| `ujson==5.10.0` | refused: ujson==5.10.0 needs a C build (a\\|b) |" in md  # its bar escaped
    assert "operator 75%, key 25%" in md


def test_a_pypi_source_with_a_bad_count_or_filter_is_refused() -> None:
    from coderl.tasks import load_tasks

    with pytest.raises(TaskError, match=r"n='many' is not a whole number"):
        load_tasks("pypi:toolz==0.12.1?n=many")
    with pytest.raises(TaskError, match=r"n=0; ask for at least 1 task"):
        load_tasks("pypi:toolz==0.12.1?n=0")
    with pytest.raises(TaskError, match=r"unknown parameter\(s\) \['repos'\]; pypi sources take n, seed, bug_in"):
        load_tasks("pypi:toolz==0.12.1?repos=x")
    with pytest.raises(TaskError, match=r"bug_in='calee'; use one of callee, helper"):  # before any download
        load_tasks("pypi:toolz==0.12.1?n=24&bug_in=calee")
    with pytest.raises(TaskError, match=r"max_lines=0; give a number of lines"):
        load_tasks("pypi:toolz==0.12.1?n=24&max_lines=0")
    with pytest.raises(TaskError, match=r"max_lines='long' is not a whole number"):
        load_tasks("pypi:toolz==0.12.1?n=24&max_lines=long")


@pytest.mark.slow
def test_a_pypi_source_is_synthesised_once_and_then_read_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The sdist comes from the package index with pip (the one network access a test makes here)."""
    from coderl.tasks import load_tasks

    monkeypatch.setenv("CODERL_CACHE_DIR", str(tmp_path))
    tasks = load_tasks("pypi:toolz==0.12.1?n=1")
    assert len(tasks) == 1 and tasks[0].id.startswith("toolz-0.12.1-s") and tasks[0].fail_to_pass
    said = capfd.readouterr().err  # what it is doing, then its progress: minutes in a main job's start
    assert "pypi:toolz==0.12.1: synthesising 1 tasks (seed 0)" in said and "mutants kept: 1/1" in said
    monkeypatch.setattr("coderl.tasks.synth.source.subprocess.run", None)  # a second pip call would fail
    again = load_tasks("pypi:toolz==0.12.1?n=1")
    assert [t.id for t in again] == [t.id for t in tasks] and "synthesising" not in capfd.readouterr().err


@pytest.mark.slow
def test_a_version_the_index_does_not_have_is_named_with_the_versions_it_has(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match=r"pypi:toolz==99\.0\.0: the package index has no distribution") as caught:
        fetch_pypi("pypi:toolz==99.0.0", tmp_path)
    assert "0.12.1" in str(caught.value)  # pip's list of the versions there are


CHECKS_BASE = '''from shapes import area, label


class AreaChecks:  # not collected itself (no Test prefix): its subclasses in the test files are
    def test_area(self):
        assert area(2, 3) == 6

    def test_square(self):
        assert area(4, 4) == 16

    def test_label(self):
        assert label(" a ") == "a"
'''


async def test_inherited_test_methods_are_graded_by_the_file_that_collects_them(tmp_path: Path) -> None:
    """Markdown 3.5.2's legacy tests are methods of a class in markdown/test_tools.py that
    tests/test_legacy.py subclasses: pytest's report named the defining file, so its tasks' tests were
    ids of no test file, the library module was withheld as if it were one, and all 6 kept tasks failed
    validation. The ids are the collecting file's now, and the tasks validate."""
    root = tmp_path / "shapes"
    (root / "shapes").mkdir(parents=True)
    (root / "shapes" / "__init__.py").write_text(LIB)
    (root / "shapes" / "checking.py").write_text(CHECKS_BASE)
    (root / "tests").mkdir()
    (root / "tests" / "test_inherited.py").write_text("from shapes.checking import AreaChecks\n\n\nclass TestShapes(AreaChecks):\n    pass\n")
    out = tmp_path / "out"
    summary = await synthesize(root, out, SynthOptions(n=2, validate=True))
    assert summary["kept"] == 2 and summary["dropped"]["failed_validation"] == 0
    for task_id in summary["task_ids"]:
        meta = (out / "tasks" / task_id / "task.yaml").read_text()
        assert "tests/test_inherited.py::TestShapes::test_" in meta and "shapes/checking.py::" not in meta


KILL_TRACED = '''import os
import signal
import sys


def pytest_sessionstart(session):  # the traced run only: as the CPU limit once killed chardet's
    if "coderl_synth_trace" in sys.modules:
        os.kill(os.getpid(), signal.SIGKILL)
'''


async def test_a_traced_run_that_breaks_off_falls_back_to_every_test_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """chardet 5.2.0 passed 755 tests once; its traced run was killed mid-suite by the sandbox's CPU
    limit, left no report, and all 766 tests were called flaky: "passes no tests". Now the traced run
    gets the CPU its time limit allows, and one that still breaks off is said and done without."""
    root = _project(tmp_path / "shapes")
    (root / "tests" / "conftest.py").write_text(KILL_TRACED)
    with caplog.at_level(logging.WARNING, logger="coderl.tasks.synth.baseline"):
        summary = await synthesize(root, tmp_path / "out", SynthOptions(n=1, timeout_s=150, validate=False))
    assert summary["kept"] == 1 and summary["baseline_passing_tests"] >= 4  # from two untraced runs
    said = caplog.text
    assert "the traced run of the pristine suite" in said and "was killed by signal 9" in said
    task = next((tmp_path / "out" / "tasks").iterdir())
    assert "timeout_s: 150" in (task / "task.yaml").read_text()  # the longer limit, at grading too


def test_a_suite_run_gets_the_cpu_time_its_wall_clock_limit_allows(tmp_path: Path) -> None:
    from coderl.sandbox import SandboxSpec
    from coderl.tasks.synth.baseline import why_no_report
    from coderl.tasks.synth.suite import SuiteRun, SuiteRunner

    assert SuiteRunner(tmp_path, SandboxSpec(), {}, 180).spec.cpu_seconds == 540  # 3x: the traced run
    assert SuiteRunner(tmp_path, SandboxSpec(cpu_seconds=900), {}, 60).spec.cpu_seconds == 900
    assert "did not finish within 540 s" in why_no_report(SuiteRun(timed_out=True), 540)
    assert "CPU-time limit" in why_no_report(SuiteRun(exit_code=-24), 60)
    assert "CPU-time limit" in why_no_report(SuiteRun(exit_code=152), 60)
    assert "killed by signal 9" in why_no_report(SuiteRun(exit_code=-9), 60)
    assert "exit code 4" in why_no_report(SuiteRun(exit_code=4), 60)


def test_a_synth_that_keeps_fewer_than_n_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _project(tmp_path / "shapes")
    assert main(["tasks", "synth", str(root), str(tmp_path / "out"), "--n", "40", "--no-validate"]) == 0
    said = " ".join(capsys.readouterr().err.split())
    kept = json.loads((tmp_path / "out" / "synth-shapes.json").read_text())["kept"]
    assert 0 < kept < 40 and f"{40 - kept} fewer than --n 40: no more of the mutants tried were kept" in said
    assert "validated:" not in said  # no validation bar where nothing is validated
