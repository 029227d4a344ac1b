"""The recording proxy: OpenAI / Anthropic compatible endpoints per session, every call recorded in
token space and merged into trajectories (see README, "Recording proxy").

Only the config is imported eagerly: ``coderl.config`` imports it, and the app pulls in the engine.
"""

from __future__ import annotations

from typing import Any

from coderl.proxy.config import ProxyConfig

__all__ = ["ProxyConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from coderl.proxy.app import create_app

        return create_app
    raise AttributeError(f"module 'coderl.proxy' has no attribute {name!r}")
