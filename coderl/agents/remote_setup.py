"""The ``remote`` loop's set-up: a host command run once per process before the first rollout.

A packaged recipe uses it to install its agent program where it is missing (e.g. Codex CLI from npm).
It runs on the host, not in a sandbox, with the host's environment; the outcome is kept per command,
so a failed set-up fails every later rollout at once with the same message instead of running again.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading

from coderl.errors import AgentError

_lock = threading.Lock()
_outcomes: dict[str, str | None] = {}
"""command -> None (it succeeded) or the error it ended with."""


async def ensure_setup(command: str, timeout_s: float = 900.0) -> None:
    """Run ``command`` with bash unless this process already has; raise :class:`AgentError` with its
    exit status and output tail if it failed (now or before)."""
    if not command.strip():
        return
    error = await asyncio.to_thread(_run_once, command, timeout_s)
    if error is not None:
        raise AgentError(error)


def _run_once(command: str, timeout_s: float) -> str | None:
    with _lock:  # rollouts start together: one runs the set-up, the others wait for its outcome
        if command in _outcomes:
            return _outcomes[command]
        try:
            r = subprocess.run(
                ["bash", "-c", command], capture_output=True, text=True, timeout=timeout_s,
                stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
            error = None
            if r.returncode != 0:
                tail = (r.stderr.strip() or r.stdout.strip())[-800:]
                error = f"rollout.remote_setup exited {r.returncode}: {command!r}\n{tail}"
        except subprocess.TimeoutExpired:
            error = f"rollout.remote_setup ran past {timeout_s:g} s: {command!r}"
        except OSError as exc:
            error = f"rollout.remote_setup could not start: {exc}"
        _outcomes[command] = error
        return error
