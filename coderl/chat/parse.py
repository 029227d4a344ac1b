"""Decode a completion's text into content and tool calls.

Formats: ``hermes`` (``<tool_call>{json}</tool_call>``, as Qwen / Hermes models write them), ``xml``
(Qwen3-Coder's ``<tool_call><function=NAME><parameter=KEY>value</parameter></function></tool_call>``,
whose values are raw text: code goes in as it reads, without JSON escapes), ``json`` (a plain-text
fallback: a JSON object with ``name`` and ``arguments`` anywhere in the text, fenced or bare) and
``auto`` (a ``<tool_call>`` block is xml when it opens with ``<function=``, else hermes; json when
there is no such tag). A malformed call is never an exception: it becomes an entry in ``errors`` that
an agent can answer with a corrective message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

ToolFormat = Literal["hermes", "json", "xml", "auto"]

_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_XML_FUNCTION = re.compile(r"\A<function=([^>\n]*)>(.*?)(</function>\s*\Z|\Z)", re.DOTALL)
_XML_PARAMETER = re.compile(r"<parameter=([^>\n]*)>(.*?)(</parameter>|(?=<parameter=)|\Z)", re.DOTALL)
XML_EXPECTED = "expected <function=NAME>, then <parameter=KEY>value</parameter> for each argument, then </function>"


@dataclass
class ToolCall:
    """One parsed call: the function name, its arguments, and the text it was parsed from."""

    name: str
    arguments: dict[str, Any]
    id: str = ""
    raw: str = ""

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }


@dataclass
class ParsedCompletion:
    """Completion text split into what the model said and what it called."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Format errors, each naming the bad text and the expected form."""
    first_failed: bool = False
    """The first ``<tool_call>`` block did not parse: the reply's first action is malformed."""


def opens_tool_name(prefix: str, fmt: ToolFormat) -> bool:
    """Whether a reply that ``prefix`` opens goes on with its first tool call's name: ``prefix`` ends
    with that call's ``<function=`` (format xml, or auto, which reads such a call as xml)."""
    if fmt not in ("xml", "auto"):
        return False
    before, tag, call = prefix.rpartition("<tool_call>")
    return bool(tag) and "<tool_call>" not in before and call.lstrip() == "<function="


def parse_completion(text: str, fmt: ToolFormat = "auto", id_prefix: str = "call") -> ParsedCompletion:
    """Split ``text`` into content and tool calls in format ``fmt``."""
    if fmt in ("hermes", "xml") or (fmt == "auto" and "<tool_call>" in text):
        parsed = _parse_hermes(text, xml=fmt)
    elif fmt in ("json", "auto"):
        parsed = _parse_json(text)
    else:
        raise ValueError(f"unknown tool-call format {fmt!r}; use 'hermes', 'xml', 'json' or 'auto'")
    for i, call in enumerate(parsed.tool_calls):
        call.id = f"{id_prefix}_{i}"
    return parsed


def _parse_hermes(text: str, xml: str = "auto") -> ParsedCompletion:
    """``<tool_call>`` blocks; each body is JSON (hermes), Qwen3-Coder's XML (xml), or either by its
    first characters (auto)."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    first_failed = False
    for n, match in enumerate(_HERMES.finditer(text), start=1):
        body = match.group(1).strip()
        unterminated = not match.group(0).endswith("</tool_call>")
        as_xml = xml == "xml" or (xml == "auto" and body.startswith("<function="))
        parse = _call_from_xml_text if as_xml else _call_from_json_text
        call, error = parse(body, f"tool call #{n}")
        if call is not None:
            call.raw = match.group(0)
            calls.append(call)
        if error:
            errors.append(error + (" (the closing </tool_call> tag is missing)" if unterminated else ""))
        first_failed = first_failed or (n == 1 and call is None)
    content = _HERMES.sub("", text).strip()
    return ParsedCompletion(content, calls, errors, first_failed)


def _parse_json(text: str) -> ParsedCompletion:
    """Find JSON objects that look like calls ({"name": ..., "arguments" | "parameters": {...}})."""
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    spans: list[tuple[int, int]] = []
    i = text.find("{")
    while i != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            call, _ = _call_from_value(value, "tool call")
            if call is not None:
                call.raw = text[i:end]
                calls.append(call)
                spans.append((i, end))
        i = text.find("{", end)
    content = text
    for start, end in reversed(spans):
        content = content[:start] + content[end:]
    content = re.sub(r"```(?:json)?\s*```", "", content).strip()
    return ParsedCompletion(content, calls, [])


def _call_from_xml_text(body: str, where: str) -> tuple[ToolCall | None, str | None]:
    """One Qwen3-Coder call: values are the raw text between the tags, less the one newline that
    opens and the one that closes each (as the format writes them)."""
    function = _XML_FUNCTION.match(body)
    if function is None:
        return None, f"{where} does not start with <function=NAME>: {body[:200]!r}; {XML_EXPECTED}"
    name = function.group(1).strip()
    if not name:
        return None, f"{where} has an empty function name: {body[:200]!r}; {XML_EXPECTED}"
    if not function.group(3):
        return None, f"{where} ({name}) is missing </function>: {body[-200:]!r}; {XML_EXPECTED}"
    inner = function.group(2)
    args: dict[str, Any] = {}
    for param in _XML_PARAMETER.finditer(inner):
        key = param.group(1).strip()
        if not param.group(3):
            return None, f"{where} ({name}) is missing </parameter> after <parameter={key}>; {XML_EXPECTED}"
        value = param.group(2)
        value = value[1:] if value.startswith("\n") else value
        args[key] = value[:-1] if value.endswith("\n") else value
    stray = _XML_PARAMETER.sub("", inner).strip()
    if stray:
        return None, f"{where} ({name}) has text outside any <parameter=...>: {stray[:200]!r}; {XML_EXPECTED}"
    return ToolCall(name=name, arguments=args), None


def _call_from_json_text(body: str, where: str) -> tuple[ToolCall | None, str | None]:
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, (
            f"{where} is not valid JSON ({exc.msg} at char {exc.pos}): {body[:200]!r}; expected "
            '{"name": "<function>", "arguments": {...}}'
        )
    return _call_from_value(value, where)


def _call_from_value(value: Any, where: str) -> tuple[ToolCall | None, str | None]:
    expected = 'expected {"name": "<function>", "arguments": {...}}'
    if not isinstance(value, dict):
        return None, f"{where} must be a JSON object, got {json.dumps(value)[:200]}; {expected}"
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return None, f"{where} has no string 'name': {json.dumps(value)[:200]}; {expected}"
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return (
                None,
                f"{where} ({name}) has 'arguments' that are not a JSON object: {args[:200]!r}; {expected}",
            )
    if not isinstance(args, dict):
        return (
            None,
            f"{where} ({name}) has 'arguments' that are not a JSON object: {json.dumps(args)[:200]}; {expected}",
        )
    return ToolCall(name=name, arguments=args), None
