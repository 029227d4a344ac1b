"""Python functions as tools: a name, a short description, a JSON schema, and the function."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

ToolFn = Callable[..., Awaitable[str] | str]


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    fn: ToolFn
    ends_episode: bool = False
    """Calling it ends the rollout with exit status 'submitted'."""

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def argument_error(self, arguments: dict[str, Any]) -> str | None:
        """What is wrong with ``arguments`` for this tool (missing required ones, unknown ones, an
        integer that is not one), as the error text the model reads; None when it can run."""
        props = self.parameters.get("properties", {})
        missing = [p for p in self.parameters.get("required", []) if p not in arguments]
        unknown = [a for a in arguments if a not in props]
        if missing or unknown:
            return (
                f"Error: {self.name} "
                + (f"needs {', '.join(missing)}" if missing else "")
                + ("; " if missing and unknown else "")
                + (f"has no parameter {', '.join(unknown)}" if unknown else "")
                + f". Parameters: {', '.join(props) or 'none'}."
            )
        _, bad = self._coerced(arguments, props)
        return f"Error: {self.name} needs {bad}." if bad else None

    async def call(self, arguments: dict[str, Any]) -> str:
        """Run the tool; bad arguments come back as an error text the model can act on."""
        error = self.argument_error(arguments)
        if error is not None:
            return error
        arguments, _ = self._coerced(arguments, self.parameters.get("properties", {}))
        result = self.fn(**arguments)
        if inspect.isawaitable(result):
            result = await result
        return str(result)

    def _coerced(self, arguments: dict[str, Any], props: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Integer arguments written as text (formats whose values are raw text) as ints; what is
        wrong when one is not a whole number."""
        out = dict(arguments)
        for key, value in arguments.items():
            if (props.get(key) or {}).get("type") == "integer" and isinstance(value, str):
                try:
                    out[key] = int(value.strip())
                except ValueError:
                    return out, f"{key} as a whole number, got {value[:40]!r}"
        return out, ""


def params(required: list[str] | None = None, **props: str) -> dict[str, Any]:
    """A JSON schema of string/integer parameters: params(path="string", line="integer")."""
    return {
        "type": "object",
        "properties": {k: {"type": v} for k, v in props.items()},
        "required": required if required is not None else list(props),
    }


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[: limit // 2]
    tail = text[-limit // 2 :]
    return f"{head}\n[... {len(text) - limit} characters cut; narrow the command to see them ...]\n{tail}"
