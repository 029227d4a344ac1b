"""``remote``: train an agent program coderl does not control, through the recording proxy.

For each rollout: a recording proxy (:mod:`coderl.proxy`) is started on loopback in front of the
rollout's engine, with one session; the task's snapshot (starting state committed to git) goes into a
sandbox; ``rollout.remote_command`` runs there with ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` /
``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY`` pointing at the session, the task text in
``CODERL_TASK`` (and the file ``$CODERL_TASK_FILE``), the served model name in ``CODERL_MODEL``, and the
rollout's per-call output cap and context (``CODERL_MAX_TOKENS`` = ``rollout.max_tokens``,
``CODERL_CONTEXT_TOKENS`` = ``rollout.max_context_tokens``) for agents that size their requests by them.
The proxy caps every call at ``rollout.max_tokens``, whatever the agent asks. ``rollout.remote_setup``
runs once per process on the host first (:mod:`coderl.agents.remote_setup`).
When the program exits, the session's calls are merged into trajectories (token-exact: the proxy
records the ids the engine sampled), the patch is the repository's diff, and the trajectory with the
most model tokens is returned with the others - a sub-agent's, a compacted history's - as its
``parts``: every sequence is trained, with the rollout's reward.

The program reaches the proxy over the host's loopback, so the sandbox needs ``sandbox.network=true``
(or ``sandbox.backend=process`` for a host process without isolation).
"""

from __future__ import annotations

import contextlib
import shlex
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from coderl.agents.base import AgentContext, AgentLoop
from coderl.agents.baseline import GIT_BASELINE, git_patch
from coderl.agents.remote_setup import ensure_setup
from coderl.engine.base import BorrowedEngine, Engine
from coderl.errors import AgentError, SandboxError
from coderl.loopback import serve_in_loop
from coderl.sandbox import Sandbox
from coderl.types import Task, Trajectory

TASK_FILE = ".coderl_task.md"
"""Where the task text is written in the workspace (removed before the patch is taken)."""


class _Borrowed(BorrowedEngine):
    """The rollout's engine, lent to the proxy: its app must not start, stop or update it."""

    async def update_weights(self, weights: Mapping[str, Any] | str | Path) -> int:
        raise AgentError("the remote agent loop's proxy does not update weights")


@contextlib.asynccontextmanager
async def local_proxy(engine: Engine, ctx: AgentContext, folder: Path) -> AsyncIterator[tuple[Any, str]]:
    """A recording proxy on 127.0.0.1 (a free port) for the length of the block; yields its service
    and base URL."""
    from coderl.proxy.app import create_app
    from coderl.proxy.config import ProxyConfig

    # rollout.max_tokens bounds every call: those that set no cap (Codex CLI) and those that ask for more
    # than it (Claude Code asks for 32,000)
    cap = ctx.sampling.max_tokens
    cfg = ProxyConfig(
        port=0, db=folder / "record.sqlite", admin_token="unused-" + folder.name,
        default_max_tokens=cap, max_tokens_cap=cap,
    )  # fmt: skip
    app = create_app(cfg, _Borrowed(engine), ctx.chat, model_name=ctx.remote_model)
    async with serve_in_loop(app, before_stop=app.state.service.stop_calls) as url:
        yield app.state.service, url


class RemoteLoop(AgentLoop):
    name = "remote"

    async def run(self, task: Task, ctx: AgentContext) -> Trajectory:
        started = time.perf_counter()
        empty = Trajectory(task_id=task.id, group_id=ctx.group_id, prompt_ids=[])
        sb: Sandbox | None = None
        try:
            if not ctx.remote_command.strip():
                raise AgentError(
                    "rollout.agent=remote needs rollout.remote_command, the agent program to run "
                    "(e.g. coderl/configs/remote_mini_swe_agent.yaml)"
                )
            await ensure_setup(ctx.remote_setup)
            with tempfile.TemporaryDirectory(prefix="coderl-remote-") as tmp:
                async with local_proxy(ctx.engine, ctx, Path(tmp)) as (service, url):
                    row, secret = service.create_session({"task_id": task.id, "group_id": ctx.group_id})
                    sb = await self._prepare(task, ctx)
                    await sb.write_file(TASK_FILE, task.instruction.encode())
                    root = f"{url}/s/{row.id}"
                    env = {
                        "OPENAI_BASE_URL": f"{root}/v1", "OPENAI_API_BASE": f"{root}/v1", "OPENAI_API_KEY": secret,
                        "ANTHROPIC_BASE_URL": root, "ANTHROPIC_API_KEY": secret,
                        "CODERL_TASK": task.instruction, "CODERL_TASK_FILE": f"{sb.spec.workdir}/{TASK_FILE}",
                        "CODERL_MODEL": ctx.remote_model,
                        "CODERL_MAX_TOKENS": str(ctx.sampling.max_tokens),
                        "CODERL_CONTEXT_TOKENS": str(ctx.limits.max_context_tokens),
                    }  # fmt: skip
                    t0 = time.perf_counter()
                    result = await sb.exec(ctx.remote_command, timeout=ctx.remote_timeout_s, env=env)
                    agent_s = time.perf_counter() - t0
                    await sb.exec(f"rm -f {shlex.quote(TASK_FILE)}", timeout=30)
                    patch = await git_patch(sb)
                    service.complete(row.id)
                    await service.release([row.id])
                    record = service.record(row.id)
            traj = _trajectories(record, task, ctx.group_id)
            if result.timed_out:
                traj.exit_status, traj.error = (
                    "error",
                    f"agent command timed out after {ctx.remote_timeout_s:g} s",
                )
            elif result.exit_code != 0:
                tail = (result.stderr or result.stdout)[-500:]
                traj.exit_status, traj.error = "error", f"agent command exited {result.exit_code}: {tail}"
                calls = record["calls"]
                if record["stats"].get("context_refusals"):
                    traj.exit_status = "context_limit"  # the agent's prompt outgrew the model's context
                    traj.error = (
                        f"agent command exited {result.exit_code} after the proxy refused a prompt longer than "
                        f"the model's context: {tail}"
                    )
                elif calls and calls[-1].get("finish_reason") == "length":
                    # e.g. the Codex CLI ends its run when a reply comes back incomplete (max_output_tokens)
                    traj.exit_status = "token_limit"
                    traj.error = (
                        f"agent command exited {result.exit_code} after the model's last reply was cut at its "
                        f"output cap (rollout.max_tokens={ctx.sampling.max_tokens} unless the agent set one): {tail}"
                    )
            else:
                traj.exit_status = "submitted"
            traj.patch = patch
            for part in traj.parts:
                part.exit_status, part.error, part.patch = traj.exit_status, traj.error, patch
            stats = record["stats"]
            traj.metrics.update(
                {
                    "turns": float(traj.num_turns),
                    "prompt_tokens": float(len(traj.prompt_ids)),
                    "model_tokens": float(sum(traj.response_mask)),
                    "env_tokens": float(len(traj.response_mask) - sum(traj.response_mask)),
                    "format_errors": 0.0,
                    "proxy_calls": float(len(record["calls"])),
                    "proxy_trajectories": float(len(record["trajectories"])),
                    "proxy_splits": float(stats.get("splits", 0)),
                    "engine_s": sum(float(c.get("timing", {}).get("engine_s", 0.0)) for c in record["calls"]),
                    "sandbox_s": agent_s,
                    "wall_s": time.perf_counter() - started,
                    "agent_exit_code": float(result.exit_code),
                }
            )  # fmt: skip
            for reason, n in stats.get("split_reasons", {}).items():
                traj.metrics[f"proxy_splits/{reason}"] = float(n)
            for api, n in Counter(str(c.get("api", "")) for c in record["calls"]).items():
                traj.metrics[f"proxy_api/{api}"] = float(n)  # which endpoints the program used
            return traj
        except Exception as exc:  # a failed rollout is data, never an exception for the runner
            empty.exit_status, empty.error = "error", f"{type(exc).__name__}: {exc}"
            return empty
        finally:
            if sb is not None:
                await sb.close()

    async def _prepare(self, task: Task, ctx: AgentContext) -> Sandbox:
        seeded = await ctx.baselines.task_with_baseline(task, ctx.make_sandbox)
        sb = await ctx.make_sandbox(seeded or task)
        if seeded is None:
            r = await sb.exec(GIT_BASELINE, timeout=120)
            if r.exit_code != 0:
                await sb.close()
                raise SandboxError(f"could not record the starting state with git: {r.stderr[-300:]}")
        return sb


def _trajectories(record: dict[str, Any], task: Task, group_id: str) -> Trajectory:
    """The session's trajectory with the most model tokens, the others as its ``parts`` (in call order)."""
    merged = record["trajectories"]
    if not merged:
        return Trajectory(task_id=task.id, group_id=group_id, prompt_ids=[])
    main = max(range(len(merged)), key=lambda i: sum(merged[i]["response_mask"]))
    trajs = [_trajectory(t, task, group_id) for t in merged]
    out = trajs[main]
    out.parts = [t for i, t in enumerate(trajs) if i != main and any(t.response_mask)]
    return out


def _trajectory(row: dict[str, Any], task: Task, group_id: str) -> Trajectory:
    fields = {k: row[k] for k in Trajectory.__dataclass_fields__ if k in row and k != "parts"}
    traj = Trajectory(**fields)
    traj.task_id, traj.group_id = task.id, group_id
    traj.metrics = dict(row.get("metrics") or {})
    return traj
