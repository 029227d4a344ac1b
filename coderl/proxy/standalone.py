"""The standalone proxy a config describes: its engine (the configured one, or relay workers with
``proxy.mode=relay``), the tokenizer's chat format and the app. ``coderl proxy serve`` and the Ray
actor (:mod:`coderl.integrations.ray_proxy`) both build it here."""

from __future__ import annotations

from typing import Any

from coderl.chat import ChatFormat
from coderl.checkpoint import DEFAULT_MODEL_NAME, load_tokenizer, resolve_checkpoint
from coderl.config import Config
from coderl.engine import Engine, create_engine
from coderl.proxy.app import create_app
from coderl.proxy.relay import RelayEngine


def build_proxy(cfg: Config) -> tuple[Any, str]:
    """(the proxy app, the served model name) for ``cfg``; the app starts and stops its engine."""
    folder = resolve_checkpoint(cfg.model.path, cfg.model.cache_dir)
    name = DEFAULT_MODEL_NAME if cfg.model.path is None else folder.name
    engine: Engine
    if cfg.proxy.mode == "relay":  # no local engine: only the tokenizer, to render prompts
        engine = RelayEngine(cfg.proxy, model=name)
    else:
        engine = create_engine(cfg.engine, cfg.model, seed=cfg.run.seed)
    chat = ChatFormat(load_tokenizer(folder), cfg.model.tool_format)
    return create_app(cfg.proxy, engine, chat, model_name=name), name
