"""Unified diffs: split by file, spot test files, and drop changes to them before grading."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_DIFF_START = re.compile(r"^diff --git a/(.+?) b/(.+)$", re.M)
_TEST_FILE = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*\.py$|_test\.py$|(^|/)conftest\.py$")


@dataclass
class FileDiff:
    path: str
    text: str


def split_patch(patch: str) -> list[FileDiff]:
    """Per-file pieces of a git-style diff (``diff --git`` headers); plain ``---/+++`` diffs are
    split on their ``--- `` lines."""
    if not patch.strip():
        return []
    starts = [m.start() for m in _DIFF_START.finditer(patch)]
    if not starts:
        starts = [m.start() for m in re.finditer(r"^--- ", patch, re.M)]
    pieces = []
    for i, start in enumerate(starts):
        text = patch[start : starts[i + 1] if i + 1 < len(starts) else len(patch)]
        pieces.append(FileDiff(_path_of(text), text))
    return pieces


def _path_of(text: str) -> str:
    m = _DIFF_START.match(text)
    if m:
        return m.group(2)
    old = ""
    for line in text.splitlines():
        if line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
            return re.sub(r"^b/", "", line[4:].split("\t")[0].strip())
        if line.startswith("--- ") and not line.startswith("--- /dev/null"):
            old = re.sub(r"^a/", "", line[4:].split("\t")[0].strip())
    return old


def is_test_file(path: str, protected: set[str] | frozenset[str] = frozenset()) -> bool:
    """Whether a repository path is a test file (by convention, or named by the task)."""
    return path in protected or bool(_TEST_FILE.search(path))


def without_test_changes(
    patch: str, protected: set[str] | frozenset[str] = frozenset()
) -> tuple[str, list[str]]:
    """The patch minus every file diff touching a test file; also the paths dropped."""
    kept: list[FileDiff] = []
    dropped: list[FileDiff] = []
    for piece in split_patch(patch):
        (dropped if is_test_file(piece.path, protected) else kept).append(piece)
    return "".join(p.text for p in kept), [p.path for p in dropped]


def apply_file_diff(text: str, file_diff: str) -> str:
    """``text`` (one file's content) with a one-file unified diff applied, every context and removed
    line checked; ValueError naming the hunk when the diff does not fit."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    at = 0  # lines of ``lines`` already copied or consumed
    rows = file_diff.splitlines(keepends=True)
    i = 0
    while i < len(rows):
        header = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", rows[i])
        i += 1
        if header is None:
            continue
        start = int(header.group(1)) - (0 if header.group(2) == "0" else 1)  # 0-based first old line
        if start < at:
            raise ValueError(f"hunk {header.group(0)!r} overlaps the one before it")
        out += lines[at:start]
        at = start
        while i < len(rows) and not rows[i].startswith("@@"):
            row = rows[i]
            i += 1
            if row.startswith("\\"):  # "\ No newline at end of file"
                continue
            body = row[1:]
            if row[:1] in (" ", "-"):
                if at >= len(lines) or lines[at].rstrip("\r\n") != body.rstrip("\r\n"):
                    raise ValueError(f"hunk {header.group(0)!r} does not match line {at + 1}: {body.rstrip()!r}")
                if row[0] == " ":
                    out.append(lines[at])
                at += 1
            elif row.startswith("+"):
                out.append(body if body.endswith("\n") else body + "\n")
    return "".join(out + lines[at:])


def _changed_lines(file_diff: str) -> tuple[set[str], set[str]]:
    """(lines removed, lines added) by a one-file diff, trailing blanks stripped."""
    removed: set[str] = set()
    added: set[str] = set()
    for row in file_diff.splitlines():
        if row.startswith(("---", "+++")):
            continue
        if row.startswith("-"):
            removed.add(row[1:].rstrip())
        elif row.startswith("+"):
            added.add(row[1:].rstrip())
    return removed, added


def change_overlap(patch: str, gold: str) -> float:
    """How closely ``patch`` makes ``gold``'s change and nothing else, in [0, 1]: the F1 score of the
    two patches' changed lines (each a file, a sign, and the line with trailing blanks stripped; blank
    lines left out; counted with multiplicity). 1 for the same change; 0 when they share no changed
    line, or either is empty. Changing the right line another way scores about 0.5; the fix with other
    edits beside it, less the more edits there are."""
    mine, theirs = _change_counts(patch), _change_counts(gold)
    common = sum((mine & theirs).values())
    if not common:
        return 0.0
    precision, recall = common / sum(mine.values()), common / sum(theirs.values())
    return 2 * precision * recall / (precision + recall)


def rewrites_only_gold_lines(patch: str, gold: str) -> bool:
    """Whether every line ``patch`` removes (rewrites or deletes) is one ``gold`` removes too: the
    change stays on the bug's lines, whatever it writes there. A patch that removes nothing passes."""
    mine = {(path, line) for path, sign, line in _change_counts(patch) if sign == "-"}
    return mine <= {(path, line) for path, sign, line in _change_counts(gold) if sign == "-"}


def _change_counts(patch: str) -> Counter[tuple[str, str, str]]:
    counts: Counter[tuple[str, str, str]] = Counter()
    for piece in split_patch(patch):
        for row in piece.text.splitlines():
            if row.startswith(("---", "+++")) or not row.startswith(("-", "+")):
                continue
            line = row[1:].rstrip()
            if line.strip():
                counts[(piece.path, row[0], line)] += 1
    return counts


def holds_change(patch: str, gold: str) -> bool:
    """Whether ``patch`` makes every change of ``gold``: in each file the gold patch touches, every line
    it removes is removed and every line it adds is added (other changes may come with them). False for
    an empty gold patch."""
    mine = {piece.path: _changed_lines(piece.text) for piece in split_patch(patch)}
    pieces = split_patch(gold)
    for piece in pieces:
        removed, added = _changed_lines(piece.text)
        got_removed, got_added = mine.get(piece.path, (set(), set()))
        if not (removed <= got_removed and added <= got_added):
            return False
    return bool(pieces)
