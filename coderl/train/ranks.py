"""The sharded actor's rank processes: the policy trained on N ranks with torch FSDP2 (``actor.ranks: N``).

:class:`coderl.train.sharded.ShardedActor` has the :class:`~coderl.train.actor.Actor` interface the
trainer uses and runs none of the model itself: it starts N rank processes — on this machine (:class:`ProcessRanks`,
``torch.multiprocessing`` spawn, a group over loopback) or as Ray actors on a cluster's nodes
(``cluster.actor=ray``: :class:`coderl.train.ray_ranks.RayRanks`) — which form a torch.distributed
group (gloo on CPU, NCCL on GPUs, one GPU per rank) and each build an :class:`Actor` sharded with FSDP2
(:mod:`coderl.train.fsdp`). Every call goes to every
rank; each forwards every N-th micro-batch of the batch (packing and prefix sharing as on one rank),
gradients are summed over ranks, so one update equals the 1-rank update up to float rounding.

What crosses the pipes (or Ray) is ``torch.save``-d (pickled): batches (token ids), the loss function (it must pickle: a
module-level class such as :class:`coderl.train.batch.BatchLoss`), and results — scores by sequence,
metrics, and the whole weights (gathered once on rank 0) for the engine. A loss function with a
``metric_state`` / ``merge_states`` pair (as :class:`~coderl.train.batch.BatchLoss` has) gets every
rank's state back after the step, so the metrics it collects cover the whole batch.
"""

from __future__ import annotations

import io
import logging
import os
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from coderl.errors import ConfigError, ModelError
from coderl.memory import bound_heap
from coderl.ports import free_port
from coderl.train.actor import Actor
from coderl.train.config import ActorConfig

log = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0
"""How long set-up waits for the ranks (each loads the model)."""


def _send(conn: Any, value: Any) -> None:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    conn.send_bytes(buffer.getvalue())


def _recv(conn: Any) -> Any:
    return torch.load(io.BytesIO(conn.recv_bytes()), map_location="cpu", weights_only=False)


def backend_for(cfg: ActorConfig) -> str:
    """The torch.distributed backend of ``cfg``'s ranks (``auto``: nccl on cuda, gloo on cpu)."""
    if cfg.dist_backend != "auto":
        return cfg.dist_backend
    cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    return "nccl" if cuda else "gloo"


def check_ranks(cfg: ActorConfig, local: bool = True) -> None:
    """Refuse a rank count this machine (``local``; else the Ray cluster, which checks its own GPUs at
    placement) cannot run before any process starts."""
    if cfg.lora_rank > 0:
        raise ConfigError(f"actor.ranks={cfg.ranks} with actor.lora_rank={cfg.lora_rank}: the sharded actor trains full weights only")
    backend = backend_for(cfg)
    if backend == "nccl":
        gpus = torch.cuda.device_count()
        if local and cfg.ranks > gpus:
            raise ConfigError(f"actor.ranks={cfg.ranks} needs a GPU per rank with nccl; this machine has {gpus}")
        if cfg.device == "cpu":
            raise ConfigError("actor.dist_backend=nccl needs actor.device=cuda (gloo trains on cpu)")


def _rank_main(
    rank: int,
    world: int,
    port: int,
    cfg: ActorConfig,
    model_path: Path | None,
    cache_dir: Path | None,
    value_head: bool,
    conn: Any,
) -> None:
    """One rank: join the group, build a sharded Actor, then run the driver's calls until told to stop."""
    import torch.distributed as dist

    try:
        bound_heap()  # as the coderl command does in the driver (coderl.memory)
        actor = start_rank(
            cfg, rank, world, f"tcp://127.0.0.1:{port}", model_path, cache_dir, value_head,
            threads=max(1, (os.cpu_count() or 1) // world), gpu=rank,
        )  # fmt: skip
        _send(conn, ("ok", None))
    except BaseException as exc:
        _send(conn, ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        return
    while True:
        try:
            method, args, kwargs = _recv(conn)
        except EOFError:  # the driver is gone
            break
        if method == "stop":
            break
        try:
            result = run_call(actor, method, args, kwargs)
            _send(conn, ("ok", result))
        except BaseException as exc:
            _send(conn, ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    if dist.is_initialized():
        dist.destroy_process_group()


def start_rank(
    cfg: ActorConfig,
    rank: int,
    world: int,
    init_method: str,
    model_path: Path | None,
    cache_dir: Path | None,
    value_head: bool,
    threads: int,
    gpu: int,
) -> Actor:
    """Join the process group at ``init_method`` as ``rank`` of ``world`` and build this rank's sharded
    :class:`Actor` (``gpu``: the CUDA device it uses with NCCL)."""
    import torch.distributed as dist

    torch.set_num_threads(threads)
    backend = backend_for(cfg)
    if backend == "nccl":
        torch.cuda.set_device(gpu)
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world, timeout=timedelta(seconds=START_TIMEOUT_S)
    )
    actor = Actor(cfg, model_path, cache_dir, value_head=value_head, sharded=True)
    actor.setup()
    return actor


def run_call(actor: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if method == "train_step":
        loss_fn = args[3]
        metrics = actor.train_step(*args, **kwargs)
        return metrics, (loss_fn.metric_state() if hasattr(loss_fn, "metric_state") else None)
    if method == "state_dict_for_engine":
        return actor.state_dict_for_engine() if actor.rank == 0 else _sync_only(actor)
    return getattr(actor, method)(*args, **kwargs)


def _sync_only(actor: Any) -> None:
    actor.state_dict_for_engine()  # the gather is a collective: the other ranks take part, return nothing


class ProcessRanks:
    """The ranks as processes on this machine, each talking to the driver over a pipe."""

    def __init__(self, cfg: ActorConfig, model_path: Path | None, cache_dir: Path | None, value_head: bool) -> None:
        self.cfg = cfg
        self.model_path = model_path
        self.cache_dir = cache_dir
        self.value_head = value_head
        self._procs: list[Any] = []
        self._conns: list[Any] = []

    def start(self) -> None:
        """Start the ranks; each loads the model and shards it. Raises the first rank's error."""
        check_ranks(self.cfg)
        ctx = torch.multiprocessing.get_context("spawn")
        port = free_port()
        for rank in range(self.cfg.ranks):
            ours, theirs = ctx.Pipe()
            args = (rank, self.cfg.ranks, port, self.cfg, self.model_path, self.cache_dir, self.value_head, theirs)
            proc = ctx.Process(target=_rank_main, args=args, daemon=True, name=f"coderl-actor-rank{rank}")
            proc.start()
            theirs.close()
            self._procs.append(proc)
            self._conns.append(ours)
        try:
            self._collect()
        except BaseException:
            self.close()
            raise

    def _collect(self) -> list[Any]:
        results: list[Any] = []
        errors: list[str] = []
        for rank, conn in enumerate(self._conns):
            try:
                status, value = _recv(conn)
            except EOFError:
                code = self._procs[rank].exitcode
                status, value = "error", f"the rank process ended (exit code {code})"
            if status == "error":
                errors.append(f"rank {rank}: {value}")
            results.append(value)
        if errors:
            raise ModelError("sharded actor: " + "\n".join(errors))
        return results

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """Every rank runs ``method``; their results in rank order."""
        for conn in self._conns:
            _send(conn, (method, args, kwargs))
        return self._collect()

    def save(self, folder: Path) -> None:
        self.call("save", (folder,), {})  # rank 0 writes: this machine's disk

    def load(self, folder: Path) -> None:
        self.call("load", (folder,), {})

    def close(self) -> None:
        for conn in self._conns:
            try:
                _send(conn, ("stop", (), {}))
            except (OSError, ValueError):
                pass
        for proc in self._procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        self._procs, self._conns = [], []
