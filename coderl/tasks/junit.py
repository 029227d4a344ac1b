"""Per-test outcomes from a JUnit XML report (pytest's ``--junitxml``, any xunit producer).

Outcomes are keyed by every name a task may use for a test: pytest node ids
(``tests/test_x.py::TestC::test_a[1]``), ``classname.name``, Django's ``name (classname)`` and the
bare name. Printed "PASSED" text is never read.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Literal

Outcome = Literal["passed", "failed", "error", "skipped"]


@dataclass
class JUnitCase:
    """One test case of a report: its pytest node id, outcome, and for a failure its message and
    traceback text (what synthesised tasks quote in their issue text)."""

    node_id: str
    outcome: Outcome
    message: str = ""
    text: str = ""


def parse_junit(xml_text: str) -> dict[str, Outcome]:
    """Map test names to outcomes; an unparsable report gives an empty map."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError:
        return {}
    results: dict[str, Outcome] = {}
    for case in root.iter("testcase"):
        outcome: Outcome = "passed"
        if case.find("failure") is not None:
            outcome = "failed"
        elif case.find("error") is not None:
            outcome = "error"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        for key in _keys(case.get("classname", ""), case.get("name", ""), case.get("file")):
            # a test reported twice (e.g. a teardown error) keeps its worst outcome
            if results.get(key) in (None, "passed", "skipped"):
                results[key] = outcome
    return results


def junit_cases(xml_text: str) -> list[JUnitCase]:
    """Every test case of a report, in order, keyed by its pytest node id (``file::Class::name``
    when the report names the file, as pytest's xunit1 family does; else ``classname.name``)."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError:
        return []
    cases: list[JUnitCase] = []
    for case in root.iter("testcase"):
        keys = _keys(case.get("classname", ""), case.get("name", ""), case.get("file"))
        node = keys[3] if len(keys) > 3 else keys[1]
        outcome: Outcome = "passed"
        detail = None
        for tag in ("failure", "error", "skipped"):
            detail = case.find(tag)
            if detail is not None:
                outcome = "failed" if tag == "failure" else tag  # type: ignore[assignment]
                break
        message = detail.get("message", "") if detail is not None else ""
        text = (detail.text or "") if detail is not None else ""
        cases.append(JUnitCase(node, outcome, message, text))
    return cases


def _keys(classname: str, name: str, file: str | None) -> list[str]:
    keys = [name, f"{classname}.{name}", f"{name} ({classname})"]
    if file and file.endswith(".py"):
        node_file, rest = _node_file(classname, file)
        keys.append(node_file + ("::" + rest.replace(".", "::") if rest else "") + "::" + name)
    return keys


def _node_file(classname: str, file: str) -> tuple[str, str]:
    """The file of a test's pytest node id, and the classes after it in ``classname``. pytest's xunit1
    ``file`` is where the test *function* is defined, the node id's file where the test was collected:
    they differ for a method inherited from a base class in another module (Markdown's legacy tests
    are methods of ``markdown/test_tools.py`` collected from ``tests/test_legacy.py``), and then
    ``classname``, which pytest builds from the node id, says where: its module part runs up to the
    first class name (capitalised, as pytest's ``Test*`` classes are)."""
    module = file[:-3].replace("/", ".")
    if classname == module or classname.startswith(module + "."):
        return file, classname[len(module) :].lstrip(".")
    parts = classname.split(".")
    first_class = next((i for i, part in enumerate(parts) if part[:1].isupper()), len(parts))
    if first_class == 0:  # no module part to read: the defining file is the best there is
        return file, classname
    return "/".join(parts[:first_class]) + ".py", ".".join(parts[first_class:])
