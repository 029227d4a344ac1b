"""Responses API items and tools <-> the chat messages and tools every dialect renders
(:mod:`coderl.proxy.render`), so a Responses conversation maps to sampled ids and merges into
trajectories exactly as the same conversation sent to Chat Completions does.

Input (``input`` as a string is one user message; otherwise a list of items):

- a ``message`` item (``type`` may be left out) with role user / assistant / system / developer and
  content as a string or a list of ``input_text`` / ``output_text`` parts: one chat message;
- ``function_call`` items: tool calls of an assistant message. A call joins the assistant message right
  before it (a reply with text and calls comes back as a message item followed by its calls), or opens
  one without text;
- a ``function_call_output`` item: a tool message (``tool_call_id`` = its ``call_id``), rendered as the
  tool result the chat template expects;
- ``custom_tool_call`` / ``custom_tool_call_output`` items: the same, for custom (freeform) tools.

Custom tools (``{"type": "custom", "name": ..., "format": ...}``, such as the Codex CLI's
``apply_patch``) take free text, not JSON. The model sees each as a function with one string
parameter, ``input`` (its description says the format: free text, or the grammar given), so the
model's tool-call format carries it; a call of it comes back as a ``custom_tool_call`` item whose
``input`` is that string, and goes back into the conversation as the same function call.

Refused with a 400 that names the item: ``reasoning`` items (this proxy's replies never hold any, and a
summary or encrypted content from elsewhere is no text this model wrote, so rendering it would put words
in its mouth), ``item_reference`` (send the item itself, or use ``previous_response_id``), calls and
outputs of built-in tools, and content parts of an unknown type. Image, file and audio parts read as
a placeholder (:func:`coderl.proxy.render.media_placeholder`): the model reads text only.

Output: a recorded reply is a ``message`` item with one ``output_text`` part (when the reply has text or
no tool calls), then one ``function_call`` (or ``custom_tool_call``) item per call. Sent back as input, they convert to the very
assistant message the chat endpoint returns for that reply, which is what lets the proxy reuse its ids.
"""

from __future__ import annotations

import json
from typing import Any

from coderl.chat.tools import arguments_dict
from coderl.errors import ChatError
from coderl.proxy.errors import ApiError
from coderl.proxy.render import MEDIA_PARTS, Message, media_placeholder
from coderl.proxy.store import CallRow

Item = dict[str, Any]

ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text")
_INPUT_KINDS = "message, function_call, function_call_output, custom_tool_call and custom_tool_call_output"
CUSTOM_INPUT = "input"
"""The one string parameter a custom tool is shown to the model with."""


def input_items(value: str | list[Item]) -> list[Item]:
    """The request's ``input`` as items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value)


def chat_messages(items: list[Item], instructions: str | None, first: int = 0) -> list[Message]:
    """Chat messages for a conversation's items, ``instructions`` first as the system message.
    ``first``: how many leading items came from ``previous_response_id`` (errors count after them)."""
    out: list[Message] = [] if instructions is None else [{"role": "system", "content": instructions}]
    reply: Message | None = None  # the assistant message that function_call items join
    for i, item in enumerate(items):
        where = f"input[{i - first}]"
        kind = item.get("type") or ("item_reference" if "id" in item and "role" not in item else "message")
        if kind == "message":
            msg = _message(item, where)
            out.append(msg)
            reply = msg if msg["role"] == "assistant" else None
        elif kind in ("function_call", "custom_tool_call"):
            call = _function_call(item, where) if kind == "function_call" else _custom_call(item, where)
            if reply is None:
                reply = {"role": "assistant", "content": None}
                out.append(reply)
            reply.setdefault("tool_calls", []).append(call)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out.append(_call_output(item, where))
            reply = None
        else:
            raise ApiError(400, _unsupported_item(kind, where), param=f"{where}.type")
    return out


def _message(item: Item, where: str) -> Message:
    role = item.get("role")
    if role not in ROLES:
        raise ApiError(
            400, f"{where}.role must be one of {', '.join(ROLES)}; got {role!r}", param=f"{where}.role"
        )
    return {"role": role, "content": _text(item.get("content"), f"{where}.content", TEXT_PARTS)}


def _text(content: Any, where: str, kinds: tuple[str, ...]) -> str:
    """The text of a string or of a list of text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(
            400,
            f"{where} must be a string or a list of {' / '.join(kinds)} parts; got {type(content).__name__}",
            param=where,
        )
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind in MEDIA_PARTS:
            texts.append(media_placeholder(str(kind)))
            continue
        if kind not in kinds or not isinstance(part.get("text"), str):
            raise ApiError(
                400,
                f"{where}[{j}] is a {kind!r} part; only text is supported: parts of type "
                f"{' / '.join(kinds)} with a string 'text'",
                param=f"{where}[{j}]",
            )
        texts.append(part["text"])
    return "".join(texts)


def _string(item: Item, key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise ApiError(
            400, f"{where}.{key} must be a non-empty string; got {value!r}", param=f"{where}.{key}"
        )
    return value


def _function_call(item: Item, where: str) -> dict[str, Any]:
    name, call_id = _string(item, "name", where), _string(item, "call_id", where)
    arguments = item.get("arguments")
    if not isinstance(arguments, str):
        raise ApiError(
            400,
            f"{where}.arguments must be a JSON object as a string; got {arguments!r}",
            f"{where}.arguments",
        )
    try:
        arguments_dict(arguments)
    except ChatError as exc:
        raise ApiError(400, f"{where}.arguments: {exc}", param=f"{where}.arguments") from None
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _custom_call(item: Item, where: str) -> dict[str, Any]:
    name, call_id = _string(item, "name", where), _string(item, "call_id", where)
    text = item.get("input")
    if not isinstance(text, str):
        raise ApiError(400, f"{where}.input must be a string; got {text!r}", param=f"{where}.input")
    arguments = json.dumps({CUSTOM_INPUT: text}, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _call_output(item: Item, where: str) -> Message:
    call_id = _string(item, "call_id", where)
    output = _text(item.get("output"), f"{where}.output", ("input_text", "output_text"))
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def _unsupported_item(kind: Any, where: str) -> str:
    if kind == "reasoning":
        return (
            f"{where} is a reasoning item, which this proxy does not accept: its replies never contain "
            "reasoning items, and a summary or encrypted content from another model is no text this model "
            "wrote; leave reasoning items out of the input"
        )
    if kind == "item_reference":
        return (
            f"{where} is an item_reference, which this proxy does not resolve; send the item itself, or "
            "continue a stored response with previous_response_id"
        )
    return (
        f"{where} is an item of type {kind!r}, which this proxy cannot render (it serves function tools "
        f"only); input items may be {_INPUT_KINDS}"
    )


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Responses' flat function tools -> the chat form ``{"type": "function", "function": {...}}`` (the
    keys in the order the chat endpoint passes them on, so both render to the same ids). Built-in tools
    are refused: the proxy runs none of them."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        kind = tool.get("type")
        if kind == "custom":
            out.append({"type": "function", "function": _custom_function(tool, where)})
            continue
        if kind != "function":
            raise ApiError(
                400,
                f"{where} is a {kind!r} tool, which this proxy does not serve: it runs no built-in tools "
                "(web_search, file_search, computer_use_preview, code_interpreter, image_generation, "
                "local_shell, mcp...); declare a function tool "
                "{'type': 'function', 'name': ..., 'parameters': {...}} (or a custom tool, "
                "{'type': 'custom', 'name': ...}) and run it in the agent",
                param=f"{where}.type",
            )
        function: dict[str, Any] = {"name": _string(tool, "name", where)}
        for key, types in (("description", str), ("parameters", dict), ("strict", bool)):
            value = tool.get(key)
            if value is not None and not isinstance(value, types):
                raise ApiError(
                    400, f"{where}.{key} must be a {types.__name__} or null; got {value!r}", f"{where}.{key}"
                )
            if value is not None:
                function[key] = value
        out.append({"type": "function", "function": function})
    return out


def _custom_function(tool: dict[str, Any], where: str) -> dict[str, Any]:
    """A custom tool as the function the model is shown (module doc)."""
    name = _string(tool, "name", where)
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise ApiError(400, f"{where}.description must be a string or null; got {description!r}", f"{where}.description")
    fmt = tool.get("format") or {"type": "text"}
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        how = "Free text, written as it is (not JSON)."
    elif kind == "grammar" and isinstance(fmt.get("definition"), str):
        how = f"Free text (not JSON) in this {fmt.get('syntax', 'grammar')} grammar:\n{fmt['definition']}"
    else:
        raise ApiError(
            400,
            f"{where}.format must be {{'type': 'text'}} or {{'type': 'grammar', 'syntax': ..., 'definition': "
            f"...}}; got {fmt!r}",
            param=f"{where}.format",
        )
    parameters = {
        "type": "object",
        "properties": {CUSTOM_INPUT: {"type": "string", "description": how}},
        "required": [CUSTOM_INPUT],
    }
    return {"name": name, **({"description": description} if description else {}), "parameters": parameters}


def custom_names(tools: list[dict[str, Any]] | None) -> frozenset[str]:
    """The names of the request's custom tools (their calls come back as ``custom_tool_call`` items)."""
    return frozenset(t["name"] for t in tools or [] if t.get("type") == "custom" and isinstance(t.get("name"), str))


def echo_tools(raw: list[dict[str, Any]] | None, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The response's ``tools``: function tools in Responses' flat shape, custom tools as given."""
    out: list[dict[str, Any]] = []
    for given, t in zip(raw or [], tools or [], strict=True):
        if given.get("type") == "custom":
            out.append({"type": "custom", "name": given["name"], "description": given.get("description"),
                        "format": given.get("format") or {"type": "text"}})  # fmt: skip
            continue
        out.append(
            {
                "type": "function",
                "name": t["function"]["name"],
                "description": t["function"].get("description"),
                "parameters": t["function"].get("parameters"),
                "strict": t["function"].get("strict"),
            }
        )
    return out


def output_items(
    row: CallRow, logprobs: list[dict[str, Any]] | None = None, custom: frozenset[str] = frozenset()
) -> list[Item]:
    """A recorded reply as output items: the message (text, ``logprobs`` if asked for), then its calls
    (a call of a tool named in ``custom`` with one string ``input`` is a ``custom_tool_call``)."""
    r = row.result
    uid = r["id"]
    items: list[Item] = []
    if r["content"] or not r["tool_calls"]:
        part = {"type": "output_text", "text": r["content"], "annotations": [], "logprobs": logprobs or []}
        items.append(
            {
                "id": f"msg_{uid}",
                "type": "message",
                "status": "incomplete" if r["finish"] == "length" else "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for i, call in enumerate(r["tool_calls"]):
        text = _custom_input(call) if call["function"]["name"] in custom else None
        if text is not None:
            items.append(
                {
                    "id": f"ctc_{uid}_{i}",
                    "type": "custom_tool_call",
                    "status": "completed",
                    "call_id": call["id"],
                    "name": call["function"]["name"],
                    "input": text,
                }
            )
            continue
        items.append(
            {
                "id": f"fc_{uid}_{i}",
                "type": "function_call",
                "status": "completed",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
            }
        )
    return items


def _custom_input(call: dict[str, Any]) -> str | None:
    """The ``input`` of a custom tool's call when the model wrote exactly that one string argument
    (anything else comes back as a function call, so nothing it wrote is lost)."""
    try:
        args = arguments_dict(call["function"]["arguments"])
    except ChatError:
        return None
    value = args.get(CUSTOM_INPUT)
    return value if set(args) == {CUSTOM_INPUT} and isinstance(value, str) else None
