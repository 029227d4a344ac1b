"""The embedded engine's scheduler: the loop its background thread runs.

Every step it (1) takes newly submitted requests, cancellations and weight updates from the inbox,
(2) admits waiting requests into the running batch up to ``max_batch_size``, (3) builds one ragged
forward pass of one token per decoding request plus prompt chunks of prefilling requests up to
``prefill_chunk`` tokens, and (4) samples, finishes and removes requests. So requests join and leave
the batch at every step.

With a ``session_id``, a request's KV cache is kept after it finishes (LRU, ``prefix_cache_mb``); the
session's next prompt reuses the longest common prefix and prefills only the new tokens; and a prompt
another session has computed (or is computing) is copied rather than prefilled again
(``share_prompts``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque

import torch

from coderl.engine.config import EngineConfig
from coderl.engine.draft import NGramDraft
from coderl.engine.kv_cache import KVRows, PrefixCache, SequenceKV, copy_prefix
from coderl.engine.requests import EndSession, Request, WeightUpdate, resolve, stop_reason
from coderl.engine.runner import Chunk, DecodeStep, ModelRunner
from coderl.engine.sampler import SampleRequest, sample, verify_draft
from coderl.engine.weights import empty_parameters, load_weights, restore_parameters
from coderl.errors import EngineError, EngineUnavailableError
from coderl.threads import release_free_memory
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


class Scheduler:
    """The engine thread's state and loop (see module docstring). Callers hand it work with
    :meth:`post`; everything else here runs on the engine thread, except :meth:`fail_all`."""

    def __init__(self, cfg: EngineConfig, name: str) -> None:
        self.cfg = cfg
        self.name = name
        self._runner: ModelRunner | None = None
        self.version = 0
        """The policy version: how many weight updates have loaded."""
        self.cond = threading.Condition()
        self.inbox: deque[Request | WeightUpdate | EndSession] = deque()
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.updates: deque[WeightUpdate] = deque()
        self.released: dict[str, torch.Size] | None = None
        """Parameter shapes while the weights are let go (release_weights); None while they are held."""
        self.prefix = PrefixCache(cfg.prefix_cache_mb * 2**20)
        self.rows: KVRows | None = None
        self.decode_step: DecodeStep | None = None
        self.stopping = False
        self.counters = {
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

    def attach(self, runner: ModelRunner, max_model_len: int) -> None:
        """Serve ``runner``'s model: with ``decode_attention=batched`` (or ``auto`` on CUDA) the running
        requests' KV lives in the rows of one tensor, and on CUDA a step in which every request decodes
        is replayed as a CUDA graph (``cuda_graphs``)."""
        self._runner = runner
        mode = self.cfg.decode_attention
        if mode == "batched" or (mode == "auto" and runner.device.type == "cuda"):
            self.rows = KVRows(runner.layout(), self.cfg.max_batch_size, max_model_len)
            if self.cfg.cuda_graphs and runner.device.type == "cuda":
                from coderl.engine.cuda_graphs import DecodeGraphs

                self.decode_step = DecodeGraphs(runner, self.rows)

    @property
    def runner(self) -> ModelRunner:
        if self._runner is None:
            raise EngineUnavailableError(f"{self.name} is not started; call 'await engine.start()' first")
        return self._runner

    def post(self, item: Request | WeightUpdate | EndSession | None = None) -> None:
        """Hand the engine thread an item (None: only wake it, e.g. to see a cancellation)."""
        with self.cond:
            if item is not None:
                self.inbox.append(item)
            self.cond.notify_all()

    def stop(self) -> None:
        """Ask the loop to end (it fails whatever is left)."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

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

    def run(self) -> None:
        """The engine thread's body: serve until stopped."""
        try:
            self._serve()
        except BaseException as exc:  # a bug here must not leave every caller waiting forever
            log.exception("%s: engine thread failed", self.name)
            with self.cond:
                self.stopping = True  # healthy() is False; new requests are refused
            self.fail_all(EngineUnavailableError(f"{self.name}: the engine thread failed: {exc!r}"))

    def _serve(self) -> None:
        torch.set_grad_enabled(False)
        if self.cfg.batch_invariant != "off" and self.runner.device.type == "cpu":
            self._measure_invariance()  # on this thread: the kernels it picks may follow its OpenMP team
        trimmed = time.monotonic()
        while True:
            if time.monotonic() - trimmed > TRIM_EVERY_S or not (self.inbox or self.waiting or self.running):
                release_free_memory()  # see TRIM_EVERY_S
                trimmed = time.monotonic()
            with self.cond:
                while not (self.stopping or self.inbox or self.waiting or self.running or self.updates):
                    self.cond.wait()
                if self.stopping:
                    break
                while self.inbox:
                    item = self.inbox.popleft()
                    if isinstance(item, EndSession):
                        self.prefix.end(item.session_id)  # after the session's last request: inbox order
                    elif isinstance(item, WeightUpdate):
                        self.updates.append(item)
                    else:
                        self.waiting.append(item)
            self._drop_cancelled()
            if self.updates and self.updates[0].weights is None and not self.running:
                self._release(self.updates.popleft())
                continue
            if (
                self.updates
                and self.updates[0].weights is not None
                and (not self.running or self.cfg.update_mode == "interrupt")
            ):
                if self._apply_update(self.updates.popleft()):
                    for req in self.running:  # partial rollouts: their KV was the old weights'
                        assert req.kv is not None
                        req.kv.truncate(0)
                        self.counters["interrupted_requests"] += 1
                continue
            if not self.updates:
                self._admit()
            if self.running:
                try:
                    self._step()
                except Exception as exc:  # an engine fault fails the batch, not the engine
                    log.exception("%s: step failed", self.name)
                    for req in self.running:
                        resolve(
                            req.loop, req.future, error=EngineError(f"{self.name}: forward failed: {exc}")
                        )
                    self.running.clear()
                    if self.rows is not None:
                        self.rows.release_all()
        self.fail_all(EngineUnavailableError(f"{self.name} stopped"))

    def _drop_cancelled(self) -> None:
        for queue in (self.waiting, self.running):
            cancelled = [r for r in queue if r.cancelled]
            for req in cancelled:
                queue.remove(req)
                self._finish(req, "abort")

    def _admit(self) -> None:
        if self.released is not None:
            while self.waiting:
                req = self.waiting.popleft()
                error = EngineError(
                    f"{self.name}: its weights are released (release_weights); update_weights brings them back"
                )
                resolve(req.loop, req.future, error=error)
            return
        deferred: list[Request] = []
        while self.waiting and len(self.running) < self.cfg.max_batch_size:
            req = self.waiting.popleft()
            kv = self.prefix.take(req.session_id) if req.session_id and self.prefix.enabled else None
            own = min(common_prefix(kv.tokens, req.prompt), len(req.prompt) - 1) if kv is not None else 0
            # another's KV (an invariant request's: whole invariant pieces, and only over its own session's
            # KV when that too is whole pieces: a partial piece or decoded tokens are other bits)
            invariant = self._invariant(req)
            if self.cfg.share_prompts and not (invariant and kv is not None and own > kv.aligned):
                donor, ready, coming = self._donor(req.prompt, self._piece if invariant else 0)
                if coming - max(own, ready) >= MIN_SHARED:  # a running request is prefilling it: wait for it
                    if kv is not None and req.session_id:
                        self.prefix.put(req.session_id, kv)
                    deferred.append(req)
                    continue
                if donor is not None and ready - own >= MIN_SHARED:  # another session's KV of this prompt
                    kv = copy_prefix(donor, req.prompt[:ready], self.runner.layout())
                    self.counters["shared_prompt_tokens"] += ready
            if kv is None:
                kv = SequenceKV(self.runner.layout())
            # reuse the common prefix, but always leave one prompt token to compute the next logits from
            keep = min(common_prefix(kv.tokens, req.prompt), len(req.prompt) - 1)
            kv.truncate(keep)
            if self.rows is not None and not invariant:  # an invariant one attends alone
                try:
                    self.rows.bind(kv)
                except Exception as exc:  # e.g. its rows do not fit: this request fails, the engine goes on
                    if not isinstance(exc, EngineError):
                        log.exception("%s: could not place a request's KV", self.name)
                        exc = EngineError(f"{self.name}: could not place the request's KV: {exc!r}")
                    resolve(req.loop, req.future, error=exc)
                    continue
            req.kv = kv
            if self.cfg.speculate and kv.rows is None:  # drafts are verified by the per-sequence attention
                req.draft = NGramDraft(req.prompt + req.output)
                req.draft_len = self.cfg.speculate
            req.cached_tokens = keep
            req.policy_version = self.version
            self.running.append(req)
        self.waiting.extendleft(reversed(deferred))

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
        for kv in self.prefix.entries():
            n = whole(min(common_prefix(kv.tokens, prompt), kv.aligned if piece else kv.length, limit))
            if n > ready:
                best, ready = kv, n
        for other in self.running:
            if other.kv is None or other.policy_version != self.version:
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
        owners: list[Request] = []
        decoding = [r for r in self.running if len(r.pending()) == 1]
        prefilling = [r for r in self.running if len(r.pending()) > 1]
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
            self.counters["prefill_tokens"] += len(take)
        invariant = any(self._invariant(r) for r in owners)
        logits = self.runner.forward(chunks, self.decode_step, invariant=invariant)
        for kv in whole_pieces:
            kv.aligned += self._piece
        self.counters["invariant_steps"] += invariant
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
                self.counters["draft_tokens"] += len(proposed)
                self.counters["accepted_draft_tokens"] += kept
        now = time.perf_counter()
        self.counters["steps"] += 1
        for req in samplers:
            self._emit(req, *new[req.rid], now)

    @property
    def _piece(self) -> int:
        """A batch-invariant prompt piece, in tokens (``engine.invariant_chunk``, at most a step's
        ``prefill_chunk``)."""
        return min(self.cfg.invariant_chunk, self.cfg.prefill_chunk)

    def _invariant(self, req: Request) -> bool:
        """Whether this request's tokens must come out the same whatever shares its steps
        (``engine.batch_invariant``)."""
        mode = self.cfg.batch_invariant
        return mode == "all" or (mode == "greedy" and req.params.temperature == 0)

    def _draft(self, req: Request) -> list[int]:
        """Draft tokens for a decoding request (``engine.speculate``), never past its token budget."""
        if req.draft is None:
            return []
        if req.draft_len == 0:  # the last draft was rejected outright: a step without, then one token
            req.draft_len = 1
            return []
        room = min(req.draft_len, req.max_new - len(req.output) - 1)
        return req.draft.propose(room) if room > 0 else []

    def _emit(self, req: Request, tokens: list[int], logprobs: list[float], now: float) -> None:
        """Append a step's new tokens to a request (one, or a draft's accepted prefix and one more),
        stopping at the first that ends it; its cache keeps exactly the tokens before the last."""
        if not req.output:
            req.first_token_at = now
        assert req.kv is not None
        for tok, lp in zip(tokens, logprobs, strict=True):
            req.output.append(tok)
            req.logprobs.append(lp)
            req.versions.append(self.version)
            self.counters["generated_tokens"] += 1
            if req.draft is not None:
                req.draft.extend([tok])
            if req.sink is not None:  # in order, and before the future resolves (same thread-safe queue)
                with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody listens
                    req.loop.call_soon_threadsafe(req.sink, [tok], [lp])
            if (ended := stop_reason(req, tok)) is not None:
                reason, stop_token, stop_str, departed = ended
                req.kv.truncate(min(req.kv.length, len(req.prompt) + len(req.output) - 1))
                self.running.remove(req)
                self._finish(req, reason, stop_token=stop_token, stop_str=stop_str, departed=departed)
                return
        # a rejected draft's tail was written to the cache: forget it (the last token is pending)
        req.kv.truncate(min(req.kv.length, len(req.prompt) + len(req.output) - 1))

    def _finish(
        self,
        req: Request,
        reason: str,
        stop_token: int | None = None,
        stop_str: str | None = None,
        departed: bool = False,
    ) -> None:
        kv, req.kv = req.kv, None
        keep = kv is not None and bool(req.session_id) and reason != "abort" and self.prefix.enabled
        if kv is not None and kv.rows is not None:
            kv.rows.release(kv, keep)  # a kept sequence leaves its row with a copy of its own
        if keep and kv is not None and req.session_id:
            self.prefix.put(req.session_id, kv)
        now = time.perf_counter()
        self.counters["requests"] += 1
        self.counters["cached_tokens"] += req.cached_tokens
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
        resolve(req.loop, req.future, result=completion)

    def _release(self, upd: WeightUpdate) -> None:
        """Empty every parameter (shapes kept aside), the cached KV, computed by those weights, and the
        batched decode's KV rows (no request runs: the release waited for the batch to finish)."""
        if self.released is None:
            self.released = empty_parameters(self.runner.model)
            self.prefix.clear()
            if self.rows is not None:
                self.rows.free()
            from coderl.engine.cuda_graphs import DecodeGraphs

            if isinstance(self.decode_step, DecodeGraphs):  # its graphs read the old storage: new ones
                old = self.decode_step
                self.decode_step = DecodeGraphs(self.runner, old.rows, capture=old.capture)
            if self.runner.device.type == "cuda":
                torch.cuda.empty_cache()
            release_free_memory()
            log.info("%s: weights released until the next update", self.name)
        resolve(upd.loop, upd.future, result=self.version)

    def _apply_update(self, upd: WeightUpdate) -> bool:
        """Load the update's weights; False (the caller told why) when they do not load."""
        assert upd.weights is not None
        released = self.released is not None
        try:
            if self.released is not None:
                restore_parameters(self.runner.model, self.released)
            load_weights(self.runner.model, upd.weights)
        except Exception as exc:
            if released:  # nothing was loaded (load_weights checks first): still without weights
                empty_parameters(self.runner.model)
            resolve(
                upd.loop, upd.future, error=exc if isinstance(exc, EngineError) else EngineError(str(exc))
            )
            return False
        self.prefix.clear()  # cached KV was computed by the old weights
        self.released = None
        self.version += 1
        log.info("%s: weights updated, policy v%d", self.name, self.version)
        resolve(upd.loop, upd.future, result=self.version)
        return True

    def fail_all(self, error: Exception) -> None:
        with self.cond:
            items = [*self.inbox, *self.waiting, *self.running, *self.updates]
            self.inbox.clear()
            self.waiting.clear()
            self.running.clear()
            self.updates.clear()
            if self.rows is not None:
                self.rows.release_all()
        for item in items:
            if not isinstance(item, EndSession):
                resolve(item.loop, item.future, error=error)

