"""Tool schemas and tool calls for chat templates that have no tool support of their own.

Such templates (SmolLM2's, for one) get the Hermes convention that Qwen and NousResearch models use:
the schemas as JSON inside ``<tools></tools>`` in the system message, calls as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in assistant text, and results as a user
turn wrapped in ``<tool_response></tool_response>``. With the ``xml`` tool format, calls are written
as Qwen3-Coder writes them instead: ``<function=NAME>`` and one ``<parameter=KEY>`` block per argument
inside ``<tool_call>``, values as raw text (what a model copies from a file listing stays the same
tokens; inside a JSON string newlines and quotes would become escapes).
"""

from __future__ import annotations

import json
from typing import Any

from coderl.errors import ChatError

Message = dict[str, Any]

TOOLS_PREAMBLE = (
    "You can call functions. Their signatures are inside <tools></tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call one, write a JSON object with its name and arguments inside <tool_call></tool_call>, e.g.\n"
    "<tool_call>\n{example}\n</tool_call>"
)
"""The example call is a real one (the first tool, its required arguments): small models copy the
example they are shown, and a placeholder name would make every copied call invalid."""

XML_TOOLS_PREAMBLE = (
    "You can call functions. Their signatures are inside <tools></tools>:\n<tools>\n{tools}\n</tools>\n"
    "To call one, write its name and each argument inside <tool_call></tool_call>, values as plain text "
    "(no quotes, no escapes), e.g.\n{example}"
)

_PLACEHOLDERS = {"string": "...", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}


def example_call(tools: list[dict[str, Any]], xml: bool = False) -> str:
    """A well-formed call of the first tool with placeholder values for its required arguments (JSON,
    or the whole ``<tool_call>`` block in the xml format)."""
    fn = tools[0].get("function", tools[0])
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    args = {
        name: _PLACEHOLDERS.get(str((props.get(name) or {}).get("type")), "...")
        for name in params.get("required") or []
    }
    if xml:
        return xml_call_text({"name": fn.get("name"), "arguments": args})
    return json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False)


def tool_schemas_text(tools: list[dict[str, Any]]) -> str:
    """One JSON schema per line, in the OpenAI ``{"type": "function", "function": {...}}`` form."""
    lines = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or ("function" not in tool and "name" not in tool):
            raise ChatError(
                f"tool #{i} must be an OpenAI tool schema {{'type': 'function', 'function': {{...}}}}, got {tool!r}"
            )
        schema = tool if "function" in tool else {"type": "function", "function": tool}
        lines.append(json.dumps(schema, ensure_ascii=False))
    return "\n".join(lines)


def arguments_dict(arguments: Any) -> dict[str, Any]:
    """Tool-call arguments as a dict, whether given as a dict or as a JSON string (OpenAI's form)."""
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ChatError(f"tool-call arguments are not valid JSON: {arguments!r} ({exc})") from None
        if isinstance(value, dict):
            return value
    raise ChatError(f"tool-call arguments must be a JSON object, got {arguments!r}")


def hermes_call_text(call: dict[str, Any]) -> str:
    fn = call.get("function", call)
    body = {"name": fn.get("name"), "arguments": arguments_dict(fn.get("arguments", {}))}
    return "<tool_call>\n" + json.dumps(body, ensure_ascii=False) + "\n</tool_call>"


def xml_call_text(call: dict[str, Any]) -> str:
    """A call in Qwen3-Coder's format: string values as they are, others as JSON."""
    fn = call.get("function", call)
    rows = ["<tool_call>", f"<function={fn.get('name')}>"]
    for key, value in arguments_dict(fn.get("arguments", {})).items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        rows += [f"<parameter={key}>", text, "</parameter>"]
    return "\n".join([*rows, "</function>", "</tool_call>"])


def to_hermes_messages(
    messages: list[Message], tools: list[dict[str, Any]] | None, xml: bool = False
) -> list[Message]:
    """Rewrite OpenAI-style messages with tools / tool calls / tool results into plain-text turns
    (calls in the Hermes JSON form, or with ``xml`` in Qwen3-Coder's)."""
    out: list[Message] = []
    if tools:
        template = XML_TOOLS_PREAMBLE if xml else TOOLS_PREAMBLE
        preamble = template.format(tools=tool_schemas_text(tools), example=example_call(tools, xml))
        if messages and messages[0].get("role") == "system":
            out.append({"role": "system", "content": f"{_text(messages[0])}\n\n{preamble}"})
            messages = messages[1:]
        else:
            out.append({"role": "system", "content": preamble})
    for msg in messages:
        role = msg.get("role")
        if role == "assistant" and msg.get("tool_calls"):
            parts = [_text(msg)] if _text(msg) else []
            parts += [xml_call_text(c) if xml else hermes_call_text(c) for c in msg["tool_calls"]]
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif role == "tool":
            block = f"<tool_response>\n{_text(msg)}\n</tool_response>"
            if out and out[-1].get("role") == "user" and out[-1].get("_tool_results"):
                out[-1]["content"] += "\n" + block  # consecutive results share one user turn
            else:
                out.append({"role": "user", "content": block, "_tool_results": True})
        else:
            out.append({"role": role, "content": _text(msg)})
    return [{k: v for k, v in m.items() if not k.startswith("_")} for m in out]


def _text(msg: Message) -> str:
    """Message content as text (OpenAI content parts of type 'text' are joined)."""
    content = msg.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    raise ChatError(f"message content must be a string or a list of text parts, got {type(content).__name__}")
