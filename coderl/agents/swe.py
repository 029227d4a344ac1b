"""``swe``: an SWE-agent-style agent-computer interface in a sandbox.

Tools: ``bash``; a file editor (``view`` with line numbers and ranges, ``create``, ``str_replace``
that needs a unique match, ``insert``, ``undo_edit``); ``find_file``; ``search``; symbol tools
(``show_function``: a function's file, lines and source by name; ``replace_function``: its whole
source rewritten, refused when the file would no longer parse; a text written without a docstring
keeps the function's docstring, and a path that is no file stands for the one file that defines the
function, where exactly one does); ``submit``. The patch is the
repository's diff against its starting state (a git baseline made at the start), collected on submit
or when a limit ends the rollout.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import re
import shlex

from coderl.agents import symbols
from coderl.agents.base import AgentContext
from coderl.agents.baseline import GIT_BASELINE, git_patch
from coderl.agents.tool_loop import ToolLoop
from coderl.agents.tools import Tool, params
from coderl.errors import SandboxError
from coderl.sandbox import Sandbox
from coderl.types import Task

SYSTEM = (
    "You fix a bug in the repository in the current directory. Look at the code, make the fix with the "
    "editing tools, optionally run the tests with bash, then call submit. One tool call per turn."
)


class SWELoop(ToolLoop):
    name = "swe"
    system_prompt = SYSTEM
    tool_names = (
        "bash", "view", "create", "str_replace", "insert", "undo_edit", "find_file", "search", "show_function",
        "replace_function", "submit",
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        self.sb: Sandbox | None = None
        self._preparing: asyncio.Task[Sandbox] | None = None
        self.history: dict[str, list[str]] = {}

    async def open(self, task: Task, ctx: AgentContext) -> list[Tool]:
        # The sandbox is made in the background, while the engine samples the first turn (whose
        # prompt does not depend on it); the first tool call waits for it.
        self._preparing = asyncio.ensure_future(self._prepare(task, ctx))
        return [
            Tool("bash", "Run a shell command in the repository.", params(command="string"), self.bash),
            Tool("view", "Show a file with line numbers (optionally lines start..end), or list a folder.",
                 params(["path"], path="string", start="integer", end="integer"), self.view),
            Tool("create", "Create a file with the given text.", params(path="string", text="string"), self.create),
            Tool("str_replace", "Replace old text (must occur exactly once) with new text in a file.",
                 params(path="string", old="string", new="string"), self.str_replace),
            Tool("insert", "Insert text after the given line number (0 = top).",
                 params(path="string", line="integer", text="string"), self.insert),
            Tool("undo_edit", "Undo the last edit of a file.", params(path="string"), self.undo_edit),
            Tool("find_file", "Find files whose name matches a pattern, e.g. *.py.", params(pattern="string"), self.find_file),
            Tool("search", "Search the repository for a text.", params(["text"], text="string", path="string"), self.search),
            Tool("show_function", "Show a function's file, lines and source, by name (name or Class.name).",
                 params(name="string"), self.show_function),
            Tool("replace_function",
                 "Replace a function's whole source in a file with new text (without a docstring, it keeps its docstring).",
                 params(path="string", name="string", text="string"), self.replace_function),
            Tool("submit", "Submit your changes and finish.", params([]), lambda: "Submitted.", True),
        ]  # fmt: skip

    async def _prepare(self, task: Task, ctx: AgentContext) -> Sandbox:
        """A sandbox holding the task's snapshot with its starting state committed to git."""
        seeded = await ctx.baselines.task_with_baseline(task, ctx.make_sandbox)
        sb = await ctx.make_sandbox(seeded or task, warm=True)  # its exec agent starts while it fills
        try:
            if seeded is None:
                r = await sb.exec(GIT_BASELINE, timeout=120)
                if r.exit_code != 0:
                    raise SandboxError(f"could not record the starting state with git: {r.stderr[-300:]}")
        except BaseException:
            await sb.close()
            raise
        return sb

    async def _box(self) -> Sandbox:
        if self.sb is None:
            if self._preparing is None:
                raise SandboxError("the swe loop has no sandbox (open() was not called)")
            self.sb = await self._preparing
        return self.sb

    async def patch(self) -> str:
        if self.sb is None and self._preparing is None:
            return ""
        return await git_patch(await self._box())

    async def close(self) -> None:
        preparing, self._preparing = self._preparing, None
        if self.sb is None and preparing is not None:
            if not preparing.done():
                preparing.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                self.sb = await preparing
        if self.sb is not None:
            await self.sb.close()
            self.sb = None

    # ---------------------------------------------------------------- tools
    async def bash(self, command: str) -> str:
        r = await (await self._box()).exec(command, timeout=60)
        out = (r.stdout + (("\n" if r.stdout else "") + r.stderr if r.stderr else "")).rstrip()
        note = " (timed out after 60 s)" if r.timed_out else ""
        return f"{out}\n[exit code {r.exit_code}{note}]" if out else f"[exit code {r.exit_code}{note}]"

    async def _read(self, path: str) -> str | None:
        box = await self._box()  # a sandbox that failed to start is an error, not a missing file
        try:
            return (await box.read_file(path)).decode("utf-8", "replace")
        except SandboxError:
            return None

    async def view(self, path: str, start: int = 1, end: int = 0) -> str:
        text = await self._read(path)
        if text is None:
            r = await (await self._box()).exec(f"ls -p {shlex.quote(path)}", timeout=30)
            return r.stdout if r.exit_code == 0 else f"Error: no file or folder {path!r}."
        lines = text.splitlines()
        end = end if end and end >= start else len(lines)
        start = max(1, start)
        shown = "\n".join(f"{i:5d}  {lines[i - 1]}" for i in range(start, min(end, len(lines)) + 1))
        return shown or f"(no lines {start}..{end}; the file has {len(lines)})"

    async def _write(self, path: str, new: str, old: str | None) -> None:
        self.history.setdefault(path, []).append(old if old is not None else "\0absent")
        await (await self._box()).write_file(path, new)

    async def create(self, path: str, text: str) -> str:
        await self._write(path, text, await self._read(path))
        return f"Created {path}."

    async def str_replace(self, path: str, old: str, new: str) -> str:
        text = await self._read(path)
        if text is None:
            return f"Error: no file {path!r}."
        count = text.count(old)
        if count != 1:
            return f"Error: the old text occurs {count} times in {path}; it must occur exactly once (add context)."
        await self._write(path, text.replace(old, new, 1), text)
        line = text[: text.index(old)].count("\n") + 1
        return f"Edited {path} at line {line}."

    async def insert(self, path: str, line: int, text: str) -> str:
        current = await self._read(path)
        if current is None:
            return f"Error: no file {path!r}."
        lines = current.splitlines(keepends=True)
        if not 0 <= line <= len(lines):
            return f"Error: line must be between 0 and {len(lines)}."
        block = text if text.endswith("\n") else text + "\n"
        await self._write(path, "".join([*lines[:line], block, *lines[line:]]), current)
        return f"Inserted after line {line} of {path}."

    async def undo_edit(self, path: str) -> str:
        stack = self.history.get(path)
        if not stack:
            return f"Error: no edit of {path} to undo."
        previous = stack.pop()
        if previous == "\0absent":
            await (await self._box()).exec(f"rm -f {shlex.quote(path)}")
        else:
            await (await self._box()).write_file(path, previous)
        return f"Undid the last edit of {path}."

    async def find_file(self, pattern: str) -> str:
        found = await self._lines(["find", ".", "-name", pattern, "-not", "-path", "./.git/*"], 50)
        return "\n".join(found) or f"No files match {pattern!r}."

    async def show_function(self, name: str) -> str:
        if _bare_name(name) is None:
            return f"Error: {name!r} is not a function name (a name such as parse, Class.parse or module.parse)."
        shown: list[str] = []
        for path in (await self._files_defining(name))[:20]:
            text = await self._read(path)
            try:
                found = symbols.named(text, name.strip()) if text is not None else []
            except (SyntaxError, ValueError):
                continue
            shown += [f"{path}, lines {f.first}-{f.last}:\n{f.text(text or '')}" for f in found]
        if not shown:
            return f"No function named {name!r} in the repository's .py files."
        more = f"\n[{len(shown) - 3} more not shown]" if len(shown) > 3 else ""
        return "\n".join(shown[:3]).rstrip("\n") + more

    async def _files_defining(self, name: str) -> list[str]:
        """The .py files (repository-relative, sorted) with a ``def`` of ``name``'s last part (none for
        a name that is not one)."""
        bare = _bare_name(name)
        if bare is None:
            return []
        argv = ["grep", "-rlE", "--include=*.py", "--exclude-dir=.git", "--", "def " + bare + r"\b", "."]
        return sorted(path.removeprefix("./") for path in await self._lines(argv, None))

    async def replace_function(self, path: str, name: str, text: str) -> str:
        current = await self._read(path)
        moved = ""
        if current is None:  # the one file that defines it, where exactly one does; else where it is
            defining = await self._files_defining(name)
            if len(defining) != 1:
                hint = f"; a function {_bare_name(name)!r} is defined in {', '.join(defining[:3])}" if defining else ""
                return f"Error: no file {path!r}{hint}."
            moved, path = f"there is no file {path!r}", defining[0]
            current = await self._read(path)
            if current is None:
                return f"Error: no file {path!r}."
        try:
            found = symbols.named(current, name.strip())
        except (SyntaxError, ValueError) as exc:
            return f"Error: {path} does not parse ({exc}); edit it with str_replace."
        if len(found) != 1:
            where = ", ".join(f"{f.qualname} at line {f.first}" for f in found)
            return (
                f"Error: {len(found)} functions named {name!r} in {path}"
                + (f" ({where}); name one as Class.name." if found else ".")
            )
        kept = symbols.keep_docstring(found[0].text(current), text)
        new = symbols.replace_function(current, found[0], kept or text)
        try:
            ast.parse(new)
        except SyntaxError as exc:
            return f"Error: with this text {path} would not parse ({exc.msg}, line {exc.lineno}); the file is unchanged."
        if new == current:
            return f"No change: the text is {found[0].qualname} as it stands in {path}."
        await self._write(path, new, current)
        notes = "; ".join(note for note in (moved, "its docstring kept" if kept else "") if note)
        return f"Replaced {found[0].qualname} in {path}" + (f" ({notes})." if notes else ".")

    async def search(self, text: str, path: str = ".") -> str:
        found = await self._lines(["grep", "-rn", "--exclude-dir=.git", "-F", "--", text, path], 50)
        return "\n".join(found) or f"No matches for {text!r}."

    async def _lines(self, argv: list[str], limit: int | None) -> list[str]:
        """The first ``limit`` lines a command writes (all with None). The command runs as an argument
        list, not through ``bash -c ... | head``: three fewer processes to start per call."""
        r = await (await self._box()).exec(argv, timeout=30)
        return [line for line in r.stdout.split("\n") if line][:limit]  # newlines only, as head counts


def _bare_name(name: str) -> str | None:
    """The last part of a function's name (``parse`` of ``pkg.Parser.parse``); None where that is no
    Python identifier."""
    bare = name.strip().rsplit(".", 1)[-1]
    return bare if re.fullmatch(r"[A-Za-z_]\w*", bare) else None
