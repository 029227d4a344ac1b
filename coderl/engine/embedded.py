"""The embedded engine: a PyTorch model served in-process with continuous batching.

A background thread runs the scheduling loop. Every step it (1) takes newly submitted requests,
cancellations and weight updates from the inbox, (2) admits waiting requests into the running batch
up to ``max_batch_size``, (3) builds one ragged forward pass of one token per decoding request plus
prompt chunks of prefilling requests up to ``prefill_chunk`` tokens, and (4) samples, finishes and
removes requests. So requests join and leave the batch at every step.

With a ``session_id``, a request's KV cache is kept after it finishes (LRU, ``prefix_cache_mb``); the
session's next prompt reuses the longest common prefix and prefills only the new tokens.

With ``decode_attention=batched`` (the default on CUDA) the running requests' KV lives in the rows of
one tensor, so the decode step attends for all of them in one call, and on CUDA a step in which every
request decodes is replayed as a CUDA graph (``cuda_graphs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from coderl.engine.base import Engine, TokenSink
from coderl.engine.config import EngineConfig, ModelConfig
from coderl.engine.draft import NGramDraft
from coderl.engine.kv_cache import KVRows, PrefixCache, SequenceKV, copy_prefix
from coderl.engine.packed import can_pack, drop_packed, pack_linears
from coderl.engine.params import SamplingParams
from coderl.engine.runner import Chunk, DecodeStep, ModelRunner
from coderl.engine.sampler import SampleRequest, sample, verify_draft
from coderl.engine.stops import NameWatch, StopWatch
from coderl.engine.weights import load_weights
from coderl.errors import EngineError, EngineUnavailableError, PromptTooLongError
from coderl.threads import in_own_thread, release_free_memory
from coderl.tokens import common_prefix
from coderl.types import Completion

log = logging.getLogger(__name__)

TRIM_EVERY_S = 10.0
"""While it serves, the engine thread hands its arena's free pages back at most this often (and each
time it runs out of work): a sequence's KV grows by reallocation and is freed when the sequence ends,
and glibc keeps what a thread freed resident in that thread's arena."""

MIN_SHARED = 32
"""Shortest prompt prefix worth taking from another session (or waiting for), in tokens."""


def prefill_piece(computed: int, pending: int, chunk: int) -> int:
    """How many of a sequence's ``pending`` tokens one step prefills, its KV computed up to
    ``computed``: up to the next multiple of ``chunk`` (``engine.invariant_chunk``) from the sequence's
    start, never more. So a prompt's KV is computed in the same pieces whatever else shares the
    engine's steps, and its bits (bfloat16 sums grouped by the piece's attention) are the same alone
    and in a busy batch: greedy decoding is reproducible."""
    return min(pending, chunk - computed % chunk)


@dataclass(eq=False)
class _Request:
    rid: int
    prompt: list[int]
    params: SamplingParams
    session_id: str | None
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Completion]
    generator: torch.Generator
    stop_ids: frozenset[int]
    max_new: int
    stops: StopWatch | None
    names: NameWatch | None
    sink: TokenSink | None
    submitted: float
    kv: SequenceKV | None = None
    output: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    cached_tokens: int = 0
    first_token_at: float = 0.0
    policy_version: int = 0
    versions: list[int] = field(default_factory=list)
    """The policy version of each sampled token (an interrupting update changes it mid-request)."""
    cancelled: bool = False
    draft: NGramDraft | None = None
    """Prompt and output so far, indexed for draft tokens (``engine.speculate``); None: no drafts."""
    draft_len: int = 0
    """How many tokens the next draft may have: it grows while drafts are kept whole and shrinks to
    what was kept when one is not (0: skip a step, then try one token), so a request that has stopped
    copying costs the batch few verified rows (on a CPU every row of a step's matmuls costs)."""

    def pending(self) -> list[int]:
        """Tokens whose KV is not computed yet: the prompt's rest, or the last sampled token; after an
        interrupting update, the whole context again (prompt and the tokens sampled so far)."""
        assert self.kv is not None
        done = self.kv.length
        if done < len(self.prompt):
            return self.prompt[done:] + self.output
        return self.output[done - len(self.prompt) :]


@dataclass(eq=False)
class _WeightUpdate:
    weights: Mapping[str, torch.Tensor] | str | Path | None
    """None: let go of the weights (:meth:`EmbeddedEngine.release_weights`)."""
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[int]


@dataclass(eq=False)
class _EndSession:
    session_id: str


class EmbeddedEngine(Engine):
    """In-process engine over a Hugging Face checkpoint (see module docstring)."""

    def __init__(
        self, engine: EngineConfig, model: ModelConfig, seed: int = 0, name: str = "embedded-0"
    ) -> None:
        self.cfg = engine
        self.model_cfg = model
        self.name = name
        self._seed = seed
        self._runner: ModelRunner | None = None
        self._tokenizer: Any = None
        self.checkpoint: Path | None = None
        self._base: dict[str, torch.Tensor] | None = None
        self.eos_token_ids: frozenset[int] = frozenset()
        self.max_model_len = 0
        self._version = 0
        self._ids = itertools.count()
        self._seed_rng = torch.Generator().manual_seed(seed)
        self._cond = threading.Condition()
        self._inbox: deque[_Request | _WeightUpdate | _EndSession] = deque()
        self._waiting: deque[_Request] = deque()
        self._running: list[_Request] = []
        self._updates: deque[_WeightUpdate] = deque()
        self._released: dict[str, torch.Size] | None = None
        """Parameter shapes while the weights are let go (release_weights); None while they are held."""
        self._prefix = PrefixCache(engine.prefix_cache_mb * 2**20)
        self._rows: KVRows | None = None
        self._decode_step: DecodeStep | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._slots: asyncio.Semaphore | None = None
        self._outstanding = 0
        self._counters = {
            "requests": 0,
            "generated_tokens": 0,
            "prefill_tokens": 0,
            "cached_tokens": 0,
            "steps": 0,
            "interrupted_requests": 0,
            "shared_prompt_tokens": 0,
            "draft_tokens": 0,
            "accepted_draft_tokens": 0,
            "invariant_steps": 0,
        }

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        if self._thread is not None:
            return
        await in_own_thread(self._load)
        self._slots = asyncio.Semaphore(self.cfg.max_batch_size + self.cfg.max_queued)
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=f"coderl-{self.name}", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        from coderl.checkpoint import (
            load_model,
            load_tokenizer,
            resolve_checkpoint,
            torch_device,
            torch_dtype,
        )

        self.checkpoint = resolve_checkpoint(self.model_cfg.path, self.model_cfg.cache_dir)
        device = torch_device(self.model_cfg.device)
        dtype = torch_dtype(self.model_cfg.dtype)
        model = load_model(self.checkpoint, dtype, device)
        packed = self.cfg.pack_weights and can_pack(device, dtype) and pack_linears(model) > 0
        self._runner = ModelRunner(model)
        self._tokenizer = load_tokenizer(self.checkpoint)
        self.eos_token_ids = frozenset(_eos_ids(model, self._tokenizer))
        limit = self._runner.max_position
        self.max_model_len = min(self.cfg.max_model_len or limit, limit)
        mode = self.cfg.decode_attention
        if mode == "batched" or (mode == "auto" and self._runner.device.type == "cuda"):
            self._rows = KVRows(self._runner.layout(), self.cfg.max_batch_size, self.max_model_len)
            if self.cfg.cuda_graphs and self._runner.device.type == "cuda":
                from coderl.engine.cuda_graphs import DecodeGraphs

                self._decode_step = DecodeGraphs(self._runner, self._rows)
        if self.cfg.batch_invariant != "off" and self._runner.device.type != "cpu":
            log.warning(
                "%s: engine.batch_invariant=%s is checked on the CPU only; on %s a row's bits may still "
                "depend on what shares its step (kernels chosen by row count)",
                self.name, self.cfg.batch_invariant, self._runner.device.type,
            )  # fmt: skip
        log.info(
            "%s: %s on %s (%s%s, %s decode attention%s%s), policy v%d",
            self.name,
            self.checkpoint.name,
            device,
            self.model_cfg.dtype,
            ", oneDNN-packed linear weights" if packed else "",
            "batched" if self._rows is not None else "per-sequence",
            ", CUDA graphs" if self._decode_step is not None else "",
            # a greedy run's bits depend on the thread count (docs/engine.md): say it
            f", {torch.get_num_threads()} torch threads" if self._runner.device.type == "cpu" else "",
            0,
        )

    async def stop(self) -> None:
        thread = self._thread
        if thread is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        await asyncio.to_thread(thread.join)
        self._thread = None

    @property
    def runner(self) -> ModelRunner:
        if self._runner is None:
            raise EngineUnavailableError(f"{self.name} is not started; call 'await engine.start()' first")
        return self._runner

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (available after start)."""
        if self._tokenizer is None:
            raise EngineUnavailableError(f"{self.name} is not started; call 'await engine.start()' first")
        return self._tokenizer

    @property
    def policy_version(self) -> int:
        return self._version

    async def healthy(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stopping

    def has_session(self, session_id: str) -> bool:
        """Whether the prefix cache still holds this session's KV."""
        return session_id in self._prefix

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {
                "name": self.name,
                "in_flight": self._outstanding,
                "running": len(self._running),
                "waiting": len(self._waiting) + sum(isinstance(x, _Request) for x in self._inbox),
                "policy_version": self._version,
                "weights_released": self._released is not None,
                "prefix_cache_entries": len(self._prefix),
                "prefix_cache_mb": self._prefix.nbytes / 2**20,
                "prefix_cache_hits": self._prefix.hits,
                "prefix_cache_misses": self._prefix.misses,
                "decode_attention": "batched" if self._rows is not None else "per_sequence",
                "kv_rows_capacity": self._rows.capacity if self._rows is not None else 0,
                "cuda_graphs": len(self._decode_step) if isinstance(self._decode_step, Sized) else 0,
                **self._counters,
            }

    # ----------------------------------------------------------------- API
    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None = None
    ) -> Completion:
        return await self._submit(prompt_ids, params, session_id, None)

    async def generate_streaming(
        self, prompt_ids: list[int], params: SamplingParams, on_tokens: TokenSink, session_id: str | None = None
    ) -> Completion:
        return await self._submit(prompt_ids, params, session_id, on_tokens)

    async def _submit(
        self, prompt_ids: list[int], params: SamplingParams, session_id: str | None, sink: TokenSink | None
    ) -> Completion:
        runner = self.runner
        if self._thread is None or self._stopping or self._slots is None:
            raise EngineUnavailableError(f"{self.name} is stopped")
        if not prompt_ids:
            raise EngineError("prompt_ids is empty; a prompt needs at least one token")
        if len(prompt_ids) >= self.max_model_len:
            raise PromptTooLongError(len(prompt_ids), self.max_model_len, runner.max_position)
        bad = [t for t in prompt_ids if not 0 <= t < runner.vocab_size]
        if bad:
            raise EngineError(f"token id {bad[0]} is outside the vocabulary [0, {runner.vocab_size})")
        loop = asyncio.get_running_loop()
        async with self._slots:  # back-pressure: waits while max_batch_size + max_queued are outstanding
            seed = (
                params.seed
                if params.seed is not None
                else int(torch.randint(0, 2**62, (), generator=self._seed_rng))
            )
            stop_ids = frozenset(params.stop_token_ids) | (
                frozenset() if params.ignore_eos else self.eos_token_ids
            )
            req = _Request(
                rid=next(self._ids),
                prompt=list(prompt_ids),
                params=params,
                session_id=session_id,
                loop=loop,
                future=loop.create_future(),
                generator=torch.Generator().manual_seed(seed),
                stop_ids=stop_ids,
                max_new=min(params.max_tokens, self.max_model_len - len(prompt_ids)),
                stops=StopWatch(self._decode, params.stop) if params.stop else None,
                names=NameWatch(self._decode, params.expect_name) if params.expect_name else None,
                sink=sink,
                submitted=time.perf_counter(),
            )
            with self._cond:
                self._outstanding += 1
                self._inbox.append(req)
                self._cond.notify_all()
            try:
                return await asyncio.shield(req.future)
            except asyncio.CancelledError:
                req.cancelled = True
                req.future.add_done_callback(_retrieved)  # nobody awaits it now: an error later is no news
                with self._cond:
                    self._cond.notify_all()
                raise
            finally:
                with self._cond:
                    self._outstanding -= 1

    async def load_lora_adapter(self, path: str | Path) -> int:
        """Merge the adapter into the checkpoint's base weights (this engine has no LoRA kernels, and
        RL serves one adapter at a time) and swap them in like any weight update."""
        from coderl.engine.lora import merge_adapter

        base = await in_own_thread(self._base_weights)
        merged = await in_own_thread(merge_adapter, base, path)
        return await self.update_weights(merged)

    async def unload_lora_adapter(self) -> int:
        return await self.update_weights(await in_own_thread(self._base_weights))

    def _base_weights(self) -> dict[str, torch.Tensor]:
        """The checkpoint's own weights (read once): what adapters are merged into."""
        if self._base is None:
            if self.checkpoint is None:
                raise EngineUnavailableError(f"{self.name} is not started")
            from coderl.engine.weights import read_weights

            self._base = read_weights(self.checkpoint)
        return self._base

    async def end_session(self, session_id: str) -> None:
        """Let go of the session's cached KV (:meth:`PrefixCache.end`), in the engine thread."""
        if self._thread is None:
            return
        with self._cond:
            self._inbox.append(_EndSession(session_id))
            self._cond.notify_all()

    async def release_weights(self) -> bool:
        """Let go of the weights (their memory goes back to the system) once the running requests have
        finished; the next :meth:`update_weights` brings a full set back. Requests still waiting then,
        and those that come before that update, fail at once."""
        await self._queue_update(None)
        return True

    async def update_weights(self, weights: Mapping[str, torch.Tensor] | str | Path) -> int:
        return await self._queue_update(weights)

    async def _queue_update(self, weights: Mapping[str, torch.Tensor] | str | Path | None) -> int:
        """Hand a weight update (None: a release) to the engine thread; its policy version after it."""
        if self._thread is None:
            raise EngineUnavailableError(f"{self.name} is not started")
        if self._stopping or not self._thread.is_alive():
            raise EngineUnavailableError(f"{self.name} is not running")
        loop = asyncio.get_running_loop()
        upd = _WeightUpdate(weights, loop, loop.create_future())
        with self._cond:
            self._inbox.append(upd)
            self._cond.notify_all()
        return await upd.future

    # ----------------------------------------------------------------- the loop (engine thread)
    def _measure_invariance(self) -> None:
        """Measure the row padding this CPU's kernels need for batch-invariant steps (``engine.batch_invariant``;
        :meth:`ModelRunner.measure_invariance`), and say so where it is not none, or where none helps."""
        runner = self.runner
        t0 = time.perf_counter()
        if not runner.measure_invariance():
            log.warning(
                "%s: engine.batch_invariant=%s: on this CPU a row's bits from the linear layers depend on how many rows "
                "share the call at every padding tried (up to %d rows): greedy turns may still differ with what "
                "shares their steps (engine.batch_invariant=off saves what it costs)",
                self.name, self.cfg.batch_invariant, runner.least_rows,
            )  # fmt: skip
        elif runner.least_rows > 1:
            log.info(
                "%s: batch-invariant steps pad row segments to %d rows (this CPU's kernels give a row other bits "
                "in fewer; measured in %.2f s)",
                self.name, runner.least_rows, time.perf_counter() - t0,
            )  # fmt: skip

    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # a bug here must not leave every caller waiting forever
            log.exception("%s: engine thread failed", self.name)
            with self._cond:
                self._stopping = True  # healthy() is False; new requests are refused
            self._fail_all(EngineUnavailableError(f"{self.name}: the engine thread failed: {exc!r}"))

    def _serve(self) -> None:
        torch.set_grad_enabled(False)
        if self.cfg.batch_invariant != "off" and self.runner.device.type == "cpu":
            self._measure_invariance()  # on this thread: the kernels it picks may follow its OpenMP team
        trimmed = time.monotonic()
        while True:
            if time.monotonic() - trimmed > TRIM_EVERY_S or not (self._inbox or self._waiting or self._running):
                release_free_memory()  # see TRIM_EVERY_S
                trimmed = time.monotonic()
            with self._cond:
                while not (self._stopping or self._inbox or self._waiting or self._running or self._updates):
                    self._cond.wait()
                if self._stopping:
                    break
                while self._inbox:
                    item = self._inbox.popleft()
                    if isinstance(item, _EndSession):
                        self._prefix.end(item.session_id)  # after the session's last request: inbox order
                    elif isinstance(item, _WeightUpdate):
                        self._updates.append(item)
                    else:
                        self._waiting.append(item)
            self._drop_cancelled()
            if self._updates and self._updates[0].weights is None and not self._running:
                self._release(self._updates.popleft())
                continue
            if (
                self._updates
                and self._updates[0].weights is not None
                and (not self._running or self.cfg.update_mode == "interrupt")
            ):
                if self._apply_update(self._updates.popleft()):
                    for req in self._running:  # partial rollouts: their KV was the old weights'
                        assert req.kv is not None
                        req.kv.truncate(0)
                        self._counters["interrupted_requests"] += 1
                continue
            if not self._updates:
                self._admit()
            if self._running:
                try:
                    self._step()
                except Exception as exc:  # an engine fault fails the batch, not the engine
                    log.exception("%s: step failed", self.name)
                    for req in self._running:
                        _resolve(
                            req.loop, req.future, error=EngineError(f"{self.name}: forward failed: {exc}")
                        )
                    self._running.clear()
                    if self._rows is not None:
                        self._rows.release_all()
        self._fail_all(EngineUnavailableError(f"{self.name} stopped"))

    def _drop_cancelled(self) -> None:
        for queue in (self._waiting, self._running):
            cancelled = [r for r in queue if r.cancelled]
            for req in cancelled:
                queue.remove(req)
                self._finish(req, "abort")

    def _admit(self) -> None:
        if self._released is not None:
            while self._waiting:
                req = self._waiting.popleft()
                error = EngineError(
                    f"{self.name}: its weights are released (release_weights); update_weights brings them back"
                )
                _resolve(req.loop, req.future, error=error)
            return
        deferred: list[_Request] = []
        while self._waiting and len(self._running) < self.cfg.max_batch_size:
            req = self._waiting.popleft()
            kv = self._prefix.take(req.session_id) if req.session_id and self._prefix.enabled else None
            own = min(common_prefix(kv.tokens, req.prompt), len(req.prompt) - 1) if kv is not None else 0
            # another's KV (an invariant request's: whole invariant pieces, and only over its own session's
            # KV when that too is whole pieces: a partial piece or decoded tokens are other bits)
            invariant = self._invariant(req)
            if self.cfg.share_prompts and not (invariant and kv is not None and own > kv.aligned):
                donor, ready, coming = self._donor(req.prompt, self._piece if invariant else 0)
                if coming - max(own, ready) >= MIN_SHARED:  # a running request is prefilling it: wait for it
                    if kv is not None and req.session_id:
                        self._prefix.put(req.session_id, kv)
                    deferred.append(req)
                    continue
                if donor is not None and ready - own >= MIN_SHARED:  # another session's KV of this prompt
                    kv = copy_prefix(donor, req.prompt[:ready], self.runner.layout())
                    self._counters["shared_prompt_tokens"] += ready
            if kv is None:
                kv = SequenceKV(self.runner.layout())
            # reuse the common prefix, but always leave one prompt token to compute the next logits from
            keep = min(common_prefix(kv.tokens, req.prompt), len(req.prompt) - 1)
            kv.truncate(keep)
            if self._rows is not None and not invariant:  # an invariant one attends alone
                try:
                    self._rows.bind(kv)
                except Exception as exc:  # e.g. its rows do not fit: this request fails, the engine goes on
                    if not isinstance(exc, EngineError):
                        log.exception("%s: could not place a request's KV", self.name)
                        exc = EngineError(f"{self.name}: could not place the request's KV: {exc!r}")
                    _resolve(req.loop, req.future, error=exc)
                    continue
            req.kv = kv
            if self.cfg.speculate and kv.rows is None:  # drafts are verified by the per-sequence attention
                req.draft = NGramDraft(req.prompt + req.output)
                req.draft_len = self.cfg.speculate
            req.cached_tokens = keep
            req.policy_version = self._version
            self._running.append(req)
        self._waiting.extendleft(reversed(deferred))

    def _donor(self, prompt: list[int], piece: int = 0) -> tuple[SequenceKV | None, int, int]:
        """The sequence (cached, or running) holding the longest computed prefix of ``prompt`` and that
        length; and the longest prefix a running request shares with it, computed or not yet (then the
        caller waits for it, rather than prefill the same tokens twice). At most ``len(prompt) - 1``.

        ``piece`` (a batch-invariant request: ``engine.invariant_chunk``): whole pieces only, from the
        start, that an invariant request computed (:attr:`SequenceKV.aligned`), so the request's KV is
        the bits it would compute itself; and only an invariant request computes what it waits for."""

        def whole(n: int) -> int:
            return n // piece * piece if piece else n

        limit = len(prompt) - 1
        best: SequenceKV | None = None
        ready = coming = 0
        for kv in self._prefix.entries():
            n = whole(min(common_prefix(kv.tokens, prompt), kv.aligned if piece else kv.length, limit))
            if n > ready:
                best, ready = kv, n
        for other in self._running:
            if other.kv is None or other.policy_version != self._version:
                continue
            if piece and not self._invariant(other):
                continue
            shared = whole(min(common_prefix(other.prompt, prompt), limit))
            n = whole(min(shared, other.kv.aligned if piece else other.kv.length))
            # worth waiting for: a prefix it is computing (invariant: in whole pieces from the start)
            growing = not piece or (other.kv.length == other.kv.aligned < len(other.prompt))
            coming = max(coming, shared if growing else n)
            if n > ready and other.kv.data is not None:
                best, ready = other.kv, n
        return best, ready, coming

    def _step(self) -> None:
        budget = self.cfg.prefill_chunk
        chunks: list[Chunk] = []
        owners: list[_Request] = []
        decoding = [r for r in self._running if len(r.pending()) == 1]
        prefilling = [r for r in self._running if len(r.pending()) > 1]
        drafts: dict[int, list[int]] = {}  # request id -> the draft its chunk verifies
        whole_pieces: list[SequenceKV] = []  # invariant prompt pieces another session may take
        for req in decoding:
            assert req.kv is not None
            draft = self._draft(req)
            if draft:
                drafts[req.rid] = draft
            chunks.append(Chunk(req.kv, req.pending() + draft, want_logits=True, logit_rows=1 + len(draft)))
            owners.append(req)
        for req in prefilling:
            if budget <= 0:
                break
            assert req.kv is not None
            pending = req.pending()
            if self._invariant(req):
                start = req.kv.length
                take = pending[: prefill_piece(start, len(pending), self._piece)]
                if len(take) > budget:  # its piece waits for a step with room: pieces keep their boundaries
                    continue
                if start == req.kv.aligned and len(take) == self._piece:  # whole, from whole ones: shareable
                    whole_pieces.append(req.kv)
            else:
                take = pending[:budget]
            budget -= len(take)
            chunks.append(Chunk(req.kv, take, want_logits=len(take) == len(pending)))
            owners.append(req)
            self._counters["prefill_tokens"] += len(take)
        invariant = any(self._invariant(r) for r in owners)
        logits = self.runner.forward(chunks, self._decode_step, invariant=invariant)
        for kv in whole_pieces:
            kv.aligned += self._piece
        self._counters["invariant_steps"] += invariant
        samplers = [o for o, c in zip(owners, chunks, strict=True) if c.want_logits]
        plain = [r for r in samplers if r.rid not in drafts]
        at = 0  # each sampler's first logits row
        rows: list[int] = []
        for req in samplers:
            rows.append(at)
            at += 1 + len(drafts.get(req.rid, ()))
        first = [row for req, row in zip(samplers, rows, strict=True) if req.rid not in drafts]
        picked = logits if len(first) == logits.shape[0] else logits[first]
        tokens, logprobs = sample(picked, [SampleRequest(r.params, r.generator) for r in plain]) if plain else ([], [])
        new: dict[int, tuple[list[int], list[float]]] = {
            r.rid: ([t], [lp]) for r, t, lp in zip(plain, tokens, logprobs, strict=True)
        }
        for req, row in zip(samplers, rows, strict=True):
            if (proposed := drafts.get(req.rid)) is not None:
                new[req.rid] = verify_draft(
                    logits[row : row + 1 + len(proposed)], proposed, SampleRequest(req.params, req.generator)
                )
                kept = len(new[req.rid][0]) - 1
                req.draft_len = min(self.cfg.speculate, kept + 2) if kept == len(proposed) else kept
                self._counters["draft_tokens"] += len(proposed)
                self._counters["accepted_draft_tokens"] += kept
        now = time.perf_counter()
        self._counters["steps"] += 1
        for req in samplers:
            self._emit(req, *new[req.rid], now)

    @property
    def _piece(self) -> int:
        """A batch-invariant prompt piece, in tokens (``engine.invariant_chunk``, at most a step's
        ``prefill_chunk``)."""
        return min(self.cfg.invariant_chunk, self.cfg.prefill_chunk)

    def _invariant(self, req: _Request) -> bool:
        """Whether this request's tokens must come out the same whatever shares its steps
        (``engine.batch_invariant``)."""
        mode = self.cfg.batch_invariant
        return mode == "all" or (mode == "greedy" and req.params.temperature == 0)

    def _draft(self, req: _Request) -> list[int]:
        """Draft tokens for a decoding request (``engine.speculate``), never past its token budget."""
        if req.draft is None:
            return []
        if req.draft_len == 0:  # the last draft was rejected outright: a step without, then one token
            req.draft_len = 1
            return []
        room = min(req.draft_len, req.max_new - len(req.output) - 1)
        return req.draft.propose(room) if room > 0 else []

    def _emit(self, req: _Request, tokens: list[int], logprobs: list[float], now: float) -> None:
        """Append a step's new tokens to a request (one, or a draft's accepted prefix and one more),
        stopping at the first that ends it; its cache keeps exactly the tokens before the last."""
        if not req.output:
            req.first_token_at = now
        assert req.kv is not None
        for tok, lp in zip(tokens, logprobs, strict=True):
            req.output.append(tok)
            req.logprobs.append(lp)
            req.versions.append(self._version)
            self._counters["generated_tokens"] += 1
            if req.draft is not None:
                req.draft.extend([tok])
            if req.sink is not None:  # in order, and before the future resolves (same thread-safe queue)
                with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody listens
                    req.loop.call_soon_threadsafe(req.sink, [tok], [lp])
            reason: tuple[str, int | None, str | None] | None = None
            departed = False
            if tok in req.stop_ids:
                reason = ("stop", tok, None)
            elif req.stops is not None and (hit := req.stops.check(req.output)) is not None:
                reason = ("stop", None, hit)
            elif req.names is not None and req.names.check(req.output):
                reason, departed = ("stop", None, None), True
            elif len(req.output) >= req.max_new:
                reason = ("length", None, None)
            if reason is not None:
                req.kv.truncate(min(req.kv.length, len(req.prompt) + len(req.output) - 1))
                self._running.remove(req)
                self._finish(req, reason[0], stop_token=reason[1], stop_str=reason[2], departed=departed)
                return
        # a rejected draft's tail was written to the cache: forget it (the last token is pending)
        req.kv.truncate(min(req.kv.length, len(req.prompt) + len(req.output) - 1))

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def _finish(
        self,
        req: _Request,
        reason: str,
        stop_token: int | None = None,
        stop_str: str | None = None,
        departed: bool = False,
    ) -> None:
        kv, req.kv = req.kv, None
        keep = kv is not None and bool(req.session_id) and reason != "abort" and self._prefix.enabled
        if kv is not None and kv.rows is not None:
            kv.rows.release(kv, keep)  # a kept sequence leaves its row with a copy of its own
        if keep and kv is not None and req.session_id:
            self._prefix.put(req.session_id, kv)
        now = time.perf_counter()
        self._counters["requests"] += 1
        self._counters["cached_tokens"] += req.cached_tokens
        completion = Completion(
            token_ids=req.output,
            logprobs=req.logprobs,
            finish_reason=reason,  # type: ignore[arg-type]
            policy_version=req.policy_version,
            prompt_tokens=len(req.prompt),
            cached_tokens=req.cached_tokens,
            ttft_s=(req.first_token_at - req.submitted) if req.first_token_at else 0.0,
            latency_s=now - req.submitted,
            stop_token_id=stop_token,
            stop_str=stop_str,
            departed=departed,
            replica=self.name,
            token_versions=list(req.versions) if len(set(req.versions)) > 1 else [],
        )
        _resolve(req.loop, req.future, result=completion)

    def _release(self, upd: _WeightUpdate) -> None:
        """Empty every parameter (shapes kept aside), the cached KV, computed by those weights, and the
        batched decode's KV rows (no request runs: the release waited for the batch to finish)."""
        if self._released is None:
            self._released = {name: p.shape for name, p in self.runner.model.named_parameters()}
            self._empty_parameters()
            self._prefix.clear()
            if self._rows is not None:
                self._rows.free()
            from coderl.engine.cuda_graphs import DecodeGraphs

            if isinstance(self._decode_step, DecodeGraphs):  # its graphs read the old storage: new ones
                old = self._decode_step
                self._decode_step = DecodeGraphs(self.runner, old.rows, capture=old.capture)
            if self.runner.device.type == "cuda":
                torch.cuda.empty_cache()
            release_free_memory()
            log.info("%s: weights released until the next update", self.name)
        _resolve(upd.loop, upd.future, result=self._version)

    def _empty_parameters(self) -> None:
        drop_packed(self.runner.model)
        for p in self.runner.model.parameters():
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)

    def _restore_shapes(self) -> None:
        """Released weights get storage of their shapes again, for an update to fill."""
        assert self._released is not None
        params = dict(self.runner.model.named_parameters())
        for name, shape in self._released.items():
            p = params[name]
            p.data = torch.empty(shape, dtype=p.dtype, device=p.device)

    def _apply_update(self, upd: _WeightUpdate) -> bool:
        """Load the update's weights; False (the caller told why) when they do not load."""
        assert upd.weights is not None
        released = self._released is not None
        try:
            if released:
                self._restore_shapes()
            load_weights(self.runner.model, upd.weights)
        except Exception as exc:
            if released:  # nothing was loaded (load_weights checks first): still without weights
                self._empty_parameters()
            _resolve(
                upd.loop, upd.future, error=exc if isinstance(exc, EngineError) else EngineError(str(exc))
            )
            return False
        self._prefix.clear()  # cached KV was computed by the old weights
        self._released = None
        self._version += 1
        log.info("%s: weights updated, policy v%d", self.name, self._version)
        _resolve(upd.loop, upd.future, result=self._version)
        return True

    def _fail_all(self, error: Exception) -> None:
        with self._cond:
            items = [*self._inbox, *self._waiting, *self._running, *self._updates]
            self._inbox.clear()
            self._waiting.clear()
            self._running.clear()
            self._updates.clear()
            if self._rows is not None:
                self._rows.release_all()
        for item in items:
            if not isinstance(item, _EndSession):
                _resolve(item.loop, item.future, error=error)


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a shielded request's outcome as seen once its caller is gone (cancelled, or interrupted by
    Ctrl-C), so the engine's stop does not log "Future exception was never retrieved" for each one."""
    if not future.cancelled():
        future.exception()


def _resolve(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any = None,
    error: Exception | None = None,
) -> None:
    """Complete a future owned by another thread's event loop (ignoring ones already cancelled)."""

    def done() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    try:
        loop.call_soon_threadsafe(done)
    except RuntimeError:  # the caller's loop is closed; nobody is waiting any more
        pass


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list):
            ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
