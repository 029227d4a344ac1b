"""Weight sync to engine replicas on a Ray cluster (``cluster.engine_replicas > 0``): see
:mod:`coderl.cluster.engines`."""

from __future__ import annotations

from pathlib import Path

from coderl.cluster.engines import RayEngines
from coderl.cluster.files import read_files
from coderl.cluster.ray_rollouts import import_ray
from coderl.engine.base import Engine
from coderl.errors import ClusterError, EngineUnavailableError
from coderl.threads import in_own_thread
from coderl.train.actor import Policy
from coderl.train.sync import WeightSync, export_checkpoint


class FanOutSync(WeightSync):
    """Weights to every engine replica through Ray's object store (module doc)."""

    name = "ray-fan-out"

    def __init__(self, engines: RayEngines, lora: bool, folder: Path) -> None:
        self.engines = engines
        self.lora = lora
        self.folder = folder

    async def push(self, actor: Policy, engine: Engine, version: int) -> None:
        kind = "adapter" if self.lora else "model"
        local = self.folder / ("adapter" if self.lora else "current")
        if self.lora:
            await in_own_thread(actor.save_adapter, local)
        else:
            await in_own_thread(export_checkpoint, actor, self.engines.cfg.model, local)
        files = await in_own_thread(read_files, local)
        ref = import_ray().put(files)
        launchers, clients = self.engines.launchers, self.engines.clients

        async def one(idx: int, _: Engine) -> int:
            # the replica's own node writes the folder; its server then loads it over HTTP. The router
            # keeps this (and ``ref``) to replay on a replica that missed it before it serves again.
            path = await launchers[idx].stage.remote(ref, kind, version)
            client = clients[idx]
            return await (client.load_lora_adapter(path) if self.lora else client.update_weights(path))

        assert self.engines.router is not None, "the engine replicas are not started"
        try:
            await self.engines.router.push("adapter" if self.lora else "weights", one)
        except EngineUnavailableError as exc:
            raise ClusterError(f"no engine replica took the weights of version {version}: {exc}") from exc
