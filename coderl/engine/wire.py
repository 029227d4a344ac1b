"""Request and response bodies of the token-in / token-out HTTP subset we speak.

Two upstream dialects, taken from the servers' own source (see docs/wire-formats.md for the cited
files and example bodies):

- **vLLM** OpenAI-compatible ``POST /v1/completions`` with ``prompt`` as a list of token ids; output
  ids come back in ``choices[0].token_ids`` when ``return_token_ids`` is set (newer vLLM) and always as
  ``"token_id:<id>"`` strings in ``choices[0].logprobs.tokens`` with ``return_tokens_as_token_ids``;
  per-token logprobs in ``choices[0].logprobs.token_logprobs``.
- **SGLang** native ``POST /generate`` with ``input_ids`` and ``sampling_params``; output ids in
  ``output_ids`` and ``meta_info.output_token_logprobs`` as ``[logprob, token_id, text]`` triples.

The coderl server answers both; it also accepts an extra ``session_id`` field (prefix-cache reuse)
and adds ``policy_version`` to its answers. Upstream servers ignore / never send those.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coderl.engine.params import SamplingParams
from coderl.types import Completion


def stop_strings(stop: str | list[str] | None) -> list[str]:
    """A ``stop`` field as both servers take it (one string or a list), empty strings dropped."""
    return [s for s in ([stop] if isinstance(stop, str) else stop or []) if s]


class CompletionsRequest(BaseModel):
    """vLLM / OpenAI ``POST /v1/completions`` (the token-id subset)."""

    model_config = ConfigDict(extra="ignore")  # OpenAI clients send fields we do not use

    model: str | None = None
    prompt: list[int] = Field(min_length=1)
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = -1
    seed: int | None = None
    stop_token_ids: list[int] | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    logprobs: int | None = None
    n: int = Field(1, ge=1, le=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    return_tokens_as_token_ids: bool = False
    return_token_ids: bool = False
    skip_special_tokens: bool = True
    session_id: str | None = None
    """coderl extension: route turns of one conversation to the same prefix-cache entry."""

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(self.top_k, 0),
            seed=self.seed,
            stop_token_ids=self.stop_token_ids or [],
            stop=stop_strings(self.stop),
            ignore_eos=self.ignore_eos,
        )


class SGLangSamplingParams(BaseModel):
    model_config = ConfigDict(extra="ignore")

    max_new_tokens: int = Field(128, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = -1
    stop_token_ids: list[int] | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    sampling_seed: int | None = None


class GenerateRequest(BaseModel):
    """SGLang ``POST /generate`` (the token-id subset)."""

    model_config = ConfigDict(extra="ignore")

    input_ids: list[int] = Field(min_length=1)
    sampling_params: SGLangSamplingParams = SGLangSamplingParams()
    return_logprob: bool = False
    stream: Literal[False] = False
    rid: str | None = None
    session_id: str | None = None
    """coderl extension, as for /v1/completions."""
    lora_path: str | None = None
    """SGLang: the name of a loaded LoRA adapter to sample with."""

    def sampling(self) -> SamplingParams:
        sp = self.sampling_params
        return SamplingParams(
            max_tokens=sp.max_new_tokens,
            temperature=sp.temperature,
            top_p=sp.top_p,
            top_k=max(sp.top_k, 0),
            seed=sp.sampling_seed,
            stop_token_ids=sp.stop_token_ids or [],
            stop=stop_strings(sp.stop),
            ignore_eos=sp.ignore_eos,
        )


class LoraAdapterRequest(BaseModel):
    """vLLM ``/v1/load_lora_adapter`` / SGLang ``/load_lora_adapter`` (and their unload: no path)."""

    model_config = ConfigDict(extra="ignore")

    lora_name: str = Field(min_length=1)
    lora_path: str | None = None


class EndSessionRequest(BaseModel):
    """coderl ``POST /end_session``: the session sends no more turns; its cached KV may go."""

    model_config = ConfigDict(extra="forbid")

    session_id: str = Field(min_length=1)


class UpdateWeightsRequest(BaseModel):
    """SGLang ``POST /update_weights_from_disk``: load a checkpoint folder saved by the trainer."""

    model_config = ConfigDict(extra="ignore")

    model_path: str
    load_format: str | None = None


def completions_response(
    c: Completion, model: str, request_id: str, created: int, text: str, token_strings: list[str] | None
) -> dict[str, Any]:
    """A vLLM-shaped /v1/completions body for one completion."""
    tokens = token_strings if token_strings is not None else [f"token_id:{t}" for t in c.token_ids]
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": {
                    "text_offset": [],
                    "token_logprobs": c.logprobs,
                    "tokens": tokens,
                    "top_logprobs": None,
                },
                "finish_reason": c.finish_reason if c.finish_reason != "abort" else "abort",
                "stop_reason": c.stop_token_id if c.stop_token_id is not None else c.stop_str,
                "token_ids": c.token_ids,
                "prompt_logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": c.prompt_tokens,
            "completion_tokens": len(c.token_ids),
            "total_tokens": c.prompt_tokens + len(c.token_ids),
            "prompt_tokens_details": {"cached_tokens": c.cached_tokens},
        },
        "policy_version": c.policy_version,
    }


def generate_response(c: Completion, request_id: str, text: str, with_logprobs: bool) -> dict[str, Any]:
    """An SGLang-shaped /generate body for one completion."""
    if c.finish_reason == "stop":
        matched = c.stop_token_id if c.stop_token_id is not None else c.stop_str
        finish: dict[str, Any] = {"type": "stop", "matched": matched}
    elif c.finish_reason == "length":
        finish = {"type": "length", "length": len(c.token_ids)}
    else:
        finish = {"type": "abort", "message": "aborted"}
    meta: dict[str, Any] = {
        "id": request_id,
        "finish_reason": finish,
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": len(c.token_ids),
        "cached_tokens": c.cached_tokens,
        "e2e_latency": c.latency_s,
        "policy_version": c.policy_version,
    }
    if with_logprobs:
        meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(c.logprobs, c.token_ids, strict=True)]
    return {"text": text, "output_ids": c.token_ids, "meta_info": meta}
