"""``load_tasks(source)``: one entry point for every task format.

Sources:
  bundled[:SELECTOR]            the bundled suite; SELECTOR = tiers or ids, comma-separated (bundled:warmup,easy)
  swebench:FILE?repos=DIR       SWE-bench JSON / JSONL / Parquet, snapshots from DIR (&test_command=...)
  harbor:DIR                    a Harbor task folder or a folder of them
  native:DIR                    a native task folder or a folder of them
  dataset:FILE.parquet          a dataset written by 'coderl tasks convert'
  pypi:NAME[==VERSION]?n=N      tasks synthesised at run time from a PyPI project's sdist (coderl tasks
                                synth; cached once made; &seed=S, default n=24, seed 0)
  PATH                          guessed from what is there

Synthesised tasks (``coderl tasks synth``, the bundled ``synth`` tier) can be filtered by where their
bug lies: ``?bug_in=callee`` keeps those whose bug is in the function the issue text calls first,
``?bug_in=helper`` the others (``bundled:synth?bug_in=callee``). On a ``pypi:`` source the filter
goes into the synthesis itself: ``pypi:toolz==0.12.1?n=24&bug_in=callee`` is 24 tasks whose bug lies
in the function the issue calls first (mutants elsewhere are dropped, not counted in ``n``), and
``&max_lines=L`` mutates only functions of at most L lines.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs

from coderl.errors import TaskError
from coderl.tasks.synth.issue import BUG_IN
from coderl.types import Task

KINDS = ("bundled", "swebench", "harbor", "native", "dataset", "pypi")
QUERY_KEYS = {"swebench": ("repos", "test_command", "bug_in"), "pypi": ("n", "seed", "bug_in", "max_lines")}
"""The ``?key=value`` parameters each kind reads (every other kind: ``bug_in`` only)."""


def load_tasks(source: str = "bundled") -> list[Task]:
    kind, _, rest = source.partition(":")
    if kind not in KINDS:
        kind, rest = _guess(Path(source)), source
    path_text, _, query = rest.partition("?")
    params = {k: v[-1] for k, v in parse_qs(query).items()}
    unknown = sorted(set(params) - set(QUERY_KEYS.get(kind, ("bug_in",))))
    if unknown:
        raise TaskError(
            f"{source}: unknown parameter(s) {unknown}; {kind} sources take {', '.join(QUERY_KEYS.get(kind, ('bug_in',)))}"
        )
    if kind == "bundled":
        from coderl.tasks.native import load_bundled

        tasks = load_bundled(path_text)
    elif kind == "swebench":
        from coderl.tasks.swebench import load_swebench

        repos = Path(params["repos"]) if "repos" in params else None
        tasks = load_swebench(Path(path_text), repos, params.get("test_command"))
    elif kind == "harbor":
        from coderl.tasks.harbor import load_harbor

        tasks = load_harbor(_existing_dir(path_text))
    elif kind == "native":
        from coderl.tasks.native import load_native_folder

        tasks = load_native_folder(_existing_dir(path_text))
    elif kind == "pypi":
        from coderl.tasks.synth.cached import synthesized_tasks

        where = params.get("bug_in")
        if where is not None and where not in BUG_IN:
            raise TaskError(f"{source}: bug_in={where!r}; use one of {', '.join(BUG_IN)}")
        lines = _int_param(params, "max_lines", 0, source) if "max_lines" in params else None
        if lines is not None and lines < 1:
            raise TaskError(f"{source}: max_lines={lines}; give a number of lines, 1 or more")
        tasks = synthesized_tasks(
            path_text, _int_param(params, "n", 24, source), _int_param(params, "seed", 0, source),
            bug_in=where, max_lines=lines,
        )  # fmt: skip
    else:
        from coderl.tasks.dataset import read_parquet

        tasks = read_parquet(Path(path_text))
    if "bug_in" in params:
        tasks = _where_bug_is(tasks, params["bug_in"], source)
    ids = [t.id for t in tasks]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise TaskError(f"{source}: duplicate task ids {dupes[:5]}")
    return tasks


def _int_param(params: dict[str, str], key: str, default: int, source: str) -> int:
    try:
        return int(params.get(key, default))
    except ValueError:
        raise TaskError(f"{source}: {key}={params[key]!r} is not a whole number") from None


def _where_bug_is(tasks: list[Task], where: str, source: str) -> list[Task]:
    """The synthesised tasks whose ``metadata.synth.bug_in`` is ``where``."""
    if where not in BUG_IN:
        raise TaskError(f"{source}: bug_in={where!r}; use one of {', '.join(BUG_IN)}")
    marks = {t.id: _synth_mark(t) for t in tasks}
    unmarked = [i for i, mark in marks.items() if not mark]
    if unmarked:
        raise TaskError(
            f"{source}: bug_in filters synthesised tasks (metadata.synth.bug_in, written by coderl tasks synth); "
            f"{len(unmarked)} task(s) have none, e.g. {unmarked[:3]}"
        )
    return [t for t in tasks if marks[t.id] == where]


def _synth_mark(task: Task) -> str:
    synth = (task.metadata or {}).get("synth")
    return str(synth.get("bug_in", "")) if isinstance(synth, dict) else ""


def _existing_dir(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise TaskError(f"task folder {text!r} does not exist")
    return path


def _guess(path: Path) -> str:
    if path.suffix in (".json", ".jsonl"):
        return "swebench"
    if path.suffix == ".parquet":
        return "dataset"
    if path.is_dir():
        if (path / "instruction.md").is_file() or any(
            (p / "instruction.md").is_file() for p in path.iterdir() if p.is_dir()
        ):
            return "harbor"
        return "native"
    raise TaskError(
        f"task source {str(path)!r} is not a known kind or an existing path; use one of "
        "bundled[:tiers], swebench:FILE?repos=DIR, harbor:DIR, native:DIR, dataset:FILE.parquet, pypi:NAME==VERSION?n=N"
    )
