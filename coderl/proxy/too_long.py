"""The 400 for a prompt over the model's context, with advice an agent's user can act on.

Agent programs send long stock prompts (Claude Code's is ~17.7k tokens, Codex CLI's ~10k) while small
models have 2-8k. Raising ``engine.max_model_len`` cannot help past the model's own limit, so the
message says where the tokens go (the tool definitions, the largest first, and the system text) and
how the common agents shrink them.
"""

from __future__ import annotations

import json
from typing import Any

from coderl.chat import ChatFormat
from coderl.errors import PromptTooLongError
from coderl.proxy.render import Message, message_text

SHRINK = (
    "send fewer tools or a shorter system prompt (Claude Code: --tools Bash,Read,Edit --system-prompt "
    "'...' or --bare; Codex CLI: -c model_instructions_file=FILE and --disable for features whose tools "
    "you do not need, see coderl/configs/remote_codex.yaml)"
)


def prompt_too_long_message(
    exc: PromptTooLongError, chat: ChatFormat, messages: list[Message] | None, tools: list[dict[str, Any]] | None
) -> str:
    """Where the prompt's tokens go and what would make it fit."""
    # Anthropic's own wording first: Claude Code reads "prompt is too long: N tokens > M" to say so
    # and to compact the conversation (otherwise it retries the same request)
    parts = [f"prompt is too long: {exc.prompt_tokens} tokens > {exc.max_model_len - 1} maximum (the engine's "
             f"context is {exc.max_model_len} tokens and the reply needs at least one)"]  # fmt: skip
    if tools:
        sizes = sorted(((_tool_name(t), len(chat.encode(json.dumps(t)))) for t in tools), key=lambda x: -x[1])
        largest = ", ".join(f"{name} {n}" for name, n in sizes[:5])
        parts.append(f"{len(tools)} tool definitions take about {sum(n for _, n in sizes)} (largest: {largest})")
    system = [m for m in messages or [] if m.get("role") in ("system", "developer")]
    if system:
        n = sum(len(chat.encode(message_text(m.get("content")))) for m in system)
        parts.append(f"{len(system)} system message(s) take about {n}")
    if exc.max_model_len < exc.model_limit and exc.prompt_tokens < exc.model_limit:
        fix = f"raise engine.max_model_len (up to {exc.model_limit}, the model's own limit), or {SHRINK}"
    else:
        fix = (
            f"{exc.model_limit} tokens is this model's own limit (engine.max_model_len cannot pass it): "
            f"{SHRINK}, or serve a model with a longer context"
        )
    return "; ".join(parts) + ". To fit, " + fix


def _tool_name(tool: dict[str, Any]) -> str:
    fn = tool.get("function")
    name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
    return str(name or "?")
