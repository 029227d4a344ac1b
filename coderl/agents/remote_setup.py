"""The ``remote`` loop's set-up: a host command run once per process before the first rollout.

A packaged recipe uses it to install its agent program where it is missing (e.g. Codex CLI from npm).
It runs on the host, not in a sandbox, with the host's environment, in a process group of its own (a
timeout kills the whole group: npm's children too). Rollouts that start together wait for the one
run; its success is kept for the process, and so is a failure (every later rollout fails at once
with the same message instead of installing again), but a timeout is not: the next rollout tries
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from coderl.errors import AgentError

_outcomes: dict[str, str | None] = {}
"""command -> None (it succeeded) or the error it ended with."""
_running: dict[tuple[int, str], asyncio.Task[str | None]] = {}
"""(event loop, command) -> the run under way, for rollouts that start while it runs."""


async def ensure_setup(command: str, timeout_s: float = 900.0) -> None:
    """Run ``command`` with bash unless this process already has; raise :class:`AgentError` with its
    exit status and output tail if it failed (now or before)."""
    if not command.strip():
        return
    if command in _outcomes:
        error = _outcomes[command]
    else:
        key = (id(asyncio.get_running_loop()), command)
        task = _running.get(key)
        if task is None:
            task = _running[key] = asyncio.create_task(_run(command, timeout_s))
            task.add_done_callback(lambda _: _running.pop(key, None))
        error = await asyncio.shield(task)  # one rollout cancelled does not stop the set-up others wait for
    if error is not None:
        raise AgentError(error)


async def _run(command: str, timeout_s: float) -> str | None:
    try:
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        _outcomes[command] = f"rollout.remote_setup could not start: {exc}"
        return _outcomes[command]
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except (TimeoutError, asyncio.CancelledError) as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group: npm's children too
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return f"rollout.remote_setup ran past {timeout_s:g} s: {command!r}"  # not kept: the next one tries again
    error = None
    if proc.returncode != 0:
        tail = (err.decode(errors="replace").strip() or out.decode(errors="replace").strip())[-800:]
        error = f"rollout.remote_setup exited {proc.returncode}: {command!r}\n{tail}"
    _outcomes[command] = error
    return error
