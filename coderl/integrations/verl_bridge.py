"""What coderl needs to run inside verl, without verl installed: the engine adapter, one graded rollout,
its ``AgentLoopOutput`` fields, and tasks as verl's RL dataset.

verl's agent-loop workers give each sample a server client whose ``generate(request_id, *, prompt_ids,
sampling_params)`` returns the sampled ``token_ids`` and ``log_probs`` (sticky to one server per
request id). :class:`ServerClientEngine` makes that a coderl :class:`Engine`, so any coderl agent loop
runs against verl's vLLM / SGLang servers unchanged; :func:`run_sample` runs one task through it in a
coderl sandbox and grades it with the task's hidden tests; :func:`agent_loop_fields` turns the result
into the fields of verl's ``AgentLoopOutput``. :mod:`coderl.integrations.verl` (which needs verl) is the
thin class verl instantiates around these.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coderl.chat import ChatFormat
from coderl.engine.base import Engine
from coderl.engine.params import SamplingParams
from coderl.engine.stops import first_stop
from coderl.errors import EngineError, TaskError
from coderl.rollout.config import RolloutConfig
from coderl.rollout.context import ContextFactory
from coderl.rollout.runner import RolloutResult, RolloutSettings, run_rollouts, task_groups
from coderl.sandbox import SandboxSpec
from coderl.tasks.dataset import COLUMNS, row_task, task_row
from coderl.tasks.grading import RewardMode
from coderl.types import Completion, Task

if TYPE_CHECKING:
    import torch

SUPPORTED = ">=0.9,<0.10"
"""verl releases the bridge is written and tested against (the agent-loop API moves between them)."""

AGENT_NAME = "coderl"
"""The name the agent loop is registered under in verl (a dataset row's ``agent_name``)."""

VERL_SAMPLING = ("temperature", "top_p", "top_k", "repetition_penalty", "logprobs")
"""The sampling keys verl decides (training or validation settings); coderl's loop decides the rest."""


def check_verl_version(version: str) -> None:
    """Fail, naming the installed and supported versions, where verl's agent-loop API may differ."""
    m = re.match(r"(\d+)\.(\d+)", version)
    ok = m is not None and (int(m.group(1)), int(m.group(2))) == (0, 9)
    if not ok:
        raise ImportError(
            f"coderl.integrations.verl supports verl{SUPPORTED}; verl {version} is installed, whose agent-loop "
            f"API may differ (install a supported release: pip install 'verl{SUPPORTED}')"
        )


class ServerClientEngine(Engine):
    """A coderl engine over verl's server client. For one trajectory every call carries the same
    ``request_id`` (verl keeps it on one server, whose prefix cache then serves every turn). With
    ``request_id=None`` (a recording proxy serving many sessions) each call carries its session's id,
    so every session stays on one server; a call outside any session gets an id of its own.

    ``sampling`` is what verl passed to the agent loop: its temperature, top_p, top_k (and greedy
    settings for validation) replace the coderl loop's; the loop's per-turn ``max_tokens``, stop
    strings and stop tokens are sent as vLLM names them. ``decode`` (the tokenizer's) lets a stop
    string that ended a reply be named in the completion, as coderl's own engines do."""

    name = "verl"

    def __init__(
        self,
        client: Any,
        request_id: str | None,
        sampling: Mapping[str, Any] | None = None,
        decode: Callable[[list[int]], str] | None = None,
        policy_version: int = 0,
    ) -> None:
        self.client = client
        self.request_id = request_id
        self.sampling = {k: v for k, v in (sampling or {}).items() if k in VERL_SAMPLING}
        self.decode = decode
        self.version = policy_version
        self.requests = 0
        self.generated_tokens = 0

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def sampling_params(self, params: SamplingParams) -> dict[str, Any]:
        """The ``sampling_params`` dict sent to verl's server for one coderl request."""
        sent: dict[str, Any] = {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k or -1,
            "max_tokens": params.max_tokens,
            **self.sampling,
            "logprobs": True,  # coderl trains on the sampled tokens' logprobs: always asked for
        }
        if params.stop:
            sent["stop"] = list(params.stop)
            sent["include_stop_str_in_output"] = True
        if params.stop_token_ids:
            sent["stop_token_ids"] = list(params.stop_token_ids)
        if params.ignore_eos:
            sent["ignore_eos"] = True
        if params.seed is not None:
            sent["seed"] = params.seed
        return sent

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None = None
    ) -> Completion:
        started = time.perf_counter()
        out = await self.client.generate(
            request_id=self.request_id or session_id or f"coderl-{uuid.uuid4().hex}",
            prompt_ids=list(prompt_ids),
            sampling_params=self.sampling_params(params),
        )
        ids = [int(t) for t in out.token_ids]
        logprobs = getattr(out, "log_probs", None)
        if logprobs is None:
            raise EngineError(
                "verl's rollout server returned no log_probs; coderl trains on the sampled tokens' logprobs "
                "(set actor_rollout_ref.rollout.calculate_log_probs=True)"
            )
        if len(logprobs) != len(ids):
            raise EngineError(
                f"verl's rollout server returned {len(ids)} token ids but {len(logprobs)} log_probs"
            )
        stop_reason = getattr(out, "stop_reason", None)
        stop_str = None
        if params.stop and self.decode is not None and ids:
            found = first_stop(self.decode(ids), params.stop)
            stop_str = found[1] if found else None
        stop_token = ids[-1] if ids and ids[-1] in params.stop_token_ids else None
        if stop_reason == "aborted":
            finish = "abort"
        elif stop_str is not None or stop_token is not None or len(ids) < params.max_tokens:
            finish = "stop"
        else:
            finish = "length"
        self.requests += 1
        self.generated_tokens += len(ids)
        steps = (getattr(out, "extra_fields", None) or {}).get("global_steps")
        if isinstance(steps, int):  # the training step whose weights the server sampled with
            self.version = steps
        latency = time.perf_counter() - started
        return Completion(
            token_ids=ids,
            logprobs=[float(x) for x in logprobs],
            finish_reason=finish,  # type: ignore[arg-type]
            policy_version=self.version,
            prompt_tokens=len(prompt_ids),
            latency_s=latency,
            stop_token_id=stop_token,
            stop_str=stop_str,
            replica="verl",
        )

    async def update_weights(self, weights: Mapping[str, torch.Tensor] | str | Path) -> int:
        raise EngineError("under verl, verl syncs the rollout servers' weights; coderl's adapter cannot")

    @property
    def policy_version(self) -> int:
        return self.version

    def stats(self) -> dict[str, Any]:
        return {"requests": self.requests, "generated_tokens": self.generated_tokens}


async def run_sample(
    task: Task,
    engine: Engine,
    rollout: RolloutConfig,
    sandbox: SandboxSpec,
    chat: ChatFormat,
    reward: RewardMode = "resolved",
) -> RolloutResult:
    """One rollout of ``task`` by the coderl loop ``rollout.agent`` on ``engine``, in a fresh sandbox,
    graded by the task's hidden tests (the trajectory's reward set as ``reward`` says)."""
    contexts = ContextFactory(rollout, sandbox, chat)
    settings = RolloutSettings(
        agent=rollout.agent, max_sandboxes=1, grade=True, reward=reward, grade_concurrency=1
    )
    (result,) = await run_rollouts(task_groups([task], 1, tag="verl"), engine, contexts, settings)
    return result


def agent_loop_fields(result: RolloutResult, response_length: int | None = None) -> dict[str, Any]:
    """The fields of verl's ``AgentLoopOutput`` for one graded coderl rollout: the ids the server sampled
    (mask 1, with their logprobs) and the environment's (mask 0, logprob 0), cut to verl's
    ``response_length``; the grader's reward; timings in ``metrics``; what verl has no field for in
    ``extra_fields``. verl trains one sequence per sample, so further sequences of the rollout
    (:attr:`Trajectory.parts`, e.g. a rewritten history) are not returned: ``extra_fields`` counts them."""
    t = result.trajectory
    ids, mask, logprobs = list(t.response_ids), list(t.response_mask), [float(x) for x in t.logprobs]
    truncated = response_length is not None and len(ids) > response_length
    if truncated:
        ids, mask, logprobs = ids[:response_length], mask[:response_length], logprobs[:response_length]
    m = t.metrics
    return {
        "prompt_ids": list(t.prompt_ids),
        "response_ids": ids,
        "response_mask": mask,
        "response_logprobs": logprobs,
        "reward_score": float(t.reward),
        "num_turns": int(t.num_turns),
        "metrics": {
            "generate_sequences": float(m.get("engine_s", 0.0)),
            "tool_calls": float(m.get("sandbox_s", 0.0)),
            "compute_score": float(m.get("grade_s", 0.0)),
        },
        "extra_fields": {
            "coderl_task_id": t.task_id,
            "coderl_resolved": bool(result.resolved),
            "coderl_exit_status": t.exit_status,
            "coderl_tool_calls": int(m.get("tool_calls", 0)),
            "coderl_format_errors": int(m.get("format_errors", 0)),
            "coderl_truncated": truncated,
            "coderl_parts_dropped": len(t.parts),
            "coderl_error": t.error or "",
            "coderl_patch": t.patch,
        },
    }


# ---------------------------------------------------------------------------- datasets


def verl_rows(tasks: list[Task], agent_name: str = AGENT_NAME) -> list[dict[str, Any]]:
    """Rows of verl's RL dataset schema, one per task: ``prompt`` is the issue text (what verl's dataset
    filters on length); ``extra_info.coderl_task`` is the whole task, snapshot included (tar.gz), so the
    agent loop rebuilds it on any node with no shared storage."""
    return [
        {
            "data_source": f"coderl/{t.tier or 'tasks'}",
            "prompt": [{"role": "user", "content": t.instruction}],
            "ability": "coding",
            "reward_model": {"style": "rule", "ground_truth": t.id},
            "extra_info": {"index": i, "task_id": t.id, "coderl_task": task_row(t)},
            "agent_name": agent_name,
        }
        for i, t in enumerate(tasks)
    ]


def write_verl_parquet(tasks: list[Task], path: Path, agent_name: str = AGENT_NAME) -> None:
    """``tasks`` as a verl RL dataset (``data.train_files`` / ``data.val_files``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(verl_rows(tasks, agent_name)), path)


def task_of(extra_info: Mapping[str, Any] | None) -> Task:
    """The task a verl dataset row carries (its ``extra_info``, as verl hands it to the agent loop)."""
    row = (extra_info or {}).get("coderl_task")
    if not isinstance(row, Mapping):
        keys = sorted(extra_info or {})
        raise TaskError(
            f"the sample's extra_info has no coderl_task (keys: {keys}); write the dataset with "
            "'coderl tasks convert --format verl OUT.parquet'"
        )
    task_id = row.get("id") or (extra_info or {}).get("task_id") or "?"
    missing = [c for c in COLUMNS if c not in row or (c in ("id", "repo_archive") and not row[c])]
    if missing:
        raise TaskError(
            f"task {task_id}: extra_info.coderl_task lacks {missing} (the snapshot is repo_archive); write the "
            "dataset with 'coderl tasks convert --format verl OUT.parquet'"
        )
    try:
        return row_task(dict(row))
    except Exception as exc:
        raise TaskError(f"task {task_id}: extra_info.coderl_task does not unpack: {exc}") from exc
