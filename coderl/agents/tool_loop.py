"""``tool``: a generic function-calling loop over :class:`~coderl.agents.tools.Tool` functions.

Each turn: sample from the engine on exactly ``prompt + response so far``; parse tool calls; run
the first (one action per turn; none when the reply's first call block is malformed); append the
results in token space (mask 0). A malformed call, or a turn without any call,
gets a short corrective message (counted as a format error). The rollout ends when a tool that ends
the episode is called (``submitted``) or a limit hits (``step_limit``, ``token_limit``,
``context_limit``, ``format_limit``); either way the patch is collected. Where the response prefix
leaves the first tool name to the model and one more format error would end the rollout, a reply
whose name goes wrong stops at that token (``AgentLimits.cut_wrong_tool_names``): what follows could
not change the outcome, and an untrained model would otherwise ramble on to ``max_tokens``.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from coderl.agents.base import AgentContext, AgentLimits, AgentLoop
from coderl.agents.tools import Tool, params, truncate
from coderl.agents.trajectory import TrajectoryBuilder
from coderl.chat.parse import opens_tool_name
from coderl.chat.tools import Message
from coderl.engine.params import ExpectName
from coderl.errors import AgentError, EngineError
from coderl.types import Task, Trajectory

log = logging.getLogger(__name__)

NO_CALL = (
    'No tool call found. Call one tool per turn as <tool_call>{"name": ..., "arguments": {...}}</tool_call>.'
)


def select_tools(tools: list[Tool], names: list[str] | None) -> list[Tool]:
    """The tools named in ``names`` (all when None), in the loop's own order."""
    if names is None:
        return tools
    known = {t.name for t in tools}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise AgentError(f"rollout.tools: {unknown} are not tools of this loop; its tools are {sorted(known)}")
    return [t for t in tools if t.name in names]


class ToolLoop(AgentLoop):
    """Subclasses provide tools by overriding :meth:`open` / :meth:`close` / :meth:`patch`."""

    name = "tool"
    tool_names: tuple[str, ...] = ("submit",)
    system_prompt = "You are a helpful assistant. Use the tools; call submit with your final answer."

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self.base_tools = tools or []
        self.answer = ""

    async def open(self, task: Task, ctx: AgentContext) -> list[Tool]:
        """Tools for this rollout (called once per run)."""

        def submit(answer: str = "") -> str:
            self.answer = answer
            return "Submitted."

        return [
            *self.base_tools,
            Tool("submit", "Finish with your final answer.", params([], answer="string"), submit, True),
        ]

    async def patch(self) -> str:
        """The rollout's result as a patch (or answer text)."""
        return self.answer

    async def close(self) -> None:
        """Release what :meth:`open` acquired."""

    async def run(self, task: Task, ctx: AgentContext) -> Trajectory:
        session = f"{task.id}-{uuid.uuid4().hex[:8]}"
        builder: TrajectoryBuilder | None = None
        try:
            tools = select_tools(await self.open(task, ctx), ctx.tools)
            by_name = {t.name: t for t in tools}
            schemas = [t.schema() for t in tools]
            messages: list[Message] = [
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": task.instruction},
            ]
            builder = TrajectoryBuilder(task.id, ctx.group_id, ctx.chat.render(messages, schemas))
            status = await self._turns(builder, by_name, schemas, ctx, session)
            return builder.finish(status, patch=await self.patch())
        except Exception as exc:  # a failed rollout is data, never an exception for the runner
            if builder is None:
                builder = TrajectoryBuilder(task.id, ctx.group_id, [])
            try:
                patch = await self.patch()
            except Exception:
                patch = ""
            return builder.finish("error", patch=patch, error=f"{type(exc).__name__}: {exc}")
        finally:
            try:
                await ctx.engine.end_session(session)  # its cached KV is of no more use
            except EngineError as exc:  # an engine that is gone keeps nothing
                log.debug("ending session %s: %s", session, exc)
            if ctx.defer_close is not None:
                ctx.defer_close(self.close())  # the trajectory is complete: its tear-down need not hold it
            else:
                await self.close()

    async def _turns(
        self,
        b: TrajectoryBuilder,
        tools: dict[str, Tool],
        schemas: list[dict[str, Any]],
        ctx: AgentContext,
        session: str,
    ) -> str:
        lim = ctx.limits
        prefix = ctx.chat.encode(ctx.response_prefix) if ctx.response_prefix else []
        names_next = lim.cut_wrong_tool_names and opens_tool_name(ctx.response_prefix, ctx.chat.tool_format)
        guide = ctx.guide
        for turn in range(lim.max_turns):
            if len(b.context) + len(prefix) >= lim.max_context_tokens:
                return "context_limit"
            b.add_env(prefix)  # the turn's opening the environment writes for the model (mask 0)
            written = guide.written(turn) if guide is not None else []
            b.add_env(written)  # a guided sample: the demonstration's start, in the model's place (mask 0)
            b.guided_tokens += len(written)
            engine_before = b.engine_s
            turn_start = time.perf_counter()
            by_model = not (guide is not None and guide.whole(turn))
            ids = written
            if by_model:
                room = lim.max_context_tokens - len(b.context)
                update: dict[str, Any] = {"max_tokens": max(1, min(ctx.sampling.max_tokens, room))}
                if not written and _last_chance(lim, b.format_errors) and names_next:
                    update["expect_name"] = ExpectName(names=list(tools))  # a wrong name ends it: stop there
                sampling = ctx.sampling.model_copy(update=update)
                ids = written + (await b.sample(ctx.engine, sampling, session)).token_ids
            engine_time = b.engine_s - engine_before
            tool_time = 0.0
            if b.response_len >= lim.max_total_tokens:
                return "token_limit"
            parsed = ctx.chat.parse(prefix + ids, id_prefix=f"call_{turn + 1}")
            replies: list[Message] = []
            submitted = False
            for error in parsed.errors:
                b.format_errors += 1
                replies.append({"role": "tool", "content": f"Error: {error}"})
            if not parsed.tool_calls and not parsed.errors:
                b.format_errors += 1
                replies.append({"role": "user", "content": NO_CALL})
            # one action per turn keeps the loop simple to follow: the reply's first call block, and
            # none when that block is malformed (then the name check's cut changes no outcome)
            for call in [] if parsed.first_failed else parsed.tool_calls[:1]:
                tool = tools.get(call.name)
                if by_model:  # a call the environment wrote for a guided sample is not the model's
                    b.tool_calls[call.name] += 1
                t0 = time.perf_counter()
                if tool is None:
                    b.format_errors += 1
                    output = f"Error: there is no tool {call.name!r}. Tools: {', '.join(tools)}."
                else:
                    if tool.argument_error(call.arguments) is not None:
                        b.format_errors += 1  # a call its tool cannot run earns no format bonus
                    output = await tool.call(call.arguments)
                    submitted = tool.ends_episode
                tool_time += time.perf_counter() - t0
                replies.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "content": truncate(output, lim.max_tool_output_chars),
                    }
                )
            if submitted:
                b.sandbox_s += tool_time
                return "submitted"
            if lim.max_format_errors is not None and b.format_errors >= lim.max_format_errors:
                b.sandbox_s += tool_time
                return "format_limit"  # the error replies are not appended: no turn follows to read them
            b.add_env(ctx.chat.append(ids, replies, schemas))
            b.sandbox_s += tool_time
            b.turn_overheads.append(time.perf_counter() - turn_start - engine_time - tool_time)
        return "step_limit"


def _last_chance(lim: AgentLimits, format_errors: int) -> bool:
    """One more format error ends the trajectory (``max_format_errors``)."""
    return lim.max_format_errors is not None and format_errors + 1 >= lim.max_format_errors
