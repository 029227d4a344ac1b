"""Demonstrations for a supervised warm start, in the token space of the loop that will be trained.

Two sources, both token-exact:

- **Rollouts** (rejection sampling / expert iteration): the resolved trajectories of ``coderl
  rollout`` / ``eval`` / ``tasks calibrate`` / ``train`` runs, as the engine sampled them.
- **Gold patches**: for a task whose gold patch changes one line, the moves an expert would make with
  the loop's own tools — find the function, look at it with line numbers, make the one-line fix —
  written as the model's side of each turn and played through the real loop by a scripted engine, so
  the trajectory is exactly what the loop renders (prompt, response prefix, tool output, masks). Only
  demonstrations whose patch resolves the task under its hidden tests are kept, and only of tasks whose
  fix lies in the function the issue text calls first (:func:`issue_callee`): every move is then read
  off what the agent has seen (the name from the issue, the file and line from the search, the line
  from the listing). A demonstration whose first move names a function the issue never mentions
  teaches the policy to recall names of the training code, which do not exist in held-out code.

Three tool sets of the ``swe`` loop are written: a bash response prefix (``grep``, ``cat -n | sed -n``,
``sed -i``, one-line fixes), its symbol tools (``show_function`` of the function the issue calls, then
``replace_function`` with that function's fixed source, then ``submit``: any fix inside that function,
however many lines, written without its docstring where the fix leaves that as it was: the tool keeps
it, and the model need not copy it back), and its editor tools (``search``, ``view``, ``str_replace``, ``submit``). Calls are
written in the chat format's tool-call form (Hermes JSON, or Qwen3-Coder's XML with raw values).
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from coderl.agents import symbols
from coderl.chat import ChatFormat
from coderl.chat.tools import hermes_call_text, xml_call_text
from coderl.engine.scripted import ScriptedEngine
from coderl.errors import ConfigError
from coderl.rollout.config import RolloutConfig
from coderl.rollout.context import ContextFactory
from coderl.rollout.runner import RolloutSettings, run_rollouts, task_groups
from coderl.rollout.store import read_trajectories
from coderl.sandbox import SandboxSpec
from coderl.tasks.overlap import changed_old_lines
from coderl.tasks.patching import apply_file_diff, split_patch
from coderl.tasks.synth.issue import issue_callee
from coderl.types import Task, Trajectory

BASH_OPENER = '"name": "bash", "arguments": {"command": "'


@dataclass
class OneLineFix:
    """A gold patch that changes one line: where, and the line before and after."""

    path: str
    line: int
    """1-based, in the task's (buggy) snapshot."""
    old: str
    new: str


def one_line_fix(gold: str) -> OneLineFix | None:
    """The fix, when the gold patch replaces exactly one line of one file (None otherwise)."""
    files = split_patch(gold)
    if len(files) != 1:
        return None
    hunks = re.split(r"^@@ ", files[0].text, flags=re.M)[1:]
    if len(hunks) != 1:
        return None
    header, _, body = hunks[0].partition("\n")
    m = re.match(r"-(\d+)", header)
    if m is None:
        return None
    line = int(m.group(1))
    removed, added = [], []
    for row in body.splitlines():
        if row.startswith("-"):
            removed.append((line, row[1:]))
        elif row.startswith("+"):
            added.append(row[1:])
        if not row.startswith("+"):
            line += 1
    if len(removed) != 1 or len(added) != 1:
        return None
    return OneLineFix(files[0].path, removed[0][0], removed[0][1], added[0])


def enclosing_function(source: str, line: int) -> tuple[str, int, int] | None:
    """(name, first line, last line) of the innermost function holding ``line``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    best: tuple[str, int, int] | None = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            last = node.end_lineno or node.lineno
            if first <= line <= last and (best is None or first >= best[1]):
                best = (node.name, node.lineno, last)
    return best


def _sed_pattern(text: str) -> str:
    return re.sub(r"([\\/.*\[\]^$])", r"\\\1", text)


def _sed_replacement(text: str) -> str:
    return re.sub(r"([\\/&])", r"\\\1", text)


def _shell(text: str) -> str:
    """Text to put inside a single-quoted shell word."""
    return text.replace("'", "'\\''")


def _changed_span(old: str, new: str, haystack: str | None = None) -> tuple[str, str]:
    """What a person would type to fix ``old`` into ``new`` with ``s/OLD/NEW/``: the differing middle,
    widened to whole words and then, a character (and the rest of a word) at a time on both sides, until OLD is not empty and
    occurs once in ``haystack`` (default: the line), so the substitution cannot hit another place."""
    haystack = old if haystack is None else haystack
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0  # characters shared at the end
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1

    def word(c: str) -> bool:
        return c.isalnum() or c == "_"

    while start > 0 and word(old[start - 1]):
        start -= 1
    while end > 0 and word(old[len(old) - end]):
        end -= 1
    while start > 0 or end > 0:
        span = old[start : len(old) - end]
        if span.strip() and haystack.count(span) == 1:
            break
        if start > 0:  # one more character on the left, then the rest of a word it starts into
            start -= 1
            while start > 0 and word(old[start - 1]) and word(old[start]):
                start -= 1
        if end > 0:  # the same on the right
            end -= 1
            while end > 0 and word(old[len(old) - end]) and word(old[len(old) - end - 1]):
                end -= 1
    return old[start : len(old) - end], new[start : len(new) - end]


VIEW_LINES = 25
"""How many lines after the ``def`` line the bash demonstration shows: a fixed window, so the model only
copies the line number ``grep`` printed, rather than working out where the function ends."""


def _window(first: int, last: int) -> int:
    """Lines to show after ``first``: the fixed window, or the whole function when it is longer."""
    return max(VIEW_LINES, last - first)


NOT_ONE_LINE = "no_one_line_fix"
NOT_IN_ISSUE = "fix_not_in_issue_callee"
OVER_MAX_TOKENS = "turn_over_max_tokens"


def gold_turns(task: Task, rollout: RolloutConfig, tool_format: str = "hermes") -> list[str] | None:
    """The model's side of each turn of a gold demonstration for the ``swe`` loop (after the response
    prefix the environment writes), or None when there is none (:func:`gold_plan` says why)."""
    turns = gold_plan(task, rollout, tool_format)
    return None if isinstance(turns, str) else turns


SYMBOL_TOOLS = ("show_function", "replace_function")
EDIT_TOOLS = ("show_function", "str_replace")
"""The symbol-edit tool set: look the function up, then replace only the lines that change."""


def gold_plan(task: Task, rollout: RolloutConfig, tool_format: str = "hermes") -> list[str] | str:
    """The turns of :func:`gold_turns`, or why there are none: ``NOT_ONE_LINE`` when the task's fix is
    not a change the loop's tools can make in ``rollout.max_turns`` turns (one line, or with the symbol
    tools one function), ``NOT_IN_ISSUE`` when the fixed function is not the one the issue text calls
    first. ``tool_format``: ``xml`` writes calls in Qwen3-Coder's form, anything else as Hermes JSON."""
    if rollout.agent != "swe" or task.gold_patch is None:
        return NOT_ONE_LINE
    if rollout.tools is not None and all(t in rollout.tools for t in SYMBOL_TOOLS):
        return _symbol_plan(task, rollout, tool_format)
    if rollout.tools is not None and all(t in rollout.tools for t in EDIT_TOOLS):
        return _symbol_edit_plan(task, rollout, tool_format)
    fix = one_line_fix(task.gold_patch)
    if fix is None or not fix.old.strip() or "\n" in fix.old:
        return NOT_ONE_LINE
    source_path = Path(task.repo) / fix.path
    if not source_path.is_file():
        return NOT_ONE_LINE
    source = source_path.read_text()
    found = enclosing_function(source, fix.line)
    if found is None:
        return NOT_ONE_LINE
    name, first, last = found
    if issue_callee(task.instruction) != name:
        return NOT_IN_ISSUE
    old, new = _changed_span(fix.old, fix.new)
    in_file = _changed_span(fix.old, fix.new, source)
    address = "" if source.count(in_file[0]) == 1 else str(fix.line)
    if not address:  # unique in the file: no line number to copy (easier for a small model to get right)
        old, new = in_file
    bash = (
        rollout.response_prefix.strip().endswith(BASH_OPENER.strip())
        or BASH_OPENER in rollout.response_prefix
    )
    if bash:
        commands = [
            f'grep -rn "def {name}" --include=*.py .',
            f"cat -n {fix.path} | sed -n '{first},+{_window(first, last)}p'",
            f"sed -i '{address}s/{_shell(_sed_pattern(old))}/{_shell(_sed_replacement(new))}/' {fix.path}",
        ]
        if rollout.max_turns < len(commands):
            return NOT_ONE_LINE
        return [json.dumps(c)[1:-1] + '"}}\n</tool_call>' for c in commands]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("search", {"text": f"def {name}"}),
        ("view", {"path": fix.path, "start": first, "end": last}),
        ("str_replace", {"path": fix.path, "old": fix.old.strip(), "new": fix.new.strip()}),
        ("submit", {}),
    ]
    if source.count(fix.old.strip()) != 1 or rollout.max_turns < len(calls):
        return NOT_ONE_LINE
    return _written(calls, rollout.response_prefix, tool_format)


def _symbol_plan(task: Task, rollout: RolloutConfig, tool_format: str) -> list[str] | str:
    """``show_function`` of the issue's callee, ``replace_function`` with its fixed source, ``submit``."""
    found = _callee_function(task)
    if isinstance(found, str):
        return found
    try:
        after = symbols.named(found.fixed, found.function.qualname)
    except SyntaxError:
        return NOT_ONE_LINE
    if len(after) != 1:
        return NOT_ONE_LINE
    text = after[0].text(found.fixed)
    if symbols.docstring_span(text) is not None and symbols.keep_docstring(
        found.function.text(found.buggy), symbols.without_docstring(text)
    ) == text:  # the fix leaves the docstring as it was: replace_function keeps it
        text = symbols.without_docstring(text)
    text = text.rstrip("\n")
    rewrite = ("replace_function", {"path": found.path, "name": found.bare, "text": text})
    return _planned([("show_function", {"name": found.bare}), rewrite], rollout, tool_format)


class CalleeFix(NamedTuple):
    """A gold patch that changes one function of one file: the file before and after, the function."""

    path: str
    buggy: str
    fixed: str
    function: symbols.FunctionSource
    bare: str
    """The function's name without its class: what the issue calls and ``show_function`` is given."""


def _callee_function(task: Task) -> CalleeFix | str:
    """The fix, when the gold patch changes one function of one file, that function being the one the
    issue calls first and the only one its bare name leads to in the file; else why not."""
    files = split_patch(task.gold_patch or "")
    if len(files) != 1 or not (Path(task.repo) / files[0].path).is_file():
        return NOT_ONE_LINE
    path = files[0].path
    buggy = (Path(task.repo) / path).read_text()
    try:
        fixed = apply_file_diff(buggy, files[0].text)
        changed = changed_old_lines(files[0].text)
        holding = [f for f in symbols.functions(buggy) if all(f.first <= n <= f.last for n in changed)]
    except (ValueError, SyntaxError):
        return NOT_ONE_LINE
    if not changed or not holding:
        return NOT_ONE_LINE
    function = max(holding, key=lambda f: f.first)  # the innermost
    bare = function.qualname.rsplit(".", 1)[-1]
    if issue_callee(task.instruction) != bare:
        return NOT_IN_ISSUE
    if len(symbols.named(buggy, bare)) != 1:  # the name must lead to this one function
        return NOT_ONE_LINE
    return CalleeFix(path, buggy, fixed, function, bare)


def edit_span(buggy: str, fixed: str, first: int, last: int) -> tuple[str, str] | None:
    """The ``str_replace`` that turns ``buggy`` into ``fixed``: whole lines, from the first that differs
    to the last, widened by a line at a time (above, then below, within lines ``first``..``last``)
    until the old text occurs once in the file; the first line's indentation left off both sides. None
    when the change reaches outside those lines or no widening is unique."""
    old_lines, new_lines = buggy.splitlines(), fixed.splitlines()
    top = 0
    while top < min(len(old_lines), len(new_lines)) and old_lines[top] == new_lines[top]:
        top += 1
    tail = 0  # lines shared at the end
    while tail < min(len(old_lines), len(new_lines)) - top and old_lines[-1 - tail] == new_lines[-1 - tail]:
        tail += 1
    lo, hi = top, len(old_lines) - tail  # old lines [lo, hi) become new lines [lo, len(new) - tail)
    if lo < first - 1 or hi > last:
        return None
    while True:
        old = old_lines[lo:hi]
        new = new_lines[lo : len(new_lines) - (len(old_lines) - hi)]
        if old:
            indent = old[0][: len(old[0]) - len(old[0].lstrip())]
            if new and new[0].startswith(indent):
                old_text = "\n".join(old)[len(indent) :]
                new_text = "\n".join(new)[len(indent) :]
            else:
                old_text, new_text = "\n".join(old), "\n".join(new)
            if old_text.strip() and buggy.count(old_text) == 1:
                return old_text, new_text
        if lo > first - 1 and (hi >= last or (hi - lo) % 2 == 0):
            lo -= 1
        elif hi < last:
            hi += 1
        else:
            return None


def _symbol_edit_plan(task: Task, rollout: RolloutConfig, tool_format: str) -> list[str] | str:
    """``show_function`` of the issue's callee, ``str_replace`` of the lines the fix changes, ``submit``."""
    found = _callee_function(task)
    if isinstance(found, str):
        return found
    span = edit_span(found.buggy, found.fixed, found.function.first, found.function.last)
    if span is None:
        return NOT_ONE_LINE
    edit = ("str_replace", {"path": found.path, "old": span[0], "new": span[1]})
    return _planned([("show_function", {"name": found.bare}), edit], rollout, tool_format)


def _planned(
    calls: list[tuple[str, dict[str, Any]]], rollout: RolloutConfig, tool_format: str
) -> list[str] | str:
    """``calls`` then ``submit``, written, when they fit in ``rollout.max_turns``."""
    calls = [*calls, ("submit", {})]
    if rollout.max_turns < len(calls):
        return NOT_ONE_LINE
    return _written(calls, rollout.response_prefix, tool_format)


def _written(calls: list[tuple[str, dict[str, Any]]], opener: str, tool_format: str) -> list[str] | str:
    """Each call as the model writes it, less the response prefix the environment writes."""
    turns = []
    for tool, args in calls:
        call = {"name": tool, "arguments": args}
        text = xml_call_text(call) if tool_format == "xml" else hermes_call_text(call)
        if opener and text.startswith(opener):
            text = text[len(opener) :]
        elif opener:
            return NOT_ONE_LINE  # a prefix the demonstration cannot continue
        turns.append(text)
    return turns


async def gold_demonstrations(
    tasks: list[Task],
    rollout: RolloutConfig,
    sandbox: SandboxSpec,
    chat: ChatFormat,
    concurrency: int = 2,
    limit: int | None = None,
) -> tuple[list[Trajectory], dict[str, int]]:
    """Gold demonstrations of ``tasks`` played through the real loop (``concurrency`` at a time, in the
    order given, until ``limit`` are kept), and counts of what was skipped (no one-line fix / not
    resolved when played, a turn longer than ``rollout.max_tokens``; keyed as :func:`gold_plan` says why)."""
    counts = {NOT_ONE_LINE: 0, NOT_IN_ISSUE: 0, OVER_MAX_TOKENS: 0, "did_not_resolve": 0, "kept": 0, "not_needed": 0}
    demos: list[Trajectory] = []
    contexts = ContextFactory(rollout.model_copy(update={"temperature": 1.0}), sandbox, chat)
    settings = RolloutSettings(agent=rollout.agent, max_sandboxes=1, grade_concurrency=1)

    async def play(task: Task, turns: list[str]) -> Trajectory | None:
        engine = ScriptedEngine(turns, chat.tokenizer, default="Done.")
        (result,) = await run_rollouts(task_groups([task], 1, tag="demo"), engine, contexts, settings)
        return result.trajectory if result.resolved else None

    playable: list[tuple[Task, list[str]]] = []
    for task in tasks:
        turns = gold_plan(task, rollout, chat.tool_format)
        if not isinstance(turns, str) and any(
            len(chat.tokenizer(t, add_special_tokens=False)["input_ids"]) >= rollout.max_tokens for t in turns
        ):
            turns = OVER_MAX_TOKENS  # the loop would cut the turn short (>=: the end-of-turn token counts)
        if isinstance(turns, str):
            counts[turns] += 1
        else:
            playable.append((task, turns))
    # A window of ``concurrency`` plays in flight, read in the order given: a slow play holds back
    # no other (the next starts as soon as one ends), and the demonstrations kept are the same.
    window: deque[asyncio.Task[Trajectory | None]] = deque()
    queue = iter(playable)
    consumed = 0
    try:
        while limit is None or len(demos) < limit:
            while len(window) < max(1, concurrency) and (nxt := next(queue, None)) is not None:
                window.append(asyncio.ensure_future(play(*nxt)))
            if not window:
                break
            made = await window.popleft()
            consumed += 1
            if made is None:
                counts["did_not_resolve"] += 1
            else:
                demos.append(made)
                counts["kept"] += 1
    finally:
        for pending in window:  # plays past the limit (or an error): not needed
            pending.cancel()
        await asyncio.gather(*window, return_exceptions=True)
    counts["not_needed"] = len(playable) - consumed
    return demos, counts


def rollout_demonstrations(run_dirs: list[Path]) -> list[Trajectory]:
    """The resolved trajectories (every sequence) of finished runs: rejection sampling."""
    out: list[Trajectory] = []
    fields = set(Trajectory.__dataclass_fields__) - {"parts"}
    for run in run_dirs:
        if not run.is_dir():
            raise ConfigError(f"sft.data: runs:{run} is not a folder; name the run directory of a coderl train or eval run")
        folders = (
            [run]
            if (run / "trajectories").is_dir()
            else sorted(p for p in run.iterdir() if (p / "trajectories").is_dir())
        )
        for folder in folders:
            for row in read_trajectories(folder):
                if row.get("resolved") and any(row.get("response_mask") or []):
                    out.append(Trajectory(**{k: v for k, v in row.items() if k in fields}))
    return out
