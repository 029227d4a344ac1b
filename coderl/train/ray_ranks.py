"""The sharded actor's ranks as Ray actors (``cluster.actor=ray``): the trainer as rank actors on any
nodes of a Ray cluster.

Each rank is a :class:`RankActor` in its own placement-group bundle (``cluster.actor_cpus`` /
``actor_gpus`` / ``actor_resources``, strategy ``cluster.actor_placement``). Rank 0's node picks the
rendezvous (its IP as Ray sees it, a free port); all ranks then join one torch.distributed group there
(gloo on CPU, NCCL on GPUs: Ray gives each rank its GPU as device 0) and build their FSDP2 shard of the
:class:`~coderl.train.actor.Actor`. Calls and results travel through Ray (pickled), as they go through
pipes for :class:`~coderl.train.ranks.ProcessRanks`.

Nothing assumes a shared disk: a checkpoint is written by rank 0 on its node and its files are sent
back to the trainer, which writes them into the run directory (atomically, as :meth:`Actor.save`
does); resuming sends the trainer's checkpoint files once through Ray's object store and every rank
writes them on its node before loading. Each rank loads the base model from ``model.path`` on its own
node (the image in ``deploy/ray`` has the default model at the same path on every node).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from coderl.cluster.config import ClusterConfig
from coderl.cluster.files import read_files, write_files
from coderl.cluster.ray_rollouts import import_ray
from coderl.errors import ClusterError, ModelError
from coderl.train.config import ActorConfig
from coderl.train.ranks import START_TIMEOUT_S, free_port, run_call, start_rank


class RankActor:
    """One rank on its node (wrapped by ``ray.remote`` in :class:`RayRanks`)."""

    def __init__(
        self,
        rank: int,
        world: int,
        cfg: ActorConfig,
        model_path: Path | None,
        cache_dir: Path | None,
        value_head: bool,
        threads: int,
    ) -> None:
        self.rank = rank
        self.world = world
        self.cfg = cfg
        self.model_path = model_path
        self.cache_dir = cache_dir
        self.value_head = value_head
        self.threads = threads
        self.actor: Any = None
        self.dir = Path(tempfile.mkdtemp(prefix=f"coderl-rank{rank}-"))

    def rendezvous(self) -> str:
        """``tcp://IP:PORT`` on this node for the group to meet at (asked of rank 0)."""
        ray = import_ray()
        return f"tcp://{ray.util.get_node_ip_address()}:{free_port('0.0.0.0')}"

    def setup(self, init_method: str) -> dict[str, Any]:
        """Join the group and build this rank's shard; where it runs."""
        ray = import_ray()
        gpus = [int(g) for g in ray.get_gpu_ids()]
        self.actor = start_rank(
            self.cfg, self.rank, self.world, init_method, self.model_path, self.cache_dir, self.value_head,
            threads=self.threads, gpu=0 if gpus else self.rank,
        )  # fmt: skip
        return {"rank": self.rank, "node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return run_call(self.actor, method, args, kwargs)

    def save(self) -> dict[str, bytes] | None:
        """:meth:`Actor.save` on this node (a collective: every rank takes part); rank 0 returns the
        checkpoint's files (relative path -> bytes)."""
        folder = self.dir / "save"
        self.actor.save(folder)
        if self.rank != 0:
            return None
        files = read_files(folder)
        shutil.rmtree(folder, ignore_errors=True)
        return files

    def load(self, files: dict[str, bytes]) -> None:
        """Write a checkpoint's files on this node and :meth:`Actor.load` them."""
        folder = self.dir / "load"
        shutil.rmtree(folder, ignore_errors=True)
        write_files(folder, files)
        try:
            self.actor.load(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def stop(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        shutil.rmtree(self.dir, ignore_errors=True)


class RayRanks:
    """``actor.ranks`` :class:`RankActor` s on the Ray cluster the run has joined (module doc)."""

    def __init__(
        self,
        cfg: ActorConfig,
        model_path: Path | None,
        cache_dir: Path | None,
        value_head: bool,
        cluster: ClusterConfig,
    ) -> None:
        self.cfg = cfg
        self.model_path = model_path
        self.cache_dir = cache_dir
        self.value_head = value_head
        self.cluster = cluster
        self.ranks: list[Any] = []
        self.where: list[dict[str, Any]] = []
        self._group: Any = None

    def start(self) -> None:
        """Place the ranks, meet at rank 0's node, build the shards. Raises the ranks' errors."""
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ray = import_ray()
        if not ray.is_initialized():
            raise ClusterError("cluster.actor=ray: the run has not joined a Ray cluster (cluster.backend=ray does)")
        c, n = self.cluster, self.cfg.ranks
        res = {"CPU": c.actor_cpus, "GPU": c.actor_gpus, **c.actor_resources}
        bundle = {k: v for k, v in res.items() if v > 0}
        self._group = placement_group([bundle] * n, strategy=c.actor_placement)
        try:
            ray.get(self._group.ready(), timeout=c.placement_timeout_s)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise ClusterError(
                f"the Ray cluster cannot hold {n} actor ranks of {bundle} each (cluster.actor_placement="
                f"{c.actor_placement}) within {c.placement_timeout_s:g} s; it has {ray.cluster_resources()}; lower "
                "actor.ranks or cluster.actor_cpus / actor_gpus, or add nodes"
            ) from None
        remote = ray.remote(RankActor)
        threads = max(1, int(c.actor_cpus))
        for rank in range(n):
            self.ranks.append(
                remote.options(
                    num_cpus=c.actor_cpus,
                    num_gpus=c.actor_gpus,
                    resources=dict(c.actor_resources) or None,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(self._group, placement_group_bundle_index=rank),
                ).remote(rank, n, self.cfg, self.model_path, self.cache_dir, self.value_head, threads)
            )
        try:
            meet = ray.get(self.ranks[0].rendezvous.remote(), timeout=START_TIMEOUT_S)
            self.where = self._gather([r.setup.remote(meet) for r in self.ranks])
        except BaseException:
            self.close()
            raise

    def describe(self) -> str:
        nodes = ", ".join(f"rank {w['rank']} on node {w['node'][:8]} (pid {w['pid']})" for w in self.where)
        return f"Ray actors: {nodes}"

    def _gather(self, refs: list[Any]) -> list[Any]:
        """Every rank's result, in rank order; every failing rank's error in one :class:`ModelError`."""
        ray = import_ray()
        results: list[Any] = []
        errors: list[str] = []
        for rank, ref in enumerate(refs):
            try:
                results.append(ray.get(ref))
            except ray.exceptions.RayError as exc:
                errors.append(f"rank {rank}: {exc}")
                results.append(None)
        if errors:
            raise ModelError("sharded actor (Ray ranks): " + "\n".join(errors))
        return results

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """Every rank runs ``method``; their results in rank order."""
        return self._gather([r.call.remote(method, args, kwargs) for r in self.ranks])

    def save(self, folder: Path) -> None:
        """The checkpoint rank 0 wrote on its node, written here atomically."""
        files = self._gather([r.save.remote() for r in self.ranks])[0]
        tmp = folder.parent / f".{folder.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        write_files(tmp, files)
        old = folder.parent / f".{folder.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            folder.rename(old)
        tmp.rename(folder)
        shutil.rmtree(old, ignore_errors=True)

    def load(self, folder: Path) -> None:
        """This machine's checkpoint, sent once through the object store, loaded on every rank."""
        ray = import_ray()
        ref = ray.put(read_files(folder))
        self._gather([r.load.remote(ref) for r in self.ranks])

    def close(self) -> None:
        ray = import_ray()
        if self.ranks:
            try:
                ray.get([r.stop.remote() for r in self.ranks], timeout=60)
            except ray.exceptions.RayError:
                pass
            for r in self.ranks:
                ray.kill(r)
            self.ranks = []
        if self._group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._group)
            self._group = None
