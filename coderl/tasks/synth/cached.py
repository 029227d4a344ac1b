"""``pypi:NAME[==VERSION]?n=N&seed=S[&bug_in=WHERE&max_lines=L]`` as a task source: tasks synthesised at run time from a public
library's sdist, made once per machine and cached by what made them.

Owns: the cache key and the one-time synthesis (in a thread of its own, so a caller inside an event
loop can load tasks too). It does not choose libraries or mutate code (:mod:`coderl.tasks.synth.build`).
A held-out set from a repository no training task comes from is the use: ``train.val_also=pypi:...``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path

from coderl.errors import TaskError
from coderl.types import Task

RECIPE = "synth-v3"
"""Bumped when what a synthesis makes changes (the cache then makes it again)."""


def synthesized_tasks(
    spec: str, n: int, seed: int, timeout_s: float = 120.0, bug_in: str | None = None, max_lines: int | None = None
) -> list[Task]:
    """The tasks of ``coderl tasks synth pypi:SPEC --n n --seed seed [--bug-in bug_in] [--max-lines
    max_lines]``, from the cache or made now."""
    from coderl.tasks.native import load_native_folder
    from coderl.tasks.snapshot import materialised
    from coderl.tasks.synth.source import pypi_spec

    pypi_spec(f"pypi:{spec}")  # a bad name is refused before anything says it is being made
    if n < 1:
        raise TaskError(f"pypi:{spec}: n={n}; ask for at least 1 task")
    made_by: list[object] = [RECIPE, spec, n, seed, timeout_s]
    if bug_in or max_lines:  # the keys of caches made before these existed stay as they were
        made_by += [bug_in, max_lines]
    key = hashlib.sha256(json.dumps(made_by).encode()).hexdigest()[:16]

    def build(folder: Path) -> None:
        from rich.console import Console

        from coderl.progress import progress_bars
        from coderl.tasks.synth.build import SynthOptions, progress_callback, synthesize

        failure: list[BaseException] = []
        console = Console(stderr=True)
        where = {"callee": " with the bug in the function the issue calls", "helper": " with the bug in a helper"}
        where_text = where.get(bug_in or "", "") + (f" in functions of at most {max_lines} lines" if max_lines else "")
        console.print(
            f"pypi:{spec}: synthesising {n} tasks{where_text} (seed {seed}) from its sdist — once on this machine, then "
            "cached — its suite run twice first, then mutants"
        )

        def work(on_progress: Callable[..., None]) -> None:
            try:
                options = SynthOptions(n=n, seed=seed, timeout_s=timeout_s, bug_in=bug_in, max_lines=max_lines)
                asyncio.run(synthesize(f"pypi:{spec}", folder, options, on_progress=on_progress))
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)

        with progress_bars(console, name=f"pypi:{spec}") as progress:
            thread = threading.Thread(
                target=work, args=(progress_callback(progress, n),), name="coderl-synth", daemon=True
            )
            thread.start()
            thread.join()
        if failure:
            raise failure[0]

    folder = materialised(f"synth-{key}", build)
    tasks = load_native_folder(folder / "tasks")
    if not tasks:
        raise TaskError(f"pypi:{spec}: synthesis kept no task (see {folder})")
    return tasks
