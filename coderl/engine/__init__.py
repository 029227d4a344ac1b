"""Inference: ``create_engine(cfg.engine)`` returns an :class:`Engine` (embedded, HTTP or a router)."""

from __future__ import annotations

from coderl.engine.base import Engine
from coderl.engine.config import EngineConfig, ModelConfig
from coderl.engine.params import SamplingParams
from coderl.engine.sampler import token_logprobs
from coderl.types import Completion

__all__ = ["Completion", "Engine", "SamplingParams", "create_engine", "token_logprobs"]


def create_engine(
    engine: EngineConfig | None = None, model: ModelConfig | None = None, seed: int = 0
) -> Engine:
    """Build the engine a config describes: one embedded engine, several behind a router, or HTTP
    clients for vLLM / SGLang / coderl servers behind a router. Nothing loads until ``start()``."""
    from coderl.engine.embedded import EmbeddedEngine

    engine = engine or EngineConfig()
    model = model or ModelConfig()
    if engine.type == "embedded":
        if engine.replicas == 1:
            return EmbeddedEngine(engine, model, seed=seed)
        from coderl.engine.router import Router

        replicas: list[Engine] = [
            EmbeddedEngine(engine, model, seed=seed + i, name=f"embedded-{i}") for i in range(engine.replicas)
        ]
        return Router(replicas, max_sessions=engine.max_sessions)
    from coderl.engine.http_client import HTTPEngine
    from coderl.engine.router import Router

    clients: list[Engine] = [HTTPEngine(url, engine) for url in engine.urls]
    return clients[0] if len(clients) == 1 else Router(clients, max_sessions=engine.max_sessions)
