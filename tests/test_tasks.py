"""Task formats and grading, on small real repositories made here (the bundled suite has its own test)."""

from __future__ import annotations

import dataclasses
import json
import tarfile
from pathlib import Path

import pytest
import yaml

from coderl.errors import TaskError
from coderl.tasks import grade, load_tasks
from coderl.tasks.dataset import read_parquet, write_parquet
from coderl.tasks.junit import junit_cases, parse_junit
from coderl.tasks.patching import split_patch, without_test_changes
from coderl.tasks.validate import cheating_test_patch, check_task

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
GOLD = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,5 +1,5 @@
 def add(a, b):
-    return a - b
+    return a + b
 
 
 def mul(a, b):
"""
HIDDEN = "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
F2P = ["tests/test_hidden_calc.py::test_add"]
P2P = ["tests/test_hidden_calc.py::test_mul"]


def make_native(root: Path) -> Path:
    task = root / "calc-001"
    (task / "repo" / "tests").mkdir(parents=True)
    (task / "repo" / "calc.py").write_text(BUGGY)
    (task / "repo" / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n')
    (task / "repo" / "tests" / "test_visible.py").write_text(
        "from calc import mul\n\n\ndef test_mul():\n    assert mul(1, 1) == 1\n"
    )
    (task / "tests").mkdir()
    (task / "tests" / "test_hidden_calc.py").write_text(HIDDEN)
    (task / "gold.patch").write_text(GOLD)
    meta = {
        "id": "calc-001",
        "tier": "warmup",
        "instruction": "add(2, 3) returns -1",
        "fail_to_pass": F2P,
        "pass_to_pass": P2P,
        "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},  # its tests need no plugins: 0.3 s a run, not 1.7
    }
    (task / "task.yaml").write_text(yaml.safe_dump(meta))
    return task


@pytest.fixture
def native_task(tmp_path: Path):  # type: ignore[no-untyped-def]
    return load_tasks(f"native:{make_native(tmp_path)}")[0]


async def test_gold_resolves_empty_and_test_only_do_not(native_task) -> None:  # type: ignore[no-untyped-def]
    gold = await grade(native_task, GOLD)
    assert gold.resolved and gold.reward == 1.0 and gold.patch_applied
    assert gold.fail_to_pass == {F2P[0]: "passed"} and gold.pass_to_pass == {P2P[0]: "passed"}
    empty = await grade(native_task, "")
    assert (
        not empty.resolved
        and empty.fail_to_pass == {F2P[0]: "failed"}
        and empty.pass_to_pass == {P2P[0]: "passed"}
    )
    cheat = await grade(native_task, cheating_test_patch(native_task))
    assert not cheat.resolved and cheat.discarded_test_files == ["tests/test_hidden_calc.py"]


async def test_fraction_reward_and_printed_text_counts_for_nothing(native_task) -> None:  # type: ignore[no-untyped-def]
    partial = await grade(native_task, "", reward_mode="fraction")
    assert partial.reward == 0.5
    # a patch that prints fake pytest output but fixes nothing
    fake = GOLD.replace("+    return a + b", '+    print("test_add PASSED"); return a - b')
    r = await grade(native_task, fake)
    assert not r.resolved and r.fail_to_pass[F2P[0]] == "failed"


async def test_unappliable_patch_is_reported(native_task) -> None:  # type: ignore[no-untyped-def]
    bad = GOLD.replace("-    return a - b", "-    return a ** b")
    r = await grade(native_task, bad)
    assert not r.patch_applied and not r.resolved and "does not apply" in (r.error or "")


async def test_patch_editing_visible_tests_is_discarded(native_task) -> None:  # type: ignore[no-untyped-def]
    patch = GOLD + (
        "diff --git a/tests/test_visible.py b/tests/test_visible.py\n--- a/tests/test_visible.py\n+++ b/tests/test_visible.py\n"
        "@@ -1,5 +1,5 @@\n from calc import mul\n \n \n def test_mul():\n-    assert mul(1, 1) == 1\n+    assert True\n"
    )
    r = await grade(native_task, patch)
    assert r.resolved and r.discarded_test_files == ["tests/test_visible.py"]


async def test_validate_checks_a_task(native_task) -> None:  # type: ignore[no-untyped-def]
    check = await check_task(native_task)
    assert check.ok, check.problems
    broken = native_task
    broken.gold_patch = ""
    check = await check_task(broken)
    assert not check.ok and any("gold patch did not resolve" in p for p in check.problems)


def test_split_and_filter_patches() -> None:
    patch = (
        GOLD
        + "diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n+++ b/tests/test_x.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    assert [p.path for p in split_patch(patch)] == ["calc.py", "tests/test_x.py"]
    kept, dropped = without_test_changes(patch)
    assert kept == GOLD and dropped == ["tests/test_x.py"]
    _, dropped = without_test_changes("diff --git a/lib/conftest.py b/lib/conftest.py\n+x\n")
    assert dropped == ["lib/conftest.py"]


def test_junit_parsing_keys_and_worst_outcome() -> None:
    xml = """<testsuites><testsuite>
      <testcase classname="tests.test_a" name="test_ok" file="tests/test_a.py"/>
      <testcase classname="tests.test_a.TestK" name="test_p[1]" file="tests/test_a.py"><failure message="x"/></testcase>
      <testcase classname="tests.test_a" name="test_err" file="tests/test_a.py"/>
      <testcase classname="tests.test_a" name="test_err" file="tests/test_a.py"><error message="teardown"/></testcase>
      <testcase classname="app.tests.T" name="test_dj"><skipped/></testcase>
    </testsuite></testsuites>"""
    r = parse_junit(xml)
    assert r["tests/test_a.py::test_ok"] == "passed"
    assert r["tests/test_a.py::TestK::test_p[1]"] == "failed"
    assert r["tests/test_a.py::test_err"] == "error"
    assert r["test_dj (app.tests.T)"] == "skipped"
    assert parse_junit("not xml") == {}


def test_junit_node_ids_name_the_file_a_test_was_collected_from_not_where_its_function_lives() -> None:
    """pytest's xunit1 ``file`` is where the function is defined: for an inherited test method (Markdown's
    legacy tests, Django-style base classes) or an imported test function that is another module than
    the node id's. The id is read from ``classname``, which pytest builds from the node id."""
    xml = """<testsuites><testsuite>
      <testcase classname="tests.test_legacy.TestBasic" name="test_amps" file="markdown/test_tools.py"/>
      <testcase classname="tests.test_a" name="test_shared" file="tests/helpers.py"><failure message="x"/></testcase>
      <testcase classname="tests.test_ab.TestK" name="test_k" file="tests/test_a.py"/>
      <testcase classname="tests.test_a.TestK.TestInner" name="test_n" file="tests/test_a.py"/>
    </testsuite></testsuites>"""
    r = parse_junit(xml)
    assert r["tests/test_legacy.py::TestBasic::test_amps"] == "passed"
    assert r["tests/test_a.py::test_shared"] == "failed"
    assert r["tests/test_ab.py::TestK::test_k"] == "passed"  # test_a.py is not the module of tests.test_ab
    assert r["tests/test_a.py::TestK::TestInner::test_n"] == "passed"
    assert [c.node_id for c in junit_cases(xml)][:2] == [
        "tests/test_legacy.py::TestBasic::test_amps", "tests/test_a.py::test_shared",
    ]  # fmt: skip
    assert not any(key.startswith(("markdown/", "tests/helpers.py")) for key in r)


async def test_swebench_instances_from_jsonl_with_archive_snapshots(tmp_path: Path) -> None:
    repo = make_native(tmp_path / "src") / "repo"
    repos = tmp_path / "repos"
    repos.mkdir()
    with tarfile.open(repos / "owner__calc.tar.gz", "w:gz") as tf:
        for p in repo.rglob("*"):
            tf.add(p, arcname=str(p.relative_to(repo)))
    test_patch = (
        "diff --git a/tests/test_hidden_calc.py b/tests/test_hidden_calc.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/test_hidden_calc.py\n@@ -0,0 +1,9 @@\n"
        + "".join("+" + line + "\n" for line in HIDDEN.splitlines())
    )
    record = {
        "instance_id": "owner__calc-1", "repo": "owner/calc", "base_commit": "abc", "problem_statement": "add is wrong",
        "patch": GOLD, "test_patch": test_patch, "FAIL_TO_PASS": json.dumps(F2P), "PASS_TO_PASS": P2P,
    }  # fmt: skip
    data = tmp_path / "swe.jsonl"
    data.write_text(json.dumps(record) + "\n")
    task = load_tasks(f"swebench:{data}?repos={repos}")[0]
    assert task.fail_to_pass == F2P and task.workdir == "/testbed" and task.source == "swebench"
    assert (await grade(task, GOLD)).resolved
    assert not (await grade(task, "")).resolved
    with pytest.raises(TaskError, match="no repository snapshot"):
        load_tasks(f"swebench:{data}?repos={tmp_path / 'empty'}")


async def test_harbor_task_graded_by_reward_file(tmp_path: Path) -> None:
    task_dir = tmp_path / "hello-file"
    (task_dir / "environment").mkdir(parents=True)
    (task_dir / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (task_dir / "environment" / "seed.txt").write_text("seed\n")
    (task_dir / "tests").mkdir()
    (task_dir / "tests" / "test.sh").write_text(
        '#!/bin/bash\nif [ "$(cat /app/hello.txt 2>/dev/null)" = "hello" ]; then echo 1 > /logs/verifier/reward.txt; '
        "else echo 0 > /logs/verifier/reward.txt; fi\n"
    )
    (task_dir / "solution").mkdir()
    (task_dir / "solution" / "solve.sh").write_text("echo hello > /app/hello.txt\n")
    (task_dir / "instruction.md").write_text("Create /app/hello.txt containing hello.\n")
    (task_dir / "task.toml").write_text(
        'version = "1.0"\n[metadata]\ndifficulty = "easy"\n[verifier]\ntimeout_sec = 30.0\n'
    )
    task = load_tasks(f"harbor:{task_dir}")[0]
    assert task.workdir == "/app" and task.tier == "easy" and task.verifier == "harbor"
    solved = "diff --git a/hello.txt b/hello.txt\nnew file mode 100644\n--- /dev/null\n+++ b/hello.txt\n@@ -0,0 +1 @@\n+hello\n"
    assert (await grade(task, solved)).resolved
    unsolved = await grade(task, "")
    assert not unsolved.resolved and unsolved.reward == 0.0


async def test_parquet_round_trip_is_self_contained(native_task, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "tasks.parquet"
    native_task.env = {"CALC_MODE": "strict"}
    write_parquet([native_task], out)
    loaded = read_parquet(out)[0]
    assert loaded.id == native_task.id and loaded.hidden_tests == native_task.hidden_tests
    assert loaded.env == {"CALC_MODE": "strict"}
    assert loaded.repo != native_task.repo and (loaded.repo / "calc.py").read_text() == BUGGY
    assert (await grade(loaded, GOLD)).resolved
    assert load_tasks(str(out))[0].id == native_task.id


def test_bad_sources_say_what_is_valid(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="bundled"):
        load_tasks(str(tmp_path / "nothing-here.txt"))
    with pytest.raises(TaskError, match="unknown tier"):
        load_tasks("bundled:impossible")
    bad = tmp_path / "t"
    bad.mkdir()
    (bad / "task.yaml").write_text("id: x\n")
    with pytest.raises(TaskError, match="missing required key"):
        load_tasks(f"native:{bad}")


async def test_a_tasks_env_reaches_its_grading_sandbox(tmp_path: Path) -> None:
    folder = make_native(tmp_path)
    meta = yaml.safe_load((folder / "task.yaml").read_text())
    (folder / "task.yaml").write_text(yaml.safe_dump({**meta, "env": {"CALC_CHECK": "on"}}))
    (folder / "tests" / "test_hidden_calc.py").write_text(
        "import os\n" + HIDDEN + "\n\ndef test_env():\n    assert os.environ['CALC_CHECK'] == 'on'\n"
    )
    task = load_tasks(f"native:{folder}")[0]
    task.pass_to_pass = [*task.pass_to_pass, "tests/test_hidden_calc.py::test_env"]
    assert task.env == {"CALC_CHECK": "on"}  # the task's own env replaces the test helper's
    assert (await grade(task, GOLD)).resolved
    bad = tmp_path / "bad"
    make_native(bad)
    (bad / "calc-001" / "task.yaml").write_text(yaml.safe_dump({**meta, "env": ["CALC_CHECK"]}))
    with pytest.raises(TaskError, match="env must map"):
        load_tasks(f"native:{bad / 'calc-001'}")


def test_bundled_tasks_run_pytest_without_third_party_plugins() -> None:
    assert all(t.env.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") == "1" for t in load_tasks("bundled:warmup"))


def test_grading_gives_the_hidden_tests_the_cpu_time_their_time_limit_allows(tmp_path: Path) -> None:
    """A task whose suite needs 150 s of its 180 s was killed by the sandbox's default CPU limit (120 s)."""
    from coderl.sandbox import SandboxSpec
    from coderl.tasks.grading import _spec_fields
    from coderl.types import Task

    slow = Task(id="t", instruction="fix it", repo=tmp_path, fail_to_pass=["a.py::t"], pass_to_pass=[], timeout_s=180)
    assert _spec_fields(slow, SandboxSpec())["cpu_seconds"] == 180
    assert _spec_fields(dataclasses.replace(slow, timeout_s=30.0), SandboxSpec())["cpu_seconds"] == 120
    assert _spec_fields(slow, SandboxSpec(cpu_seconds=600))["cpu_seconds"] == 600
