"""``tool_choice`` of every dialect, honoured in token space.

OpenAI's ``"auto"`` / ``"none"`` / ``"required"`` / ``{"type": "function", "function": {"name"}}``, the
Responses API's flat ``{"type": "function", "name"}`` and
Anthropic's ``{"type": "auto" | "none" | "any" | "tool", "name"}`` map to one :class:`ToolChoice`. A
forced choice ("required"/"any": some tool; a named tool: that one) is honoured the way a bash-only
agent's response prefix is: the opening of a tool call, written in the model's tool format
(``model.tool_format``, :func:`call_opening`), is appended to the prompt, up to the name for "any" and
up to the arguments for a named tool, and the model writes the rest. The prefix is prompt, not sample:
the record holds it in the call's ``prompt_ids`` (mask 0 in a trajectory), and the completion is only
what the engine sampled.

A named tool must be one the request declares (else a 400 naming it and the declared ones). "any" with
a single declared tool names that tool, so the model cannot call another; with several, the model
writes the name, and a call to a tool it was not offered is answered as sampled, as under "auto" (the
engine cannot restrict a name to a list). Anything else is refused with a 400 that names the valid forms.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from coderl.chat.parse import ToolFormat
from coderl.proxy.errors import ApiError


@dataclass(frozen=True)
class ToolChoice:
    mode: Literal["auto", "none", "any", "tool"] = "auto"
    name: str | None = None
    """The tool a ``tool`` choice names."""

    def prefix(self, tool_format: ToolFormat) -> str:
        """The text the reply is forced to start with ('' unless a tool call is forced)."""
        if self.mode == "any":
            return call_opening(tool_format, None)
        if self.mode == "tool":
            return call_opening(tool_format, self.name)
        return ""


def call_opening(tool_format: ToolFormat, name: str | None) -> str:
    """The start of a tool call in ``tool_format``: up to the name (``name`` None), or with ``name``
    written, up to its arguments. ``xml``: Qwen3-Coder's ``<tool_call>\\n<function=NAME>\\n``; ``json``:
    a bare ``{"name": ...`` (what that format parses); ``hermes`` and ``auto``: JSON in ``<tool_call>``."""
    if tool_format == "xml":
        return "<tool_call>\n<function=" + ("" if name is None else f"{name}>\n")
    head = '{"name": ' if tool_format == "json" else '<tool_call>\n{"name": '
    return head + ('"' if name is None else json.dumps(name, ensure_ascii=False) + ', "arguments": ')


def _checked(choice: ToolChoice, tools: list[dict[str, Any]] | None) -> ToolChoice:
    names = [t["function"]["name"] for t in tools or []]
    if choice.mode == "tool" and choice.name not in names:
        declared = f"the declared tools are {names}" if names else "the request declares no tools"
        raise ApiError(
            400,
            f"tool_choice names the tool {choice.name!r}, which the request does not declare; {declared}: "
            "name one of them or add it to tools",
            param="tool_choice",
        )
    if choice.mode == "any" and not names:
        raise ApiError(
            400, "tool_choice forces a tool call, but the request has no tools", param="tool_choice"
        )
    if choice.mode == "any" and len(names) == 1:  # the one tool a forced call may name: name it
        return ToolChoice("tool", names[0])
    return choice


def openai_tool_choice(value: str | dict[str, Any] | None, tools: list[dict[str, Any]] | None) -> ToolChoice:
    """OpenAI's ``tool_choice``: "auto" (default), "none", "required", or one named function."""
    name = (value.get("function") or {}).get("name") if isinstance(value, dict) else None
    return _function_choice(value, name, tools, '{"type": "function", "function": {"name": "<tool>"}}')


def responses_tool_choice(
    value: str | dict[str, Any] | None, tools: list[dict[str, Any]] | None
) -> ToolChoice:
    """The Responses API's ``tool_choice``: "auto" (default), "none", "required", or
    ``{"type": "function" or "custom", "name": ...}``; ``tools`` in the chat form
    (:mod:`coderl.proxy.responses_items`, where a custom tool is a function too)."""
    name = value.get("name") if isinstance(value, dict) else None
    if isinstance(value, dict) and value.get("type") == "custom":
        value = {**value, "type": "function"}
    return _function_choice(
        value, name, tools,
        '{"type": "function" or "custom", "name": "<tool>"} (built-in tools and allowed_tools are not served)',
    )  # fmt: skip


def _function_choice(
    value: str | dict[str, Any] | None, name: Any, tools: list[dict[str, Any]] | None, named_form: str
) -> ToolChoice:
    """The choice of either OpenAI API, ``name`` read from ``value`` in that API's own shape."""
    if value is None or value == "auto":
        return ToolChoice("auto")
    if value == "none":
        return ToolChoice("none")
    if value == "required":
        return _checked(ToolChoice("any"), tools)
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(name, str) and name:
        return _checked(ToolChoice("tool", name), tools)
    raise ApiError(
        400, f"tool_choice {value!r} is not supported; use 'auto', 'none', 'required' or {named_form}",
        param="tool_choice",
    )  # fmt: skip


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
