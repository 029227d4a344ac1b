"""Each rollout's :class:`~coderl.agents.AgentContext`, built from the ``rollout`` and ``sandbox`` sections.

``coderl eval``, ``coderl rollout``, the trainer (its steps and its validation) and the benchmarks all
build contexts here, so a rollout runs the same way whichever command started it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from coderl.agents import AgentContext, AgentLimits, get_loop
from coderl.agents.baseline import BaselineCache
from coderl.agents.guide import Guide
from coderl.chat import ChatFormat
from coderl.engine.base import Engine
from coderl.engine.params import SamplingParams
from coderl.errors import ConfigError
from coderl.rollout.config import RolloutConfig
from coderl.sandbox import Sandbox, SandboxSpec, create_sandbox
from coderl.types import Task


class ContextFactory:
    """Makes the context of one rollout: sampling and limits from ``rollout``, a fresh sandbox of the
    task's snapshot from ``sandbox``, the engine and group id from the caller."""

    def __init__(self, rollout: RolloutConfig, sandbox: SandboxSpec, chat: ChatFormat) -> None:
        self.rollout = rollout
        self.sandbox = sandbox
        self.chat = chat
        if rollout.tools is not None:
            offered = get_loop(rollout.agent).tool_names
            unknown = [name for name in rollout.tools if name not in offered]
            if unknown:
                raise ConfigError(
                    f"rollout.tools: got {unknown}, not tools of the {rollout.agent} loop; it offers "
                    f"{', '.join(offered) if offered else 'no tools to choose from'} "
                    "(rollout.tools=null offers all of a loop's tools)"
                )
        self.sampling = SamplingParams(
            max_tokens=rollout.max_tokens, temperature=rollout.temperature, top_p=rollout.top_p
        )
        self.limits = AgentLimits(
            rollout.max_turns,
            rollout.max_total_tokens,
            rollout.max_context_tokens,
            rollout.max_tool_output_chars,
            rollout.max_format_errors,
            cut_wrong_tool_names=rollout.cut_wrong_tool_names,
        )

    def with_temperature(self, temperature: float) -> ContextFactory:
        """The same contexts sampling at another temperature (validation is often greedy)."""
        return ContextFactory(
            self.rollout.model_copy(update={"temperature": temperature}), self.sandbox, self.chat
        )

    async def make_sandbox(self, task: Task, *, warm: bool = False) -> Sandbox:
        """A sandbox holding ``task``'s snapshot at its workdir, with the task's environment variables
        (``warm``: see :func:`coderl.sandbox.create_sandbox`)."""
        fields: dict[str, object] = {"workspace": task.repo, "workdir": task.workdir}
        if task.env:
            fields["env"] = {**self.sandbox.env, **task.env}
        return await create_sandbox(self.sandbox.model_copy(update=fields), warm=warm)

    def __call__(
        self,
        engine: Engine,
        group_id: str,
        baselines: BaselineCache,
        defer_close: Callable[[Awaitable[None]], None] | None = None,
        guide: Guide | None = None,
    ) -> AgentContext:
        """``guide``: a guided sample's demonstration (:mod:`coderl.agents.guide`)."""
        r = self.rollout
        return AgentContext(
            engine,
            self.chat,
            self.sampling,
            self.make_sandbox,
            self.limits,
            group_id,
            baselines,
            response_prefix=r.response_prefix,
            remote_command=r.remote_command,
            remote_setup=r.remote_setup,
            remote_timeout_s=r.remote_timeout_s,
            tools=r.tools,
            defer_close=defer_close,
            guide=guide,
        )
