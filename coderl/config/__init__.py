"""Configuration: pydantic models plus YAML / env / CLI loading (see loader.py for precedence)."""

from coderl.config.loader import dump_config, load_config, validate_config
from coderl.config.models import (
    ActorConfig,
    AlgoConfig,
    Config,
    EngineConfig,
    ModelConfig,
    ProxyConfig,
    RelayWorkerConfig,
    RolloutConfig,
    RunConfig,
    SandboxSpec,
    ServerConfig,
    TasksConfig,
    TrainConfig,
)

__all__ = [
    "ActorConfig",
    "AlgoConfig",
    "Config",
    "EngineConfig",
    "ModelConfig",
    "ProxyConfig",
    "RelayWorkerConfig",
    "RolloutConfig",
    "RunConfig",
    "SandboxSpec",
    "ServerConfig",
    "TasksConfig",
    "TrainConfig",
    "dump_config",
    "load_config",
    "validate_config",
]
