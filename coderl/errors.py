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
