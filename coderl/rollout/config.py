"""The ``rollout`` config section: how each rollout runs (agent loop, sampling, limits, concurrency)."""

from __future__ import annotations

from pydantic import Field

from coderl.section import Section


class RolloutConfig(Section):
    agent: str = "swe"
    """Agent loop: single_turn | tool | swe | remote (an external agent program through the recording
    proxy), or module:Class for your own."""
    group_size: int = Field(1, ge=1)
    """Samples per task (G); pass@k needs k <= G."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature of every model call."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling of every model call."""
    max_tokens: int = Field(512, ge=1)
    """Most tokens one model call may generate."""
    max_turns: int = Field(30, ge=1)
    """Most model calls per trajectory (exit status step_limit)."""
    max_total_tokens: int = Field(16384, ge=16)
    """Most response tokens per trajectory, model and environment (exit status token_limit)."""
    max_context_tokens: int = Field(8192, ge=64)
    """Longest prompt sent to the engine (exit status context_limit)."""
    max_format_errors: int | None = Field(None, ge=1)
    """End a trajectory at its Nth format error (a turn without a tool call, a call that does not
    parse, an unknown tool, arguments its tool rejects), exit status format_limit; empty = no limit
    (each error is answered and the loop goes on, up to max_turns)."""
    cut_wrong_tool_names: bool = True
    """Where the response prefix leaves a reply's first tool name to the model (it ends with
    `<function=`, tool format xml or auto) and one more format error ends the trajectory
    (max_format_errors), the embedded engine stops the reply at the first token after which no offered
    tool's name can follow: the rest could not change the outcome (trajectory metric tool_name_cuts).
    Servers reached over HTTP generate the whole reply. false = every reply runs to its end."""
    max_tool_output_chars: int = Field(4000, ge=100)
    """Tool output beyond this is cut with a note."""
    response_prefix: str = ""
    """Written by the environment (mask 0) at the start of every assistant turn of the tool and swe
    loops, e.g. "<tool_call>\\n" to steer a small model into the tool-call format; the model continues it."""
    remote_command: str = ""
    """agent=remote: the agent program, a shell command run in the task's sandbox with OPENAI_BASE_URL /
    OPENAI_API_KEY / ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY set to its own proxy session, the task in
    $CODERL_TASK and $CODERL_TASK_FILE, the model name in $CODERL_MODEL, max_tokens and
    max_context_tokens in $CODERL_MAX_TOKENS and $CODERL_CONTEXT_TOKENS (needs sandbox.network=true)."""
    remote_setup: str = ""
    """agent=remote: a shell command run once per process on the host before the first rollout, e.g.
    installing the agent program where it is missing (`command -v codex || npm install -g ...`); if it
    fails, every rollout fails with its exit status and output."""
    tools: list[str] | None = None
    """Tool-using loops (tool, swe): the tools offered, by name, e.g. [bash] (empty = all of the loop's
    tools). A small model does better with a short prompt and one way to act."""
    remote_timeout_s: float = Field(1800.0, gt=0)
    """agent=remote: wall-clock limit of the agent program (exit status error when it passes)."""
    max_engine_requests: int = Field(16, ge=1)
    """Engine requests in flight at once."""
    max_sandboxes: int = Field(8, ge=1)
    """Rollouts (each with its sandbox) alive at once."""
    pass_k: list[int] = [1]
    """k values reported as pass@k (each needs group_size >= k)."""
