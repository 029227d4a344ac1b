"""Sampling parameters of one generation request."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


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
    seed: int | None = None
    """Per-request seed: the same seed, prompt and weights give the same tokens, alone or batched."""
