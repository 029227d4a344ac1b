"""The root config: one section per component, each owned by its package, assembled here.

Every field has a one-line docstring (errors quote it); every enumerated string is a ``Literal``;
unknown keys are errors (``extra="forbid"``). Components receive their own section, never the root.
The sections live beside the code that reads them (``coderl.engine.config``, ``coderl.rollout.config``,
...); this module owns only the two command-level ones (``run``, ``server``) and the rules that tie
sections together (:mod:`coderl.config.rules`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from coderl.cluster.config import ClusterConfig
from coderl.config.rules import broken_rules
from coderl.engine.config import EngineConfig, ModelConfig
from coderl.proxy.config import ProxyConfig, RelayWorkerConfig
from coderl.rl.config import AlgoConfig
from coderl.rollout.config import RolloutConfig
from coderl.sandbox.config import SandboxSpec
from coderl.section import Section
from coderl.tasks.config import TasksConfig
from coderl.train.config import ActorConfig, SFTConfig, TrainConfig

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
    "SFTConfig",
    "SandboxSpec",
    "Section",
    "ServerConfig",
    "TasksConfig",
    "TrainConfig",
]


class RunConfig(Section):
    dir: Path | None = None
    """Run directory; default runs/<command>-<timestamp>."""
    seed: int = 0
    """Global random seed."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Logging verbosity."""


class ServerConfig(Section):
    host: str = "127.0.0.1"
    """Address the server binds."""
    port: int = Field(8000, ge=0, le=65535)
    """TCP port (0 = any free port)."""
    api_key: str | None = None
    """If set, requests must carry 'Authorization: Bearer <api_key>'."""
    tokens: list[str] = []
    """Client tokens of `coderl sandbox serve` (one per client; each sees only its own sandboxes)."""

    @field_validator("tokens")
    @classmethod
    def _no_empty_token(cls, tokens: list[str]) -> list[str]:
        if any(not t.strip() for t in tokens):
            raise ValueError("server.tokens: an empty token would let in requests that carry none; give non-empty tokens")
        return tokens

    max_sandboxes: int = Field(256, ge=1)
    """`coderl sandbox serve`: the most sandboxes one client may hold at once (more answer 429)."""
    sandbox_idle_s: float | None = Field(3600.0, gt=0)
    """`coderl sandbox serve`: close a sandbox no request has used for this many seconds (its client
    died without closing it); null = never. A command still running keeps its sandbox."""


class Config(Section):
    """The root config; each component receives only its own section."""

    run: RunConfig = RunConfig()
    model: ModelConfig = ModelConfig()
    engine: EngineConfig = EngineConfig()
    server: ServerConfig = ServerConfig()
    sandbox: SandboxSpec = SandboxSpec()
    tasks: TasksConfig = TasksConfig()
    rollout: RolloutConfig = RolloutConfig()
    proxy: ProxyConfig = ProxyConfig()
    relay: RelayWorkerConfig = RelayWorkerConfig()
    train: TrainConfig = TrainConfig()
    algo: AlgoConfig = AlgoConfig()
    actor: ActorConfig = ActorConfig()
    sft: SFTConfig = SFTConfig()
    cluster: ClusterConfig = ClusterConfig()

    @model_validator(mode="after")
    def _sections_agree(self) -> Config:
        broken = broken_rules(self)
        if broken:
            raise ValueError("\n  ".join(broken))
        return self
