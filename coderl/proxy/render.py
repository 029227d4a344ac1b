"""Request messages -> prompt ids, reusing the exact ids sampled for assistant turns the agent sends back.

An agent talks in text: each request carries the whole conversation again, with the model's earlier
replies as the agent received them. Re-tokenising those replies does not give back the sampled ids, so
instead the longest earlier call of the session whose conversation *plus the reply the proxy returned
for it* is a prefix of the new request (compared in canonical form: role, stripped text, tool calls by
name and parsed arguments) supplies ``prompt_ids + completion_ids``, and only the messages after it are
rendered, in token space (:meth:`ChatFormat.append`). Without such a call the conversation is rendered
from scratch. Either way the prompt then extends the earlier call's ids exactly, which is what lets
:mod:`coderl.proxy.merge` join the calls into one trajectory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from coderl.chat import ChatFormat
from coderl.chat.tools import arguments_dict
from coderl.errors import ChatError

Message = dict[str, Any]


@dataclass(frozen=True)
class PriorCall:
    """What an earlier call of the session contributes to mapping: its conversation and its ids."""

    call_id: int
    tools_key: str
    canon: tuple[str, ...]
    """Canonical request messages followed by the canonical reply the proxy returned."""
    prompt_ids: list[int]
    completion_ids: list[int]


@dataclass(frozen=True)
class RenderedPrompt:
    prompt_ids: list[int]
    canon: tuple[str, ...]
    """Canonical request messages (the reply is added once it is known)."""
    tools_key: str
    base_call_id: int | None
    """The earlier call whose sampled ids start this prompt; None = rendered from scratch."""


MEDIA_PARTS = frozenset({"image", "image_url", "input_image", "document", "file", "input_file", "input_audio"})
"""Content part types the served model cannot read; each becomes :func:`media_placeholder` text."""


def media_placeholder(kind: str) -> str:
    """What the model reads in place of an image, document or audio part. Agents attach them on their
    own (Claude Code's Read of a PNG sends the image in its tool_result): refusing the request would end
    the agent's run, since the part stays in every later turn's history."""
    return f"[{kind} omitted: this model reads text only]"


def message_text(content: Any) -> str:
    """Text of a message's content: a string, None, or a list of text parts (image, document and audio
    parts read as :func:`media_placeholder`)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type", "text") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") in MEDIA_PARTS:
                parts.append(media_placeholder(str(part["type"])))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ChatError(f"only text content is supported, got a content part of type {kind!r}")
        return "".join(parts)
    raise ChatError(f"message content must be a string or a list of text parts, got {type(content).__name__}")


def canonical_message(msg: Message) -> str:
    """One message as a comparable string: role, stripped text, tool calls (name, parsed arguments)."""
    role = {"developer": "system", "function": "tool"}.get(str(msg.get("role")), str(msg.get("role")))
    calls = []
    for call in msg.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        try:
            args: Any = arguments_dict(fn.get("arguments", {}))
        except ChatError:
            args = fn.get("arguments")
        calls.append([fn.get("name"), args])
    return json.dumps(
        [role, message_text(msg.get("content")).strip(), calls], sort_keys=True, ensure_ascii=False
    )


def tools_key(tools: list[dict[str, Any]] | None) -> str:
    return json.dumps(tools or [], sort_keys=True, ensure_ascii=False)


def find_base(canon: tuple[str, ...], key: str, prior: list[PriorCall]) -> PriorCall | None:
    """The earlier call with the longest conversation + reply that is a strict prefix of ``canon``."""
    best: PriorCall | None = None
    for call in prior:
        n = len(call.canon)
        if call.tools_key != key or n >= len(canon) or (best is not None and n <= len(best.canon)):
            continue
        if canon[:n] == call.canon:
            best = call
    return best


def render_prompt(
    chat: ChatFormat, messages: list[Message], tools: list[dict[str, Any]] | None, prior: list[PriorCall]
) -> RenderedPrompt:
    """Prompt ids for a request; see the module docstring. Raises ChatError for unrenderable input."""
    if not messages:
        raise ChatError("messages must hold at least one message")
    canon = tuple(canonical_message(m) for m in messages)
    key = tools_key(tools)
    base = find_base(canon, key, prior) if messages[-1].get("role") != "assistant" else None
    if base is not None:
        rest = messages[len(base.canon) :]
        try:
            delta = chat.append(base.completion_ids, rest, tools or None)
        except ChatError:
            base = None  # a template that cannot append these messages: render the whole conversation
        else:
            ids = base.prompt_ids + base.completion_ids + delta
            return RenderedPrompt(ids, canon, key, base.call_id)
    return RenderedPrompt(chat.render(messages, tools or None), canon, key, None)
