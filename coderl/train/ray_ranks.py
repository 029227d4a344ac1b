"""The sharded actor's ranks as Ray actors (``cluster.actor=ray``): the trainer as rank actors on any
nodes of a Ray cluster.

Each rank is a :class:`RankActor` in its own placement-group bundle (``cluster.actor_cpus`` /
``actor_gpus`` / ``actor_resources``, strategy ``cluster.actor_placement``). Rank 0's node picks the
rendezvous (its IP as Ray sees it, a free port); all ranks then join one torch.distributed group there
(gloo on CPU, NCCL on GPUs: Ray gives each rank its GPU as device 0) and build their FSDP2 shard of the
:class:`~coderl.train.actor.Actor`. Calls and results travel through Ray (pickled), as they go through
pipes for :class:`~coderl.train.ranks.ProcessRanks`.

Nothing assumes a shared disk. Before a checkpoint the trainer writes a probe file with a fresh token
beside it; a rank that reads it back shares the trainer's disk (same machine, or a shared volume) and
writes or reads the checkpoint in place. Otherwise rank 0 writes it on its own node and the trainer
fetches the files in 64 MB chunks (renaming the folder into place atomically, as :meth:`Actor.save`
does), and resuming sends the files in chunks, each put once into Ray's object store, to the ranks
that cannot see them. Each rank loads the base model from ``model.path`` on its own
node (the image in ``deploy/ray`` has the default model at the same path on every node).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

from coderl.cluster.config import ClusterConfig
from coderl.cluster.ray_rollouts import import_ray
from coderl.errors import ClusterError, ModelError
from coderl.ports import free_port
from coderl.train.actor_files import replace_folder
from coderl.train.config import ActorConfig
from coderl.train.ranks import START_TIMEOUT_S, run_call, start_rank

CHUNK_BYTES = 64 << 20
"""A checkpoint crosses the cluster in pieces this size: memory and the object store stay bounded."""


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

    def sees(self, probe: str, token: str) -> bool:
        """Whether ``probe`` (a file the trainer wrote) reads ``token`` here: this node shares the
        trainer's disk at that path."""
        try:
            return Path(probe).read_text() == token
        except OSError:
            return False

    def save(self, folder: str | None) -> list[tuple[str, int]]:
        """:meth:`Actor.save` (a collective: every rank takes part) into ``folder`` (on a shared disk),
        or else into this node's own folder; then rank 0 lists the files (path, size) to fetch."""
        target = Path(folder) if folder is not None else self.dir / "save"
        self.actor.save(target)
        if self.rank != 0 or folder is not None:
            return []
        return [(str(p.relative_to(target)), p.stat().st_size) for p in sorted(target.rglob("*")) if p.is_file()]

    def read_chunk(self, rel: str, offset: int, size: int) -> bytes:
        """Bytes of a file :meth:`save` wrote on this node."""
        with (self.dir / "save" / rel).open("rb") as fh:
            fh.seek(offset)
            return fh.read(size)

    def write_chunk(self, rel: str, offset: int, data: bytes) -> None:
        """Bytes of a checkpoint file the trainer sends, for :meth:`load`."""
        path = self.dir / "load" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("r+b" if path.exists() else "wb") as fh:
            fh.seek(offset)
            fh.write(data)

    def load(self, folder: str | None) -> None:
        """:meth:`Actor.load` from ``folder`` (on a shared disk), or from what :meth:`write_chunk` wrote."""
        local = self.dir / "load"
        try:
            self.actor.load(Path(folder) if folder is not None else local)
        finally:
            shutil.rmtree(local, ignore_errors=True)
            shutil.rmtree(self.dir / "save", ignore_errors=True)

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
        self.shared_disk: bool | None = None
        """Whether the ranks see the trainer's disk; None = find out per checkpoint (a probe file)."""
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
            self.close(graceful=False)
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
            self.close(graceful=False)
            raise

    def describe(self) -> str:
        nodes = ", ".join(f"rank {w['rank']} on node {w['node'][:8]} (pid {w['pid']})" for w in self.where)
        return f"Ray actors: {nodes}"

    def _gather(self, refs: list[Any]) -> list[Any]:
        """Every rank's result, in rank order. The first rank to fail ends them all at once (the others
        would wait in a collective it never joins) and its error is raised as a :class:`ModelError`."""
        ray = import_ray()
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        errors: list[str] = []
        waiting = list(refs)
        while waiting and not errors:
            done, waiting = ray.wait(waiting, num_returns=1)
            for ref in done:
                try:
                    results[rank_of[ref]] = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    errors.append(f"rank {rank_of[ref]}: {exc}")
        if errors:
            self.close(graceful=False)
            raise ModelError("sharded actor (Ray ranks), stopped: " + "\n".join(errors))
        return results

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """Every rank runs ``method``; their results in rank order."""
        if not self.ranks:
            raise ModelError("the actor's Ray ranks are stopped (after an error, or closed); start the run again")
        return self._gather([r.call.remote(method, args, kwargs) for r in self.ranks])

    def _sharing(self, folder: Path) -> list[bool]:
        """Per rank, whether it sees ``folder``'s parent on the trainer's disk (a probe file with a fresh
        token: same machine, or a shared volume); ``shared_disk`` overrides."""
        if self.shared_disk is not None:
            return [self.shared_disk] * len(self.ranks)
        folder.parent.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(16)
        probe = folder.parent / f".coderl-probe-{token}"
        probe.write_text(token)
        try:
            return [bool(x) for x in self._gather([r.sees.remote(str(probe), token) for r in self.ranks])]
        finally:
            probe.unlink(missing_ok=True)

    def save(self, folder: Path) -> None:
        """The checkpoint rank 0 writes: straight into ``folder`` where its node shares this disk, else on
        its node and fetched here in chunks, then renamed into place (atomically, as :meth:`Actor.save`)."""
        ray = import_ray()
        if self._sharing(folder)[0]:
            self._gather([r.save.remote(str(folder)) for r in self.ranks])
            return
        listing = self._gather([r.save.remote(None) for r in self.ranks])[0]
        tmp = folder.parent / f".{folder.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        for rel, size in listing:
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as fh:
                for offset in range(0, size, CHUNK_BYTES):
                    fh.write(ray.get(self.ranks[0].read_chunk.remote(rel, offset, CHUNK_BYTES)))
        replace_folder(tmp, folder)

    def load(self, folder: Path) -> None:
        """A checkpoint on this disk loaded on every rank: read in place where a rank's node shares the
        disk, else sent to it in chunks (each put once into the object store)."""
        ray = import_ray()
        sharing = self._sharing(folder)
        far = [r for r, shared in zip(self.ranks, sharing, strict=True) if not shared]
        for path in sorted(p for p in folder.rglob("*") if p.is_file()) if far else []:
            rel = str(path.relative_to(folder))
            with path.open("rb") as fh:
                offset = 0
                while chunk := fh.read(CHUNK_BYTES):
                    ref = ray.put(chunk)
                    self._gather([r.write_chunk.remote(rel, offset, ref) for r in far])
                    offset += len(chunk)
        self._gather([r.load.remote(str(folder) if shared else None) for r, shared in zip(self.ranks, sharing, strict=True)])

    def close(self, graceful: bool = True) -> None:
        """Stop the ranks (``graceful``: let each leave the process group first) and free their bundles."""
        ray = import_ray()
        if self.ranks:
            if graceful:
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
