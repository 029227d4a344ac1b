"""The embedded engine's decode step as CUDA graphs.

A small model's decode step on a GPU is bound by kernel launches, not by arithmetic: a few hundred
small kernels per step, each launched from Python. Replaying a captured graph launches them all at
once. A graph has fixed shapes and addresses, so one is captured per (batch size, attended length)
bucket on first use: the batch is padded up to a power of two (padding entries write into the KV
rows' scratch row), the attended length up to a power of two (at least 128, at most the rows'
capacity). When the KV rows are reallocated (a longer sequence arrived) the graphs are dropped and
captured again; weight updates copy into the same parameters, so graphs survive them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from coderl.engine.kv_cache import KVRows
from coderl.engine.runner import ModelRunner

log = logging.getLogger(__name__)

_MIN_SPAN = 128


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph | None  # None: run eagerly (capture=False)
    inputs: torch.Tensor  # [3, B]: token ids, positions, rows (int64, on the GPU)
    logits: torch.Tensor  # [B, V] float32, written by each replay


def bucket(n: int, limit: int) -> int:
    """The smallest power of two >= ``n``, but at most ``limit`` (``n <= limit``)."""
    size = 1
    while size < n:
        size *= 2
    return min(size, limit)


class DecodeGraphs:
    """Replays decode steps of ``runner`` over ``rows`` as CUDA graphs (a :class:`DecodeStep`).

    ``capture=False`` pads and buckets the same way but runs each step eagerly: how the padding is
    checked on a machine without a GPU.
    """

    def __init__(self, runner: ModelRunner, rows: KVRows, capture: bool = True) -> None:
        if capture and runner.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, the model is on {runner.device}")
        self.runner = runner
        self.rows = rows
        self.capture = capture
        self._graphs: dict[tuple[int, int], _Graph] = {}
        self._generation = rows.generation
        self._pool = torch.cuda.graph_pool_handle() if capture else None
        self.replays = 0

    def __len__(self) -> int:
        """Graphs held now (captured; not counting eager fallbacks)."""
        return sum(g.graph is not None for g in self._graphs.values())

    def __call__(self, ids: list[int], positions: list[int], rows: list[int]) -> torch.Tensor:
        if self.rows.generation != self._generation:  # the rows moved: every graph points at old memory
            self._graphs.clear()
            self._generation = self.rows.generation
            if self.capture:  # a pool whose graphs are all gone cannot take new captures
                self._pool = torch.cuda.graph_pool_handle()
        n = len(ids)
        size = bucket(n, self.rows.rows)
        span = bucket(max(max(positions) + 1, _MIN_SPAN), self.rows.capacity)
        graph = self._graphs.get((size, span))
        if graph is None:
            try:
                graph = self._capture(size, span)
            except RuntimeError as exc:  # decode on without graphs rather than fail every request
                log.warning("CUDA graph capture failed (%s); the decode step runs eagerly from now on", exc)
                self.capture = False
                self._graphs.clear()
                graph = self._capture(size, span)
            self._graphs[(size, span)] = graph
        pad = size - n
        host = torch.tensor(
            [ids + [0] * pad, positions + [0] * pad, rows + [self.rows.scratch] * pad], dtype=torch.long
        )  # [3, B]
        graph.inputs.copy_(host, non_blocking=True)
        if graph.graph is None:
            graph.logits = self._step(graph.inputs, span)
        else:
            graph.graph.replay()
        self.replays += 1
        return graph.logits[:n]

    def _step(self, inputs: torch.Tensor, span: int) -> torch.Tensor:
        return self.runner.decode_rows(self.rows, inputs[0], inputs[1], inputs[2], span)

    def _capture(self, size: int, span: int) -> _Graph:
        dev = self.runner.device
        inputs = torch.zeros((3, size), dtype=torch.long, device=dev)
        inputs[2] = self.rows.scratch  # warm-up and capture write only into the scratch row
        if not self.capture:
            return _Graph(None, inputs, torch.empty(0))

        def step() -> torch.Tensor:
            return self._step(inputs, span)

        side = torch.cuda.Stream(device=dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):  # lazy initialisation (cuBLAS handles, workspaces) outside capture
            for _ in range(2):
                step()
        torch.cuda.current_stream(dev).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: a trainer working on the same GPU from another thread does not break capture
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            logits = step()
        log.debug("captured the decode step for batch %d, span %d", size, span)
        return _Graph(graph, inputs, logits)
