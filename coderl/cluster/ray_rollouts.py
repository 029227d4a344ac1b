"""``cluster.backend=ray``: rollouts run in rollout workers, Ray actors on the nodes of a Ray cluster.

The trainer keeps its engine (and the record of what it sampled) and serves it over HTTP to the
workers, with a fresh API key per run; each worker (:class:`~coderl.cluster.worker.RolloutWorker`)
runs agent loops and their sandboxes on its own node and grades there. Every rollout the workers
generate goes through the trainer's engine, so the sampled-token check, the policy versions and the
weight sync are the same as with local rollouts.

Placement: one placement-group bundle per worker (``cluster.worker_cpus`` CPUs and
``cluster.worker_resources``), placed with ``cluster.placement``; a cluster that cannot hold them within
``cluster.placement_timeout_s`` is a :class:`~coderl.errors.ClusterError` naming what it has.

Node loss: each call is one rollout. A worker that dies (its node lost, its process killed) fails the
rollouts it was running; each is started again on another worker (``cluster.rollout_retries``) and
counted (:attr:`RayRollouts.retried`); the rollouts it had finished were already returned, so none is
lost. Ray restarts the worker (``cluster.worker_restarts``) and it takes rollouts again once it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coderl.cluster.config import ClusterConfig
from coderl.config import Config
from coderl.engine.base import BorrowedEngine, Engine
from coderl.errors import ClusterError, EngineError
from coderl.loopback import serve_in_loop
from coderl.rollout.runner import RolloutGroup, RolloutResult
from coderl.tasks.dataset import task_row

log = logging.getLogger(__name__)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ClusterError(
            "cluster.backend=ray needs Ray, which is not installed: pip install 'coderl[ray]' "
            "(or pip install ray), or set cluster.backend=local"
        ) from None
    return ray


def connect(c: ClusterConfig, namespace: str) -> bool:
    """Join the Ray cluster ``c.address`` names (module doc of :class:`ClusterConfig`); True when this
    call started a local one (the caller shuts it down)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    quiet = {"namespace": namespace, "logging_level": logging.WARNING, "configure_logging": False}
    local = {**quiet, "include_dashboard": False, "object_store_memory": 1 << 30}
    if c.address == "local":
        ray.init(address="local", **local)
        return True
    if c.address == "auto":
        try:
            ray.init(address="auto", **quiet)
            return False
        except ConnectionError:
            ray.init(address="local", **local)
            return True
    _check_answers(c.address)
    try:
        ray.init(address=c.address, **quiet)
    except (ConnectionError, ValueError) as exc:
        raise ClusterError(
            f"cluster.address: could not join the Ray cluster at {c.address!r}: {exc}; give a head's "
            "host:port (ray start --head prints it), 'auto' or 'local'"
        ) from None
    return False


def _check_answers(address: str, timeout_s: float = 5.0) -> None:
    """Fail at once when nothing listens at a ``HOST:PORT`` (or ``ray://HOST:PORT``) address: Ray itself
    would keep retrying for minutes."""
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(
            f"cluster.address: got {address!r}; give a head's host:port (ray start --head prints it), "
            "ray://host:port, 'auto' or 'local'"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ClusterError(
            f"cluster.address: nothing answers at {address!r} ({exc}); start the head there (ray start --head), "
            "or give 'auto' / 'local' to start a cluster for this run"
        ) from None


class _Lent(BorrowedEngine):
    """The trainer's engine as the rollout workers see it: they generate, they never update it."""

    async def update_weights(self, weights: Any) -> int:
        raise EngineError(
            "the rollout workers' endpoint does not take weight updates (the trainer syncs them)"
        )

    async def load_lora_adapter(self, path: Any) -> int:
        raise EngineError("the rollout workers' endpoint does not load adapters (the trainer syncs them)")

    async def unload_lora_adapter(self) -> int:
        raise EngineError("the rollout workers' endpoint does not unload adapters (the trainer syncs them)")


@dataclass
class _Worker:
    index: int
    handle: Any
    free: int
    up: bool = True
    dead: bool = False


class RayRollouts:
    """Rollout workers on a Ray cluster, given rollouts one sample at a time (least busy worker first)."""

    def __init__(self, cfg: Config, grade: bool = True) -> None:
        self.cfg = cfg
        self.grade = grade
        self.namespace = cfg.cluster.namespace or f"coderl-{secrets.token_hex(4)}"
        self.workers: list[_Worker] = []
        self.retried = 0
        """Rollouts started again because their worker died."""
        self.hosts: list[dict[str, Any]] = []
        self._stack = contextlib.AsyncExitStack()
        self._changed: asyncio.Condition | None = None
        self._rows: dict[str, Any] = {}
        self._probes: set[asyncio.Task[None]] = set()
        self._started_ray = False
        self._group: Any = None

    async def start(self, engine: Engine, model_name: str) -> None:
        """Serve ``engine`` to the workers, join the cluster, place and start the workers."""
        from coderl.cluster.worker import RolloutWorker
        from coderl.engine.server import create_app

        c = self.cfg.cluster
        ray = import_ray()
        self._started_ray = connect(c, self.namespace)
        host = c.engine_host
        if host == "auto":
            host = "127.0.0.1" if self._started_ray else ray.util.get_node_ip_address()
        key = secrets.token_urlsafe(24)
        url = await self._stack.enter_async_context(
            serve_in_loop(create_app(_Lent(engine), model_name, api_key=key), host=host)
        )
        self._group = await self._place(ray, c)
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        actor = ray.remote(RolloutWorker)
        for i in range(c.rollout_workers):
            handle = actor.options(
                name=f"rollout-{i}",
                namespace=self.namespace,
                num_cpus=c.worker_cpus,
                resources=dict(c.worker_resources) or None,
                max_restarts=c.worker_restarts,
                max_concurrency=1000,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._group, placement_group_bundle_index=i
                ),
            ).remote(self.cfg, url, key, self.grade)
            self.workers.append(_Worker(i, handle, self.cfg.rollout.max_sandboxes))
        self._changed = asyncio.Condition()
        self.hosts = list(await asyncio.gather(*(w.handle.ready.remote() for w in self.workers)))

    def describe(self) -> str:
        """Where the workers run, for the console."""
        hosts = ", ".join(f"{h['host']} (node {h['node'][:8]}, pid {h['pid']})" for h in self.hosts)
        return f"rollout workers (Ray namespace {self.namespace}): {hosts}"

    async def _place(self, ray: Any, c: ClusterConfig) -> Any:
        from ray.util.placement_group import placement_group, remove_placement_group

        bundle = {k: v for k, v in {"CPU": c.worker_cpus, **c.worker_resources}.items() if v > 0}
        group = placement_group([bundle] * c.rollout_workers, strategy=c.placement)
        try:
            await asyncio.wait_for(group.ready(), timeout=c.placement_timeout_s)
        except TimeoutError:
            remove_placement_group(group)
            raise ClusterError(
                f"the Ray cluster cannot hold {c.rollout_workers} rollout workers of {bundle} each "
                f"(cluster.placement={c.placement}) within {c.placement_timeout_s:g} s; it has "
                f"{ray.cluster_resources()}; lower cluster.rollout_workers or cluster.worker_cpus, or add nodes"
            ) from None
        return group

    async def stop(self) -> None:
        for probe in self._probes:
            probe.cancel()
        with contextlib.suppress(Exception):
            ray = import_ray()
            for w in self.workers:
                ray.kill(w.handle, no_restart=True)
            if self._group is not None:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self._group)
            if self._started_ray:
                ray.shutdown()
        self.workers = []
        await self._stack.aclose()

    async def run(
        self,
        groups: list[RolloutGroup],
        temperature: float | None = None,
        on_done: Callable[[RolloutResult], None] | None = None,
    ) -> list[RolloutResult]:
        """Every sample of every group, rolled out and graded by the workers; results in group order,
        then sample order (as :func:`coderl.rollout.runner.run_rollouts`)."""
        jobs = [self._one(g, i, temperature, on_done) for g in groups for i in range(g.size)]
        return list(await asyncio.gather(*jobs))

    def _row(self, group: RolloutGroup) -> Any:
        """The task as a dataset row in Ray's object store (made once per task, fetched once per node)."""
        if group.task.id not in self._rows:
            self._rows[group.task.id] = import_ray().put(task_row(group.task))
        return self._rows[group.task.id]

    async def _one(
        self,
        group: RolloutGroup,
        sample: int,
        temperature: float | None,
        on_done: Callable[[RolloutResult], None] | None,
    ) -> RolloutResult:
        from ray.exceptions import RayActorError

        row = self._row(group)
        failures: list[str] = []
        while True:
            worker = await self._acquire()
            try:
                result: RolloutResult = await worker.handle.rollout.remote(
                    row, group.group_id, sample, temperature
                )
                break
            except RayActorError as exc:
                failures.append(f"rollout-{worker.index}: {type(exc).__name__}")
                self._lost(worker)
                if len(failures) > self.cfg.cluster.rollout_retries:
                    raise ClusterError(
                        f"a rollout of {group.task.id} failed on {len(failures)} rollout workers "
                        f"({'; '.join(failures)}); cluster.rollout_retries={self.cfg.cluster.rollout_retries}"
                    ) from None
                self.retried += 1
                log.warning(
                    "rollout worker %d lost a rollout of %s; starting it again", worker.index, group.task.id
                )
            finally:
                await self._release(worker)
        if on_done is not None:
            on_done(result)
        return result

    async def _acquire(self) -> _Worker:
        assert self._changed is not None
        async with self._changed:
            while True:
                ready = [w for w in self.workers if w.up and w.free > 0]
                if ready:
                    worker = max(ready, key=lambda w: w.free)
                    worker.free -= 1
                    return worker
                if all(w.dead for w in self.workers):
                    raise ClusterError(
                        f"every rollout worker is dead ({len(self.workers)} workers, each restarted up to "
                        f"cluster.worker_restarts={self.cfg.cluster.worker_restarts} times)"
                    )
                await self._changed.wait()

    async def _release(self, worker: _Worker) -> None:
        assert self._changed is not None
        async with self._changed:
            worker.free += 1
            self._changed.notify_all()

    def _lost(self, worker: _Worker) -> None:
        """Take ``worker`` out until it answers again (Ray restarts it) or is known dead."""
        if not worker.up:
            return
        worker.up = False
        probe = asyncio.create_task(self._probe(worker))
        self._probes.add(probe)
        probe.add_done_callback(self._probes.discard)

    async def _probe(self, worker: _Worker) -> None:
        """Ask ``worker`` until it answers (restarted) or Ray says it is dead for good."""
        from ray.exceptions import ActorUnavailableError, RayActorError

        while True:
            try:
                await worker.handle.ready.remote()
                worker.up = True
                log.warning("rollout worker %d is back", worker.index)
                break
            except ActorUnavailableError:  # restarting
                await asyncio.sleep(1.0)
            except RayActorError as exc:
                worker.dead = True
                log.error("rollout worker %d is dead (%s)", worker.index, type(exc).__name__)
                break
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()
