"""Procedural task synthesis: mutations by hand, the issue text, and `coderl tasks synth` end to end on a
repository the project has never seen (tests/data/synth_repo), proven by `coderl tasks validate`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from coderl.cli.main import main
from coderl.errors import TaskError
from coderl.tasks import load_tasks
from coderl.tasks.junit import JUnitCase
from coderl.tasks.synth.build import SynthOptions, called_names, synthesize
from coderl.tasks.synth.issue import issue_text
from coderl.tasks.synth.mutate import KINDS, find_mutations, interleave
from coderl.tasks.synth.writer import gold_patch, protected_lines

REPO = Path(__file__).parent / "data" / "synth_repo"

SOURCE = '''"""Docstring with 1 < 2 in it."""

LIMIT = 10


def f(a, b, flag=True, n=3):
    """Doc: a + b."""
    if a < b and flag:
        return a + b
    elif not a:
        return g(a, b)
    else:
        total = a * 2
    for i in range(n):
        total += items[i + 1]
    return total == 0


class Span:
    def width(self, rows):
        try:
            return rows["end"] - rows["start"] + self.low
        except KeyError:
            raise ValueError("no span")

    def clamp(self, x, lo, hi):
        if x < lo:
            return lo
        if x > hi:
            return hi
        return x

    def names(self, items):
        out = []
        for item in items:
            item = item.strip()
            out.append(item)
        if self.high:
            return sorted(out, reverse=True)
        elif not out:
            return []
        return out


if __name__ == "__main__":
    f(1, 2)
'''


def _edits(kind: str) -> list[tuple[str, str]]:
    return [(SOURCE[m.start : m.end], m.replacement) for m in find_mutations("m.py", SOURCE) if m.kind == kind]


def test_each_kind_by_hand() -> None:
    assert set(KINDS) == {m.kind for m in find_mutations("m.py", SOURCE)}
    assert ("<", "<=") in _edits("comparison") and ("==", "!=") in _edits("comparison")
    assert ("+", "-") in _edits("operator") and ("*", "+") in _edits("operator")
    assert _edits("boolean") == [("and", "or")]
    assert ("a < b and flag", "not (a < b and flag)") in _edits("negation") and ("not a", "a") in _edits("negation")
    assert {("True", "False"), ("3", "4"), ("3", "2"), ("10", "11"), ("10", "9")} <= set(_edits("constant"))
    assert ("1", "2") in _edits("off_by_one") and ("2", "3") in _edits("off_by_one")
    assert _edits("swap_args") == [("a, b", "b, a")]  # g(a, b); range(n) has one argument
    assert ("return ", "") in _edits("drop_return")
    assert ("    else:\n        total = a * 2\n", "") in _edits("drop_branch")
    assert ("        elif not out:\n            return []\n", "") in _edits("drop_branch")  # an elif
    assert _edits("drop_kwarg") == [(", reverse=True", "")]
    assert _edits("exception") == [("KeyError", "IndexError"), ("ValueError", "TypeError")]
    # another key / self-attribute the file uses (Store targets and __dunder__ names are never changed)
    assert _edits("key") == [('"end"', '"start"'), ('"start"', '"end"'), ("low", "high"), ("high", "low")]
    assert _edits("drop_statement") == [("            item = item.strip()\n", ""), ("            out.append(item)\n", "")]
    # the clamp reduced to its final return (which reads only parameters); f's return reads a local
    assert _edits("feature_removal") == [("        if x < lo:\n            return lo\n        if x > hi:\n            return hi\n", "")]
    for m in find_mutations("m.py", SOURCE):
        assert "Doc" not in SOURCE[m.start : m.end] and "__main__" not in SOURCE[m.start : m.end]
        assert m.function in ("f", "", "Span.width", "Span.clamp", "Span.names")  # nor docstrings, the main guard


def test_mutants_parse_and_are_distinct_and_the_order_is_seeded() -> None:
    import ast

    mutations = find_mutations("m.py", SOURCE)
    texts = [m.apply(SOURCE) for m in mutations]
    assert len(set(texts)) == len(texts) and SOURCE not in texts
    for text in texts:
        ast.parse(text)
    first = [m for m in interleave(mutations, seed=1)]
    assert first == list(interleave(mutations, seed=1)) and first != list(interleave(mutations, seed=2))
    assert sorted(first, key=lambda m: (m.start, m.kind, m.replacement)) == mutations
    assert len({m.kind for m in first[: len(KINDS)]}) == len(KINDS)  # each kind in turn


def test_the_issue_quotes_the_test_never_the_library(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_total():\n    assert total(\n        [1, 2]\n    ) == 3\n")
    case = JUnitCase(
        "tests/test_x.py::test_total", "failed",
        message="AssertionError: assert 4 == 3\n +  where 4 = total([1, 2])\nlib/x.py:12: in total",
        text="def test_total():\n>   assert total(\ntests/test_x.py:2: \n\nlib/x.py:12: in total\n    return sum(v + 1 for v in values)\nE   AssertionError",
    )  # fmt: skip
    text = issue_text([case], tmp_path, others=2)
    assert "`tests/test_x.py::test_total` fails" in text and "assert total(\n" in text and ") == 3" in text
    assert "AssertionError: assert 4 == 3" in text and "2 other tests fail" in text
    assert "lib/x.py" not in text and "sum(v + 1" not in text  # no library file, no buggy line


def test_protected_lines_come_from_the_other_tasks_gold_patches(tmp_path: Path) -> None:
    task = tmp_path / "tasks" / "lib-001"
    task.mkdir(parents=True)
    (task / "task.yaml").write_text(yaml.safe_dump({"id": "lib-001", "repo": "lib", "tier": "easy"}))
    (task / "gold.patch").write_text(gold_patch("lib/a.py", "x = 1\ny = 2\nz = 3\n", "x = 1\ny = 5\nz = 3\n"))
    assert protected_lines(tmp_path / "tasks", "lib", "synth") == {"lib/a.py": {1, 2, 3}}  # the changed line ± 1
    assert protected_lines(tmp_path / "tasks", "lib", "easy") == {}  # a tier never protects itself
    assert protected_lines(tmp_path / "tasks", "other", "synth") == {}


@pytest.mark.slow
def test_synth_on_an_unseen_repository_gives_tasks_that_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "suite"
    assert main(["tasks", "synth", str(REPO), str(out), "--n", "4", "--seed", "3", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["kept"] == 4 and len(summary["task_ids"]) == 4
    # every mutant is accounted for: kept, dropped for a reason, or caught after the last place was filled
    dropped = summary["dropped"]
    assert summary["tried"] + dropped["overlaps_existing_task"] == summary["kept"] + sum(dropped.values()) + summary["surplus"]
    kinds = summary["by_kind"]  # each kind's mutants: tried and kept (written, before validation)
    assert set(kinds) <= set(KINDS) and sum(k["tried"] for k in kinds.values()) == summary["tried"]
    assert sum(k["kept"] for k in kinds.values()) == summary["kept"] + len(summary["validation_failures"])
    tasks = load_tasks(f"native:{out}")
    assert [t.id for t in tasks] == summary["task_ids"] and all(t.tier == "synth" for t in tasks)
    for t in tasks:
        assert t.fail_to_pass and t.pass_to_pass and t.gold_patch
        withheld = {p.split("::")[0] for p in t.fail_to_pass}
        assert withheld <= set(t.hidden_tests)  # the catching tests run at grading...
        assert not any((t.repo / p).exists() for p in withheld)  # ...and are not in the agent's snapshot
        assert t.metadata["synth"]["kind"] in KINDS  # type: ignore[index]
        assert t.metadata["synth"]["bug_in"] in ("callee", "helper")  # type: ignore[index]
        assert t.instruction.count("`tests/") >= 1 and "romankit/" not in t.instruction
    assert main(["tasks", "validate", f"tasks.source=native:{out}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] == report["total"] == 4


CALC = """def _plus(a, b):
    return a + b


def scale(k, values):
    return [k * v for v in values]


def total(values):
    out = 0
    for v in values:
        out = _plus(out, v)
    return out
"""
CALC_TESTS = """from lib.calc import scale, total


def test_total_of_scaled():
    assert total(scale(2, [1, 2])) == 6


def test_total():
    assert total([1, 2]) == 3


def test_empty():
    assert total([]) == 0


def test_scale_nothing():
    assert scale(2, []) == []
"""


def _calc_repo(root: Path) -> Path:
    """A library whose tests call ``total`` and ``scale`` by name, never ``_plus``; a bug in ``scale``
    that only ``total(scale(...))`` catches is shown by an issue calling ``total`` first."""
    (root / "lib").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "calc.py").write_text(CALC)
    (root / "tests" / "test_calc.py").write_text(CALC_TESTS)
    return root


def test_called_names_are_what_an_issue_can_show_being_called(tmp_path: Path) -> None:
    repo = _calc_repo(tmp_path / "calc")
    (repo / "tests" / "test_more.py").write_text("def test_x():\n    assert lib.calc.total2([]) == x.y\n")
    names = called_names(repo, ["tests/test_calc.py", "tests/test_more.py"])
    assert {"total", "scale", "total2"} <= names and not {"_plus", "calc", "lib", "y"} & names


@pytest.mark.slow
async def test_synth_keeps_only_the_bugs_asked_for(tmp_path: Path) -> None:
    """``bug_in=callee``: functions no test calls by name are never mutated (counted), and a caught
    mutant whose issue calls another function first is dropped as ``bug_elsewhere``; without it, the
    same repository gives helper tasks too."""
    repo = _calc_repo(tmp_path / "calc")
    every = await synthesize(repo, tmp_path / "all", SynthOptions(n=20, validate=False))
    marks = [(t.metadata["synth"]["bug_in"], t.metadata["synth"]["function"]) for t in load_tasks(f"native:{tmp_path / 'all'}")]  # type: ignore[index]
    assert ("helper", "_plus") in marks and ("helper", "scale") in marks and ("callee", "total") in marks
    only = await synthesize(repo, tmp_path / "callee", SynthOptions(n=20, validate=False, bug_in="callee"))
    kept = load_tasks(f"native:{tmp_path / 'callee'}")
    assert kept and all(t.metadata["synth"]["bug_in"] == "callee" for t in kept)  # type: ignore[index]
    assert only["bug_in"] == "callee" and only["sites_not_called_by_tests"] == 2  # _plus's two mutants
    assert only["dropped"]["bug_elsewhere"] >= 1 and only["mutation_sites"] == every["mutation_sites"]
    assert only["tried"] == only["kept"] + sum(only["dropped"].values()) + only["surplus"]
    with pytest.raises(TaskError, match=r"bug_in='callees'; use one of callee, helper"):
        await synthesize(repo, tmp_path / "bad", SynthOptions(n=1, bug_in="callees"))


@pytest.mark.slow
async def test_the_tasks_kept_are_the_first_caught_in_the_seeded_order_however_many_workers(tmp_path: Path) -> None:
    """Four workers finish their mutants in whatever order the machine's timing gives; the kept tasks
    are still those one worker keeps, numbered alike."""
    def kept(out: Path) -> list[tuple[str, object]]:
        return [(t.id, t.metadata["synth"]) for t in load_tasks(f"native:{out}")]  # type: ignore[index]

    one = await synthesize(REPO, tmp_path / "one", SynthOptions(n=3, seed=5, validate=False, concurrency=1))
    four = await synthesize(REPO, tmp_path / "four", SynthOptions(n=3, seed=5, validate=False, concurrency=4))
    assert kept(tmp_path / "one") == kept(tmp_path / "four") and one["kept"] == four["kept"] == 3
    for summary in (one, four):  # every mutant run is kept, dropped, or caught after the last place (surplus)
        dropped = summary["dropped"]
        assert summary["tried"] + dropped["overlaps_existing_task"] == summary["kept"] + sum(dropped.values()) + summary["surplus"]
    assert one["surplus"] == 0 and four["tried"] >= one["tried"]


@pytest.mark.slow
async def test_a_task_that_fails_validation_is_replaced_by_the_next_one_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every task is validated by the real check; two of them are made to fail it (the check's verdict
    is what is faked, to isolate what follows a failure): each is removed and replaced by the next mutant
    caught in the seeded order, so the suite still holds --n tasks, the ones a longer run keeps."""
    from coderl.tasks.synth import build
    from coderl.tasks.validate import TaskCheck
    from coderl.types import Task

    real = build.check_task
    made_to_fail = {"synth_repo-s001", "synth_repo-s003"}

    async def check(task: Task, spec: object = None) -> TaskCheck:
        verdict = await real(task, spec)  # type: ignore[arg-type]
        if task.id in made_to_fail:
            verdict.problems.append("made to fail by the test")
            verdict.ok = False
        return verdict

    def what(out: Path) -> dict[str, object]:
        return {t.id: t.metadata["synth"] for t in load_tasks(f"native:{out}")}  # type: ignore[index]

    await synthesize(REPO, tmp_path / "five", SynthOptions(n=5, seed=3, validate=False))
    monkeypatch.setattr(build, "check_task", check)
    summary = await synthesize(REPO, tmp_path / "three", SynthOptions(n=3, seed=3))
    five, three = what(tmp_path / "five"), what(tmp_path / "three")
    assert sorted(three) == ["synth_repo-s002", "synth_repo-s004", "synth_repo-s005"] == summary["task_ids"]
    assert all(three[i] == five[i] for i in three)  # the replacements are the 4th and 5th caught
    assert summary["kept"] == 3 and summary["dropped"]["failed_validation"] == 2 and summary["replacements"] == 2
    assert set(summary["failed_mutations"]) == made_to_fail == set(summary["validation_failures"])
    assert summary["failed_mutations"]["synth_repo-s001"]["line"] == five["synth_repo-s001"]["line"]  # type: ignore[index]
    assert sum(v["kept"] for v in summary["by_kind"].values()) == 3
    dropped = summary["dropped"]
    assert summary["tried"] + dropped["overlaps_existing_task"] == 3 + sum(dropped.values()) + summary["surplus"]


@pytest.mark.slow
async def test_synth_mutates_only_short_functions_when_asked(tmp_path: Path) -> None:
    repo = _calc_repo(tmp_path / "calc")
    short = await synthesize(repo, tmp_path / "short", SynthOptions(n=20, validate=False, max_lines=2))
    functions = {t.metadata["synth"]["function"] for t in load_tasks(f"native:{tmp_path / 'short'}")}  # type: ignore[index]
    assert functions and functions <= {"_plus", "scale"}  # total() has 5 lines
    assert short["max_lines"] == 2 and short["sites_in_long_functions"] >= 1
    with pytest.raises(TaskError, match=r"max_lines=0; give a number of lines, 1 or more"):
        await synthesize(repo, tmp_path / "bad", SynthOptions(n=1, max_lines=0))


async def test_bad_repositories_get_clear_errors(tmp_path: Path) -> None:
    no_tests = tmp_path / "no_tests"
    shutil.copytree(REPO / "romankit", no_tests / "romankit")
    with pytest.raises(TaskError, match="no test files"):
        await synthesize(no_tests, tmp_path / "out1", SynthOptions(n=1))
    failing = tmp_path / "failing"
    shutil.copytree(REPO, failing)
    for test in (failing / "tests").glob("test_*.py"):
        test.write_text("def test_broken():\n    assert False\n")
    with pytest.raises(TaskError, match="passes no test"):
        await synthesize(failing, tmp_path / "out2", SynthOptions(n=1))
    with pytest.raises(TaskError, match="not a folder"):
        await synthesize(tmp_path / "missing", tmp_path / "out3", SynthOptions(n=1))


@pytest.mark.slow
async def test_a_second_run_replaces_its_repository_tasks_and_keeps_the_other_repositories(tmp_path: Path) -> None:
    """Several repositories share one suite; synthesising one of them again replaces only its tasks."""
    def ids(prefix: str) -> list[str]:
        return sorted(t.id for t in load_tasks(f"native:{out}") if t.id.startswith(prefix))

    out, calc = tmp_path / "suite", _calc_repo(tmp_path / "calc")
    await synthesize(REPO, out, SynthOptions(n=3, validate=False))
    await synthesize(calc, out, SynthOptions(n=2, validate=False))
    first, theirs = ids("synth_repo-"), ids("calc-")
    assert len(first) == 3 and len(theirs) == 2
    await synthesize(REPO, out, SynthOptions(n=1, seed=1, validate=False))
    assert len(ids("synth_repo-")) == 1 and ids("calc-") == theirs


def test_a_synth_that_keeps_no_task_says_so_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Tests that assert nothing catch no mutant: an error naming what was run and dropped, not a
    "0 tasks ... load them with" line and exit 0 under --json."""
    repo = tmp_path / "blind"
    (repo / "lib").mkdir(parents=True)
    (repo / "lib" / "__init__.py").write_text("")
    (repo / "lib" / "calc.py").write_text(CALC)
    (repo / "tests").mkdir()
    (repo / "tests" / "test_calc.py").write_text(
        "from lib.calc import total\n\n\ndef test_runs():\n    total([1])\n\n\ndef test_nothing():\n    pass\n"
    )
    args = ["tasks", "synth", str(repo), str(tmp_path / "out"), "--n", "1", "--no-validate"]
    assert main(args) == 1
    said = " ".join(capsys.readouterr().err.split())  # the console wraps its lines
    assert "no task kept" in said and "uncaught" in said and "load them" not in said
    # every site was tried and no test file was dropped: no "--max-tries"; six uncaught mutants are too
    # few to call the suite weak
    assert "--max-tries" not in said and "every eligible mutation site was tried" in said
    assert "exercise little" not in said
    assert main([*args, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["kept"] == 0


def _summary(**given: object) -> dict[str, object]:
    """A synthesis summary that kept nothing, its counts overridden by ``given``."""
    base: dict[str, object] = {
        "name": "lib", "mutation_sites": 24, "eligible_sites": 24, "tried": 24, "bug_in": None, "max_lines": None,
        "sites_not_called_by_tests": 0, "sites_in_long_functions": 0, "test_files_dropped": {},
        "baseline_passing_tests": 9, "dropped": {"uncaught": 3, "overlaps_existing_task": 0},
    }  # fmt: skip
    return {**base, **given}


@pytest.mark.parametrize(
    ("given", "says", "never"),
    [
        # every eligible site tried, some left out by overlaps and --bug-in: no --max-tries
        (
            {"eligible_sites": 18, "tried": 18, "bug_in": "callee", "sites_not_called_by_tests": 2,
             "dropped": {"uncaught": 3, "overlaps_existing_task": 4}},
            "widen the choice (--bug-in, --max-lines)", "--max-tries",
        ),
        ({"eligible_sites": 18, "tried": 5}, "allow more mutants with --max-tries (18 could be tried)", "widen"),
        ({"tried": 24}, "every eligible mutation site was tried; see the dropped counts in /o/synth-lib.json", "--max"),
        (
            {"eligible_sites": 0, "tried": 0, "max_lines": 5, "sites_in_long_functions": 24},
            "none of its 24 mutation sites was left to try", "--max-tries",
        ),
        ({"mutation_sites": 0, "eligible_sites": 0, "tried": 0}, "offers no mutation site", "every"),
        (
            {"tried": 8, "dropped": {"uncaught": 0, "overlaps_existing_task": 0, "failed_validation": 6}},
            "all 6 caught mutants failed validation as tasks", "--max-tries",
        ),
        (
            {"test_files_dropped": {"tests/test_a.py": "e"}},
            "1 test file could not be imported and was left out (test_files_dropped in /o/synth-lib.json)", "--max",
        ),
    ],
)  # fmt: skip
def test_the_no_task_advice_follows_what_the_summary_says(given: dict[str, object], says: str, never: str) -> None:
    """--max-tries is advised only when eligible mutants were left untried (sites the overlaps, --bug-in
    and --max-lines left out are not more mutants to try), and the summary is named by its path."""
    from coderl.cli.tasks_cmd import _no_task_advice

    advice = _no_task_advice(_summary(**given), "/o/synth-lib.json")
    assert says in advice and never not in advice


def test_the_bundled_synthesis_summaries_are_json() -> None:
    """synth-<name>.json is JSON (it was YAML under that name before 2026-12-01)."""
    found = sorted((Path(__file__).parents[1] / "coderl" / "tasks" / "bundled").glob("synth-*.json"))
    assert len(found) == 10
    for path in found:
        summary = json.loads(path.read_text())
        assert summary["name"] == path.stem.removeprefix("synth-") and summary["kept"] > 0
