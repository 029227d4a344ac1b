"""Building a trajectory turn by turn, in token space only."""

from __future__ import annotations

import time
from collections import Counter

from coderl.engine.base import Engine
from coderl.engine.params import SamplingParams
from coderl.types import Completion, Trajectory


class TrajectoryBuilder:
    """Accumulates model tokens (mask 1) and environment tokens (mask 0) after a prompt.

    ``context`` is always ``prompt_ids + response_ids``: exactly what the next engine call sees.
    """

    def __init__(self, task_id: str, group_id: str, prompt_ids: list[int]) -> None:
        self.traj = Trajectory(task_id=task_id, group_id=group_id, prompt_ids=list(prompt_ids))
        self.policy_versions: list[int] = []
        self.tool_calls: Counter[str] = Counter()
        self.format_errors = 0
        self.truncated_turns = 0
        """Model turns the engine cut at their ``max_tokens`` (finish reason ``length``)."""
        self.tool_name_cuts = 0
        """Model turns the engine ended where their tool name went wrong (``Completion.departed``)."""
        self.guided_tokens = 0
        """Tokens of a demonstration the environment wrote in the model's place (a guided sample)."""
        self.engine_s = 0.0
        self.sandbox_s = 0.0
        self.turn_overheads: list[float] = []
        """Per turn: seconds spent in the framework itself (chat layer, parsing, bookkeeping)."""
        self.started = time.perf_counter()

    @property
    def context(self) -> list[int]:
        return self.traj.prompt_ids + self.traj.response_ids

    @property
    def response_len(self) -> int:
        return len(self.traj.response_ids)

    async def sample(self, engine: Engine, params: SamplingParams, session_id: str | None) -> Completion:
        t0 = time.perf_counter()
        completion = await engine.generate(self.context, params, session_id=session_id)
        self.engine_s += time.perf_counter() - t0
        self.add_model(completion)
        return completion

    def add_model(self, completion: Completion) -> None:
        t = self.traj
        t.response_ids += completion.token_ids
        t.response_mask += [1] * len(completion.token_ids)
        t.logprobs += completion.logprobs
        t.token_versions += completion.token_versions or [completion.policy_version] * len(completion.token_ids)
        t.num_turns += 1
        self.truncated_turns += completion.finish_reason == "length"
        self.tool_name_cuts += completion.departed
        self.policy_versions.append(completion.policy_version)

    def add_env(self, ids: list[int]) -> None:
        t = self.traj
        t.response_ids += ids
        t.response_mask += [0] * len(ids)
        t.logprobs += [0.0] * len(ids)
        t.token_versions += [-1] * len(ids)

    def finish(self, exit_status: str, patch: str = "", error: str | None = None) -> Trajectory:
        t = self.traj
        t.exit_status = exit_status
        t.patch = patch
        t.error = error
        t.policy_version = min(self.policy_versions) if self.policy_versions else 0
        model_tokens = sum(t.response_mask)
        t.metrics.update(
            {
                "turns": float(t.num_turns),
                "prompt_tokens": float(len(t.prompt_ids)),
                "model_tokens": float(model_tokens),
                "env_tokens": float(len(t.response_ids) - model_tokens),
                "format_errors": float(self.format_errors),
                "truncated_turns": float(self.truncated_turns),
                "tool_name_cuts": float(self.tool_name_cuts),
                "guided_tokens": float(self.guided_tokens),
                "tool_calls": float(sum(self.tool_calls.values())),
                "engine_s": self.engine_s,
                "sandbox_s": self.sandbox_s,
                "wall_s": time.perf_counter() - self.started,
                "framework_s_per_turn": sorted(self.turn_overheads)[len(self.turn_overheads) // 2]
                if self.turn_overheads
                else 0.0,
            }
        )
        for name, n in self.tool_calls.items():
            t.metrics[f"tool_calls/{name}"] = float(n)
        return t
