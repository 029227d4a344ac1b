"""``tool_choice`` of every dialect, honoured in token space.

OpenAI's ``"auto"`` / ``"none"`` / ``"required"`` / ``{"type": "function", "function": {"name"}}``, the
Responses API's flat ``{"type": "function", "name"}`` and
Anthropic's ``{"type": "auto" | "none" | "any" | "tool", "name"}`` map to one :class:`ToolChoice`. A
forced choice ("required"/"any": some tool; a named tool: that one) is honoured the way a bash-only
agent's response prefix is: the opening of a tool call is appended to the prompt
(``<tool_call>\\n{"name": "`` or, for a named tool, up to its ``"arguments": ``), and the model writes
the rest. The prefix is prompt, not sample: the record holds it in the call's ``prompt_ids`` (mask 0
in a trajectory), and the completion is only what the engine sampled. Anything else is refused with
a 400 that names the valid forms.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from coderl.proxy.errors import ApiError


@dataclass(frozen=True)
class ToolChoice:
    mode: Literal["auto", "none", "any", "tool"] = "auto"
    name: str | None = None
    """The tool a ``tool`` choice names."""

    def prefix(self) -> str:
        """The text the reply is forced to start with ('' unless a tool call is forced)."""
        if self.mode == "any":
            return '<tool_call>\n{"name": "'
        if self.mode == "tool":
            return '<tool_call>\n{"name": ' + json.dumps(self.name, ensure_ascii=False) + ', "arguments": '
        return ""


def _checked(choice: ToolChoice, tools: list[dict[str, Any]] | None) -> ToolChoice:
    names = [t["function"]["name"] for t in tools or []]
    if choice.mode in ("any", "tool") and not names:
        raise ApiError(400, "tool_choice forces a tool call, but the request has no tools", param="tool_choice")
    if choice.mode == "tool" and choice.name not in names:
        raise ApiError(400, f"tool_choice names {choice.name!r}, which is not among the tools {names}", "tool_choice")
    return choice


def openai_tool_choice(value: str | dict[str, Any] | None, tools: list[dict[str, Any]] | None) -> ToolChoice:
    """OpenAI's ``tool_choice``: "auto" (default), "none", "required", or one named function."""
    if value is None or value == "auto":
        return ToolChoice("auto")
    if value == "none":
        return ToolChoice("none")
    if value == "required":
        return _checked(ToolChoice("any"), tools)
    if isinstance(value, dict) and value.get("type") == "function":
        name = (value.get("function") or {}).get("name")
        if isinstance(name, str) and name:
            return _checked(ToolChoice("tool", name), tools)
    raise ApiError(
        400,
        f"tool_choice {value!r} is not supported; use 'auto', 'none', 'required' or "
        '{"type": "function", "function": {"name": "<tool>"}}',
        param="tool_choice",
    )


def responses_tool_choice(
    value: str | dict[str, Any] | None, tools: list[dict[str, Any]] | None
) -> ToolChoice:
    """The Responses API's ``tool_choice``: "auto" (default), "none", "required", or
    ``{"type": "function", "name": ...}``; ``tools`` in the chat form (:mod:`coderl.proxy.responses_items`)."""
    if value is None or value == "auto":
        return ToolChoice("auto")
    if value == "none":
        return ToolChoice("none")
    if value == "required":
        return _checked(ToolChoice("any"), tools)
    if isinstance(value, dict) and value.get("type") == "function":
        name = value.get("name")
        if isinstance(name, str) and name:
            return _checked(ToolChoice("tool", name), tools)
    raise ApiError(
        400,
        f"tool_choice {value!r} is not supported; use 'auto', 'none', 'required' or "
        '{"type": "function", "name": "<tool>"} (built-in tools and allowed_tools are not served)',
        param="tool_choice",
    )


def anthropic_tool_choice(value: dict[str, Any] | None, tools: list[dict[str, Any]] | None) -> ToolChoice:
    """Anthropic's ``tool_choice``: {"type": "auto"} (default), "none", "any", or {"type": "tool", "name"}."""
    kind = (value or {}).get("type", "auto")
    if kind in ("auto", "none", "any"):
        return _checked(ToolChoice(kind), tools)
    if kind == "tool" and isinstance((value or {}).get("name"), str) and value and value["name"]:
        return _checked(ToolChoice("tool", value["name"]), tools)
    raise ApiError(
        400,
        f"tool_choice {value!r} is not supported; use type 'auto', 'none', 'any' or "
        '{"type": "tool", "name": "<tool>"}',
        param="tool_choice",
    )
