"""The embedded engine: a PyTorch model served in-process with continuous batching.

A background thread runs the scheduling loop (:mod:`coderl.engine.scheduler`): requests join and leave
the running batch at every step, a session's KV is kept for its next prompt, and with
``decode_attention=batched`` (the default on CUDA) the decode step attends for all running requests
in one call, replayed as a CUDA graph on CUDA (``cuda_graphs``). This module is the asyncio side:
it loads the model, checks and submits requests, and hands weight updates to that thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Mapping, Sized
from pathlib import Path
from typing import Any

import torch

from coderl.engine.base import Engine, TokenSink
from coderl.engine.config import EngineConfig, ModelConfig
from coderl.engine.packed import can_pack, pack_linears
from coderl.engine.params import SamplingParams
from coderl.engine.requests import EndSession, Request, WeightUpdate, retrieved
from coderl.engine.runner import ModelRunner
from coderl.engine.scheduler import Scheduler
from coderl.engine.stops import NameWatch, StopWatch
from coderl.errors import EngineError, EngineUnavailableError, PromptTooLongError
from coderl.threads import in_own_thread
from coderl.types import Completion

log = logging.getLogger(__name__)


class EmbeddedEngine(Engine):
    """In-process engine over a Hugging Face checkpoint (see module docstring)."""

    def __init__(
        self, engine: EngineConfig, model: ModelConfig, seed: int = 0, name: str = "embedded-0"
    ) -> None:
        self._sched = Scheduler(engine, name)
        self.model_cfg = model
        self.name = name
        self._seed = seed
        self._runner: ModelRunner | None = None
        self._tokenizer: Any = None
        self.checkpoint: Path | None = None
        self._base: dict[str, torch.Tensor] | None = None
        self.eos_token_ids: frozenset[int] = frozenset()
        self.max_model_len = 0
        self._ids = itertools.count()
        self._seed_rng = torch.Generator().manual_seed(seed)
        self._thread: threading.Thread | None = None
        self._slots: asyncio.Semaphore | None = None
        self._outstanding = 0

    @property
    def cfg(self) -> EngineConfig:
        """The engine's settings; a new value also takes effect in the running scheduler (for the
        settings it reads per step, e.g. ``share_prompts``)."""
        return self._sched.cfg

    @cfg.setter
    def cfg(self, value: EngineConfig) -> None:
        self._sched.cfg = value

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        if self._thread is not None:
            return
        await in_own_thread(self._load)
        self._slots = asyncio.Semaphore(self.cfg.max_batch_size + self.cfg.max_queued)
        self._sched.stopping = False
        self._thread = threading.Thread(target=self._sched.run, name=f"coderl-{self.name}", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        from coderl.checkpoint import (
            eos_token_ids,
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
        self.eos_token_ids = frozenset(eos_token_ids(model, self._tokenizer))
        limit = self._runner.max_position
        self.max_model_len = min(self.cfg.max_model_len or limit, limit)
        self._sched.attach(self._runner, self.max_model_len)
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
            "batched" if self._sched.rows is not None else "per-sequence",
            ", CUDA graphs" if self._sched.decode_step is not None else "",
            # a greedy run's bits depend on the thread count (docs/engine.md): say it
            f", {torch.get_num_threads()} torch threads" if self._runner.device.type == "cpu" else "",
            0,
        )

    async def stop(self) -> None:
        thread = self._thread
        if thread is None:
            return
        self._sched.stop()
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
        return self._sched.version

    async def healthy(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._sched.stopping

    def has_session(self, session_id: str) -> bool:
        """Whether the prefix cache still holds this session's KV."""
        return session_id in self._sched.prefix

    def stats(self) -> dict[str, Any]:
        sched = self._sched
        with sched.cond:
            return {
                "name": self.name,
                "in_flight": self._outstanding,
                "running": len(sched.running),
                "waiting": len(sched.waiting) + sum(isinstance(x, Request) for x in sched.inbox),
                "policy_version": sched.version,
                "weights_released": sched.released is not None,
                "prefix_cache_entries": len(sched.prefix),
                "prefix_cache_mb": sched.prefix.nbytes / 2**20,
                "prefix_cache_hits": sched.prefix.hits,
                "prefix_cache_misses": sched.prefix.misses,
                "decode_attention": "batched" if sched.rows is not None else "per_sequence",
                "kv_rows_capacity": sched.rows.capacity if sched.rows is not None else 0,
                "cuda_graphs": len(sched.decode_step) if isinstance(sched.decode_step, Sized) else 0,
                **sched.counters,
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
        if self._thread is None or self._sched.stopping or self._slots is None:
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
            req = Request(
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
            with self._sched.cond:
                self._outstanding += 1
            self._sched.post(req)
            try:
                return await asyncio.shield(req.future)
            except asyncio.CancelledError:
                req.cancelled = True
                req.future.add_done_callback(retrieved)  # nobody awaits it now: an error later is no news
                self._sched.post()
                raise
            finally:
                with self._sched.cond:
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
        self._sched.post(EndSession(session_id))

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
        if self._sched.stopping or not self._thread.is_alive():
            raise EngineUnavailableError(f"{self.name} is not running")
        loop = asyncio.get_running_loop()
        upd = WeightUpdate(weights, loop, loop.create_future())
        self._sched.post(upd)
        return await upd.future

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))
