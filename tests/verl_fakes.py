"""A stand-in for verl's rollout-server client (``LLMServerClient``) backed by a coderl engine: the same
``generate(request_id, *, prompt_ids, sampling_params)`` call and ``TokenOutput``-shaped answer, so the
bridge and verl's own agent-loop code run on CPU without verl's vLLM / SGLang servers. It records every
call, so tests compare what the loop returned with what the "server" sampled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coderl.engine.base import Engine
from coderl.engine.params import SamplingParams


@dataclass
class TokenOutput:
    """The fields of verl's ``TokenOutput`` the bridge reads."""

    token_ids: list[int]
    log_probs: list[float] | None
    stop_reason: str | None = "completed"
    extra_fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class ServedCall:
    request_id: str
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    token_ids: list[int]
    log_probs: list[float]


class EngineServerClient:
    """verl's server client, answered by a coderl engine (vLLM sampling names in, token ids out)."""

    def __init__(self, engine: Engine, with_logprobs: bool = True, global_steps: int | None = None) -> None:
        self.engine = engine
        self.with_logprobs = with_logprobs
        self.global_steps = global_steps  # what verl's servers put in extra_fields: their weights' step
        self.calls: list[ServedCall] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> TokenOutput:
        p = sampling_params
        params = SamplingParams(
            max_tokens=p["max_tokens"],
            temperature=p.get("temperature", 1.0),
            top_p=p.get("top_p", 1.0),
            top_k=max(0, p.get("top_k", -1)),
            stop=p.get("stop", []),
            stop_token_ids=p.get("stop_token_ids", []),
            seed=p.get("seed"),
        )
        c = await self.engine.generate(list(prompt_ids), params, session_id=request_id)
        self.calls.append(ServedCall(request_id, list(prompt_ids), dict(p), c.token_ids, c.logprobs))
        extra = {} if self.global_steps is None else {"global_steps": self.global_steps}
        return TokenOutput(c.token_ids, c.logprobs if self.with_logprobs else None, extra_fields=extra)
