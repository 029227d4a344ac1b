"""Weight sync to engine replicas on a Ray cluster (``cluster.engine_replicas > 0``): see
:mod:`coderl.cluster.engines`."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from coderl.cluster.engines import RayEngines
from coderl.cluster.ray_rollouts import import_ray
from coderl.engine.base import Engine
from coderl.engine.http_client import HTTPEngine
from coderl.errors import ClusterError
from coderl.threads import in_own_thread
from coderl.train.actor import Policy
from coderl.train.sync import WeightSync, export_checkpoint

log = logging.getLogger(__name__)


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
        files = await in_own_thread(_read_folder, local)
        ref = import_ray().put(files)

        async def one(launcher: Any, client: HTTPEngine) -> None:
            path = await launcher.stage.remote(ref, kind, version)
            if self.lora:
                await client.load_lora_adapter(path)
            else:
                await client.update_weights(path)

        pairs = list(zip(self.engines.launchers, self.engines.clients, strict=True))
        results = await asyncio.gather(*(one(x, c) for x, c in pairs), return_exceptions=True)
        failed = [
            f"{c.name}: {r}" for (_, c), r in zip(pairs, results, strict=True) if isinstance(r, BaseException)
        ]
        if len(failed) == len(pairs):
            raise ClusterError(
                f"no engine replica took the weights of version {version}: {'; '.join(failed)}"
            )
        for failure in failed:
            log.warning("engine replica missed the weights of version %d: %s", version, failure)


def _read_folder(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
