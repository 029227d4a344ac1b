"""The error vocabulary: one class per boundary crossed (see STYLE.md).

Each also subclasses the builtin that fits, so callers can catch either.
"""

from __future__ import annotations


class CoderlError(Exception):
    """Base of every error coderl raises on purpose."""


class ConfigError(CoderlError, ValueError):
    """A configuration key or value is invalid; the message names the key, the value and what is allowed."""


class ModelError(CoderlError, RuntimeError):
    """A model checkpoint could not be located, converted or loaded."""


class EngineError(CoderlError, RuntimeError):
    """The inference engine failed or refused a request."""


class EngineOverloadedError(EngineError):
    """The engine's queue is full and the caller asked not to wait."""


class PromptTooLongError(EngineError):
    """A prompt that leaves no room to generate within the engine's context (``max_model_len``)."""

    def __init__(self, prompt_tokens: int, max_model_len: int, model_limit: int) -> None:
        self.prompt_tokens, self.max_model_len, self.model_limit = prompt_tokens, max_model_len, model_limit
        if max_model_len < model_limit and prompt_tokens < model_limit:
            advice = f"shorten the prompt or raise engine.max_model_len (up to {model_limit}, the model's own limit)"
        else:
            advice = (
                f"{model_limit} tokens is the model's own limit, which engine.max_model_len cannot pass: "
                "shorten the prompt or serve a model with a longer context"
            )
        super().__init__(
            f"prompt of {prompt_tokens} tokens leaves no room to generate within max_model_len={max_model_len}; "
            + advice
        )

    def __reduce__(self) -> tuple[type[PromptTooLongError], tuple[int, int, int]]:
        return PromptTooLongError, (self.prompt_tokens, self.max_model_len, self.model_limit)  # Ray pickles it

    def wire(self) -> dict[str, int]:
        """The numbers an engine server sends with its 400, for :meth:`from_wire` on the client."""
        return {"prompt_tokens": self.prompt_tokens, "max_model_len": self.max_model_len, "model_limit": self.model_limit}

    @classmethod
    def from_wire(cls, text: str) -> PromptTooLongError | None:
        """The error an engine server's 400 body describes: coderl's own server (its numbers), or
        vLLM / SGLang ("maximum context length is N tokens ... M input tokens"); None for others."""
        import json
        import re

        try:
            fields = json.loads(text).get("error", {}).get("coderl_prompt_too_long")
        except (ValueError, AttributeError):
            fields = None
        if isinstance(fields, dict):
            return cls(int(fields["prompt_tokens"]), int(fields["max_model_len"]), int(fields["model_limit"]))
        limit = re.search(r"maximum context length is (\d+)", text)
        asked = re.search(r"(\d+) (?:input )?tokens", text[limit.end() :]) if limit else None
        if limit and asked:
            return cls(int(asked.group(1)), int(limit.group(1)), int(limit.group(1)))
        return None


class EngineUnavailableError(EngineError, ConnectionError):
    """No engine replica can serve the request (stopped, dead or unreachable)."""


class ChatError(CoderlError, ValueError):
    """Messages or tools could not be rendered to token ids."""


class SandboxError(CoderlError, RuntimeError):
    """Sandbox infrastructure failed (not the untrusted code inside it)."""


class TaskError(CoderlError, ValueError):
    """A task definition is malformed or cannot be loaded."""


class AgentError(CoderlError, RuntimeError):
    """An agent loop failed for a reason other than the model's own behaviour."""


class ProxyError(CoderlError, RuntimeError):
    """The recording proxy failed."""


class ClusterError(CoderlError, RuntimeError):
    """The Ray cluster could not be reached, could not hold the run's actors, or lost them all."""
