"""The agent-loop contract: ``await loop.run(task, ctx) -> Trajectory``.

A loop turns a task into one token-exact trajectory. Everything it needs arrives in ``ctx``: the
engine, the chat layer, sampling parameters, limits and a sandbox factory. Loops are registered by
name in :data:`LOOPS`; a user's own loop plugs in by import path (``my_pkg.my_mod:MyLoop``).
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from coderl.agents.baseline import BaselineCache, MakeSandbox
from coderl.agents.guide import Guide
from coderl.chat import ChatFormat
from coderl.engine.base import Engine
from coderl.engine.params import SamplingParams
from coderl.errors import AgentError
from coderl.types import Task, Trajectory


@dataclass
class AgentLimits:
    max_turns: int = 30
    """Most model calls in one trajectory (exit status step_limit)."""
    max_total_tokens: int = 16384
    """Most response tokens, model and environment together (exit status token_limit)."""
    max_context_tokens: int = 8192
    """Longest prompt sent to the engine (exit status context_limit)."""
    max_tool_output_chars: int = 4000
    """Tool output beyond this is cut, with a note saying so."""
    max_format_errors: int | None = None
    """Format errors after which a tool loop ends the trajectory (exit status format_limit); None = no limit."""
    cut_wrong_tool_names: bool = True
    """Where a reply's first tool name is the model's to write (the response prefix ends with
    ``<function=``) and one more format error ends the trajectory, the engine stops the reply at the
    first token after which no offered tool's name can follow (``SamplingParams.expect_name``)."""


@dataclass
class AgentContext:
    engine: Engine
    chat: ChatFormat
    sampling: SamplingParams
    make_sandbox: MakeSandbox
    limits: AgentLimits = field(default_factory=AgentLimits)
    group_id: str = ""
    baselines: BaselineCache = field(default_factory=BaselineCache)
    """Task snapshots with their starting state committed (share one across a run's contexts)."""
    response_prefix: str = ""
    """Text the environment writes at the start of every assistant turn of a tool loop (mask 0, not
    trained), e.g. ``<tool_call>\n`` to steer a small model into the tool-call format."""
    remote_command: str = ""
    """The ``remote`` loop's agent program (a shell command run in the task's sandbox)."""
    remote_setup: str = ""
    """The ``remote`` loop's set-up, a host command run once per process (:mod:`coderl.agents.remote_setup`)."""
    remote_timeout_s: float = 1800.0
    """Wall-clock limit of the ``remote`` loop's agent program."""
    remote_model: str = "coderl"
    """Model name the ``remote`` loop's proxy serves (``$CODERL_MODEL`` for the agent)."""
    tools: list[str] | None = None
    """The tools a tool-using loop offers, by name (None = all of its tools): a smaller set is a shorter
    prompt and fewer ways to go wrong for a small model."""
    guide: Guide | None = None
    """A demonstration whose first tokens the environment writes in the model's place (mask 0): a
    guided sample (:mod:`coderl.agents.guide`); tool loops honour it, other loops ignore it."""
    defer_close: Callable[[Awaitable[None]], None] | None = None
    """Where a loop hands the closing of what it opened (its sandbox) once its trajectory is complete,
    instead of awaiting it (see :mod:`coderl.rollout.teardown`); None: the loop awaits it."""


class AgentLoop(abc.ABC):
    name = "agent"
    tool_names: tuple[str, ...] = ()
    """The tools a tool-using loop can offer (``rollout.tools`` picks among them); empty for the others."""

    @abc.abstractmethod
    async def run(self, task: Task, ctx: AgentContext) -> Trajectory:
        """Roll out ``task``; failures of the model are data on the trajectory, never exceptions."""


LOOPS: dict[str, str] = {
    "single_turn": "coderl.agents.single_turn:SingleTurnLoop",
    "tool": "coderl.agents.tool_loop:ToolLoop",
    "swe": "coderl.agents.swe:SWELoop",
    "remote": "coderl.agents.remote:RemoteLoop",
}


def get_loop(name: str) -> AgentLoop:
    """A loop by registered name or by ``module:Class`` import path."""
    target = LOOPS.get(name, name)
    module_name, sep, attr = target.partition(":")
    if not sep:
        raise AgentError(f"unknown agent loop {name!r}; registered: {', '.join(LOOPS)}, or give module:Class")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise AgentError(f"cannot import agent loop {target!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, AgentLoop)):
        raise AgentError(f"{target!r} is not an AgentLoop subclass")
    return cls()
