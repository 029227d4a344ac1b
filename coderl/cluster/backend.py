"""Where rollouts run, chosen once: :class:`RolloutBackend`, shared by ``coderl train`` and ``coderl eval``.

Owns the choice made from ``cluster.backend`` — rollouts in this process
(:func:`coderl.rollout.runner.run_rollouts`) or on rollout workers on a Ray cluster
(:class:`~coderl.cluster.ray_rollouts.RayRollouts`) — and everything that goes with it: joining the
cluster, the engine the rollouts sample from (the ``engine`` section's, one given, or with
``cluster.engine_replicas`` servers launched on the cluster behind a router), the rollout contexts and
settings, sandboxes taken down in the background, and stopping all of it in order. Callers see one
``run(groups)``. Must not own training: weight sync, the ledger, grading rules and stores stay the
callers' (a store given to ``run`` is written the same way on either backend).
"""

from __future__ import annotations

from collections.abc import Callable

from coderl.chat import ChatFormat
from coderl.cluster.engines import RayEngines
from coderl.cluster.ray_rollouts import RayRollouts, connect, import_ray
from coderl.config import Config
from coderl.engine import create_engine
from coderl.engine.base import Engine
from coderl.rollout.context import ContextFactory
from coderl.rollout.runner import RolloutBounds, RolloutGroup, RolloutResult, RolloutSettings, run_rollouts
from coderl.rollout.store import TrajectoryStore
from coderl.rollout.teardown import Teardowns


class RolloutBackend:
    """Rollouts here or on Ray workers behind one :meth:`run` (see the module doc).

    The order of use: :meth:`join_cluster` (Ray only; before anything else that needs the cluster),
    :meth:`start_engine`, :meth:`serve` (what the rollouts sample from: the engine, or a wrapper of it),
    then :meth:`run` any number of times, :meth:`stop_workers` and :meth:`stop`.
    """

    def __init__(self, cfg: Config, *, grade: bool = True, engine: Engine | None = None) -> None:
        """``grade``: rollouts are graded by the task's hidden tests (``coderl rollout`` does not grade);
        ``engine``: one to use instead of the engine section's (the backend still starts and stops it)."""
        self.cfg = cfg
        self.remote = RayRollouts(cfg, grade=grade) if cfg.cluster.backend == "ray" else None
        self.settings = RolloutSettings.from_config(cfg.rollout, cfg.tasks, grade=grade)
        self.contexts: ContextFactory | None = None  # made by serve() (it reads the model's tokenizer)
        self.teardowns = Teardowns()  # rollouts' sandboxes going down in the background (drained at stop)
        self.engine: Engine | None = None
        self.replicas: RayEngines | None = None  # cluster.engine_replicas: servers launched on the cluster
        self._given = engine
        self._served: Engine | None = None
        self._ray_started = False  # this backend started a local Ray cluster (and shuts it down)
        self._workers_stopped = False

    @property
    def on_ray(self) -> bool:
        return self.remote is not None

    @property
    def retried(self) -> int:
        """Rollouts started again because their Ray worker died (0 in this process)."""
        return self.remote.retried if self.remote is not None else 0

    def join_cluster(self) -> None:
        """Join (or start) the Ray cluster ``cluster.address`` names; nothing with the local backend."""
        if self.remote is not None and not self._ray_started:
            self._ray_started = connect(self.cfg.cluster, self.remote.namespace)

    async def start_engine(self) -> Engine:
        """Start the engine the rollouts sample from: the given one, the engine section's, or (Ray with
        ``cluster.engine_replicas``) replicas launched on the cluster behind a router."""
        if self.remote is not None and self.cfg.cluster.engine_replicas and self._given is None:
            self.join_cluster()
            self.replicas = RayEngines(self.cfg, self.remote.namespace)
            self.engine = await self.replicas.start()
        else:
            engine = self._given or create_engine(self.cfg.engine, self.cfg.model, seed=self.cfg.run.seed)
            await engine.start()
            self.engine = engine
        return self.engine

    async def serve(self, served: Engine | None = None) -> None:
        """Rollouts sample from ``served`` (default: the started engine); on Ray the workers are placed
        and given it through a loopback server of this process."""
        self._served = served or self.engine
        assert self._served is not None, "start_engine() first, or give the engine to serve"
        if self.contexts is None:
            self.contexts = ContextFactory(self.cfg.rollout, self.cfg.sandbox, ChatFormat.for_model(self.cfg.model))
        if self.remote is not None:
            await self.remote.start(self._served, str(self.cfg.model.path or "coderl-policy"))

    def describe(self) -> str:
        """Where the rollouts run, for the console."""
        if self.remote is not None:
            return self.remote.describe()
        return f"rollouts in this process (up to {self.cfg.rollout.max_sandboxes} sandboxes at once)"

    def bounds(self) -> RolloutBounds:
        """Limits one caller shares between calls of :meth:`run` (the asynchronous trainer's groups)."""
        assert self._served is not None, "serve() first"
        return RolloutBounds(self._served, self.settings)

    async def run(
        self,
        groups: list[RolloutGroup],
        temperature: float | None = None,
        on_done: Callable[[RolloutResult], None] | None = None,
        *,
        store: TrajectoryStore | None = None,
        bounds: RolloutBounds | None = None,
    ) -> list[RolloutResult]:
        """Roll out (and grade) every sample of ``groups`` at ``temperature`` (None: ``rollout.temperature``);
        results in group order, then sample order. Each result goes to ``store`` as it finishes, then to
        ``on_done``."""
        if self.remote is not None:

            def done(result: RolloutResult) -> None:
                if store is not None:
                    store.add(result.trajectory, result.record())
                if on_done is not None:
                    on_done(result)

            return await self.remote.run(groups, temperature, on_done=done)
        assert self._served is not None and self.contexts is not None, "serve() first"
        contexts = self.contexts if temperature is None else self.contexts.with_temperature(temperature)
        return await run_rollouts(
            groups, self._served, contexts, self.settings, store, on_done, bounds=bounds, teardowns=self.teardowns
        )

    async def stop_workers(self) -> None:
        """Wait for the sandboxes still going down and stop the Ray workers (the engine stays up)."""
        await self.teardowns.drain()
        if self.remote is not None and not self._workers_stopped:
            self._workers_stopped = True
            await self.remote.stop()

    async def stop(self) -> None:
        """:meth:`stop_workers`, then the engine, the replicas and the Ray cluster this backend started."""
        await self.stop_workers()
        if self.engine is not None:
            engine, self.engine = self.engine, None
            await engine.stop()
        if self.replicas is not None:
            replicas, self.replicas = self.replicas, None
            await replicas.stop()
        if self._ray_started:
            self._ray_started = False
            import_ray().shutdown()
