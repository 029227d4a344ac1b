"""Engine replicas on a Ray cluster (``cluster.engine_replicas > 0``): each a Ray actor
(:class:`~coderl.cluster.launcher.EngineLauncher`) that launches a server on its node; the trainer
routes to them (:class:`~coderl.engine.router.Router` over HTTP clients: sticky sessions, a replica that
stops answering leaves the router) and syncs weights to every one of them.

Weight sync (:class:`coderl.train.fanout.FanOutSync`): the actor's weights (a full checkpoint folder, or the LoRA adapter)
are written once on the trainer's node, put once into Ray's object store, and each replica's launcher
writes them on its own node's disk (Ray moves them once per node); the trainer then has each server
load that folder through its HTTP API, so every replica's policy version moves the way it does for
``engine.type=http``. No shared disk is needed.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

from coderl.cluster.ray_rollouts import import_ray
from coderl.config import Config
from coderl.engine.base import Engine
from coderl.engine.http_client import HTTPEngine
from coderl.engine.router import Router
from coderl.errors import ClusterError

log = logging.getLogger(__name__)


class RayEngines:
    """``cluster.engine_replicas`` launched servers behind one router."""

    def __init__(self, cfg: Config, namespace: str) -> None:
        self.cfg = cfg
        self.namespace = namespace
        self.launchers: list[Any] = []
        self.clients: list[HTTPEngine] = []
        self.urls: list[str] = []
        self.router: Router | None = None

    async def start(self) -> Engine:
        """Place the replicas, launch their servers, and return the started router over them."""
        from coderl.cluster.launcher import EngineLauncher

        ray = import_ray()
        c = self.cfg.cluster
        key = secrets.token_urlsafe(24)
        actor = ray.remote(EngineLauncher)
        for i in range(c.engine_replicas):
            self.launchers.append(
                actor.options(
                    name=f"engine-{i}",
                    namespace=self.namespace,
                    num_cpus=c.engine_cpus,
                    num_gpus=c.engine_gpus,
                    resources=dict(c.engine_resources) or None,
                    scheduling_strategy="SPREAD",
                    max_concurrency=16,
                ).remote(self.cfg, key)
            )
        wait = c.placement_timeout_s + c.engine_start_timeout_s
        try:
            urls = await asyncio.wait_for(asyncio.gather(*(x.start.remote() for x in self.launchers)), wait)
        except TimeoutError:
            raise ClusterError(
                f"{c.engine_replicas} engine replicas of {c.engine_cpus:g} CPUs, {c.engine_gpus:g} GPUs and "
                f"{dict(c.engine_resources)} each did not start within {wait:g} s; the cluster has "
                f"{ray.cluster_resources()}"
            ) from None
        self.urls = [str(u) for u in urls]
        http = self.cfg.engine.model_copy(update={"type": "http", "urls": self.urls, "api": c.engine_server})
        self.clients = [HTTPEngine(url, http, api_key=key) for url in self.urls]
        self.router = Router(list(self.clients), max_sessions=self.cfg.engine.max_sessions)
        await self.router.start()
        return self.router

    async def stop(self) -> None:
        ray = import_ray()
        await asyncio.gather(*(x.stop.remote() for x in self.launchers), return_exceptions=True)
        for launcher in self.launchers:
            ray.kill(launcher)
        self.launchers = []
