"""Sampling parameters of one generation request."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class ExpectName(BaseModel):
    """A completion that must open with one of ``names`` (spaces and tabs around it allowed, no line
    break), then ``end``: the tool name a response prefix such as ``<tool_call>\n<function=`` leaves to
    the model (how Qwen3-Coder's XML calls are read: :mod:`coderl.chat.parse`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    names: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    end: str = Field(">", min_length=1)


class SamplingParams(BaseModel):
    """How to sample one completion. ``temperature=0`` means greedy decoding."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)

    max_tokens: int = Field(256, ge=1)
    """Most tokens to generate (the stop token counts)."""
    temperature: float = Field(1.0, ge=0.0)
    """Softmax temperature; 0 = greedy (argmax)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    top_k: int = Field(0, ge=0)
    """Keep only the k most likely tokens; 0 = off."""
    stop_token_ids: list[int] = []
    """Extra token ids that end the completion (the model's EOS ids always do unless ignore_eos)."""
    stop: list[Annotated[str, Field(min_length=1)]] = []
    """Strings that end the completion: generation stops at the token whose text completes one (that
    token is kept in ``token_ids``; ``Completion.stop_str`` names the string). Cut the text with
    :func:`coderl.engine.stops.cut_at_stop`."""
    ignore_eos: bool = False
    """Do not stop at the model's EOS ids (benchmarks use this for fixed lengths)."""
    expect_name: ExpectName | None = None
    """End the completion at the first token after which its text can no longer open with one of
    these names (that token is kept; ``Completion.departed`` is True): a reply whose tool name is
    already wrong stops there instead of running on to ``max_tokens``. The embedded and scripted
    engines check it (over the first tokens only); servers reached over HTTP ignore it and the whole
    reply comes back, which the caller's parser then finds wrong the same way."""
    seed: int | None = None
    """Per-request seed: the same seed, prompt and weights give the same tokens, alone or batched."""
