"""coderl's agent loops inside verl: :class:`CoderlAgentLoop`, registered with verl as ``coderl``.

Importing this module needs verl (a supported version: :data:`SUPPORTED`); coderl itself never does.
verl's agent-loop worker instantiates the class once per sample with its server client and tokenizer;
``run`` rebuilds the task from the dataset row (``coderl tasks convert --format verl``), runs the
coderl loop the coderl config names (``rollout.agent``: swe, tool, single_turn, remote, or a
``module:Class``) on verl's rollout servers through :class:`ServerClientEngine`, in a coderl sandbox,
grades it with the task's hidden tests, and returns a token-exact ``AgentLoopOutput``.

The coderl config (rollout, sandbox, tasks.reward) comes from the agent-loop YAML entry
(``agent_loop_config_path``)::

    - name: coderl
      _target_: coderl.integrations.verl.CoderlAgentLoop
      coderl_config: /shared/coderl.yaml       # optional: coderl's packaged train recipe otherwise
      coderl_overrides: ["rollout.max_turns=8"]

verl's sampling settings (temperature, top_p, top_k; greedy for validation) replace the coderl
rollout's; the loop's per-turn ``max_tokens`` and stop strings are kept.
"""

from __future__ import annotations

import importlib.metadata
import uuid
from typing import Any

from coderl.errors import ConfigError
from coderl.integrations.verl_bridge import SUPPORTED, check_verl_version

try:
    _installed = importlib.metadata.version("verl")
except importlib.metadata.PackageNotFoundError:
    raise ImportError(
        f"coderl.integrations.verl needs verl installed (pip install 'verl{SUPPORTED}'); coderl itself runs "
        "without it"
    ) from None
check_verl_version(_installed)

from verl.experimental.agent_loop import agent_loop as _verl_agent_loop  # noqa: E402
from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from coderl.chat import ChatFormat  # noqa: E402
from coderl.config import Config, load_config  # noqa: E402
from coderl.config.packaged import default_train_config  # noqa: E402
from coderl.integrations.verl_bridge import (  # noqa: E402
    AGENT_NAME,
    ServerClientEngine,
    agent_loop_fields,
    run_sample,
    task_of,
)


class CoderlAgentLoop(AgentLoopBase):
    """One verl sample = one coderl rollout, graded (see the module's docstring)."""

    def __init__(
        self,
        *args: Any,
        coderl_config: str | None = None,
        coderl_overrides: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.coderl: Config = load_config(
            coderl_config, overrides=list(coderl_overrides or []), defaults=default_train_config()
        )
        self.chat = ChatFormat(self.tokenizer, self.coderl.model.tool_format)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra_info = kwargs.get("extra_info")
        try:
            task = task_of(extra_info)
        except Exception as exc:
            raise ConfigError(f"verl sample {kwargs.get('index', '?')}: {exc}") from exc
        engine = ServerClientEngine(
            self.server_manager, uuid.uuid4().hex, sampling_params, decode=self.tokenizer.decode
        )
        cfg = self.coderl
        result = await run_sample(task, engine, cfg.rollout, cfg.sandbox, self.chat, cfg.tasks.reward)
        fields = agent_loop_fields(result, int(self.rollout_config.response_length))
        room = int(self.rollout_config.prompt_length)
        if len(fields["prompt_ids"]) > room:  # verl pads prompts to prompt_length and never cuts them
            raise ConfigError(
                f"task {task.id}: coderl's prompt (system prompt, tools and issue) is {len(fields['prompt_ids'])} "
                f"tokens, over actor_rollout_ref.rollout.prompt_length={room}; raise it to at least that"
            )
        metrics = AgentLoopMetrics(**fields.pop("metrics"))
        return AgentLoopOutput(**fields, metrics=metrics)


# verl's worker loads the agent-loop YAML's entries (with their coderl_config / coderl_overrides) into
# its registry, and its first sample imports this module through that entry: registering here then
# would replace the entry with a bare one, and every later sample would run coderl's defaults. So an
# entry already there (the YAML's) is kept; a bare one is added only where there is none.
if AGENT_NAME not in _verl_agent_loop._agent_loop_registry:
    register(AGENT_NAME)(CoderlAgentLoop)
