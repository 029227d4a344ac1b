"""The sharded actor (``actor.ranks: N``, or ``cluster.actor=ray``): the :class:`~coderl.train.actor.Actor`
interface over rank processes on this machine (:class:`coderl.train.ranks.ProcessRanks`) or Ray actors
(:class:`coderl.train.ray_ranks.RayRanks`); how the ranks split the work is :mod:`coderl.train.ranks`'s
module doc. :func:`build_actor` picks one actor or the sharded one from the configuration."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import torch

from coderl.cluster.config import ClusterConfig
from coderl.errors import ConfigError, ModelError
from coderl.train.actor import Actor, LossFn, Policy, Scored
from coderl.train.config import ActorConfig
from coderl.train.ranks import ProcessRanks, backend_for, check_ranks

log = logging.getLogger(__name__)


class ShardedActor:
    """The actor on ``cfg.ranks`` processes (module doc); same calls as :class:`Actor`."""

    def __init__(
        self,
        cfg: ActorConfig,
        model_path: Path | None = None,
        cache_dir: Path | None = None,
        value_head: bool = False,
        cluster: ClusterConfig | None = None,
    ) -> None:
        self.on_ray = cluster is not None and cluster.actor == "ray"
        if cfg.ranks < 2 and not self.on_ray:
            raise ConfigError(f"ShardedActor needs actor.ranks >= 2, got {cfg.ranks}; use Actor for one rank")
        self.cfg = cfg
        self.model_path = model_path
        self.cache_dir = cache_dir
        self.with_value_head = value_head
        self.cluster = cluster
        self._step = 0
        self._ranks: Any = None  # ProcessRanks or RayRanks, once set up

    @property
    def step(self) -> int:
        """Optimizer steps taken (the policy version)."""
        return self._step

    def setup(self) -> None:
        """Start the ranks; each loads the model and shards it. Raises the first rank's error."""
        if self._ranks is not None:
            return
        if self.on_ray:
            from coderl.train.ray_ranks import RayRanks

            assert self.cluster is not None
            check_ranks(self.cfg, local=False)
            ranks: Any = RayRanks(self.cfg, self.model_path, self.cache_dir, self.with_value_head, self.cluster)
        else:
            ranks = ProcessRanks(self.cfg, self.model_path, self.cache_dir, self.with_value_head)
        ranks.start()
        self._ranks = ranks
        log.info("%s", self.describe())

    def describe(self) -> str:
        """Where the ranks run, for the console."""
        if self._ranks is None:
            return "actor: not set up"
        where = self._ranks.describe() if self.on_ray else "processes on this machine"
        return f"actor: {self.cfg.ranks} rank(s), {backend_for(self.cfg)}, {where}"

    def _call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        if self._ranks is None:
            raise ModelError("the actor is not set up; call actor.setup() first")
        results: list[Any] = self._ranks.call(method, args, kwargs)
        return results

    def reset_optimizer(self, lr: float | None = None, frozen_embeddings: bool = False) -> None:
        """A fresh AdamW and schedule on every rank (see :meth:`Actor.reset_optimizer`)."""
        self._call("reset_optimizer", lr, frozen_embeddings)
        self._step = 0

    def snapshot_reference(self) -> None:
        """Make the current policy the KL reference on every rank."""
        self._call("snapshot_reference")

    def score(
        self,
        sequences: list[list[int]],
        starts: list[int],
        temperature: float,
        *,
        reference: bool = False,
        with_entropy: bool = False,
        with_values: bool = False,
    ) -> list[Scored]:
        """:meth:`Actor.score`, each rank scoring its share of the micro-batches."""
        shares = self._call(
            "score_share",
            sequences,
            starts,
            temperature,
            reference=reference,
            with_entropy=with_entropy,
            with_values=with_values,
        )
        scored: dict[int, Scored] = {}
        for share in shares:
            scored.update(share)
        return [scored[i] for i in range(len(sequences))]

    def train_step(
        self,
        sequences: list[list[int]],
        starts: list[int],
        temperature: float,
        loss_fn: LossFn,
        with_entropy: bool = False,
        score_masks: list[list[int]] | None = None,
    ) -> dict[str, float]:
        """:meth:`Actor.train_step` over the ranks: loss and tokens summed, the rest (grad norm, lr,
        micro-batches, timings) from rank 0; ``loss_fn.merge_states`` gets each rank's metric state."""
        try:
            pickled = io.BytesIO()
            torch.save(loss_fn, pickled)
        except Exception as exc:
            raise ConfigError(
                f"the sharded actor sends loss_fn to its ranks, and {loss_fn!r} does not pickle ({exc}); "
                "use a module-level function or class"
            ) from exc
        results = self._call("train_step", sequences, starts, temperature, loss_fn, with_entropy, score_masks)
        metrics = dict(results[0][0])
        for key in ("loss", "tokens"):  # each rank's share; micro_batches counts the whole batch already
            metrics[key] = sum(r[0][key] for r in results)
        metrics["tokens_per_s"] = metrics["tokens"] / max(metrics["step_s"], 1e-9)
        merge = getattr(loss_fn, "merge_states", None)
        if merge is not None:
            merge([r[1] for r in results])
        self._step += 1
        return metrics

    def state_dict_for_engine(self) -> dict[str, torch.Tensor]:
        """The whole weights, gathered once (on rank 0), named as the HF model's ``state_dict``."""
        state: dict[str, torch.Tensor] = self._call("state_dict_for_engine")[0]
        return state

    def save_adapter(self, folder: Path) -> None:
        raise ConfigError("save_adapter needs a LoRA actor, and the sharded actor trains full weights")

    def save(self, folder: Path) -> None:
        """:meth:`Actor.save` (rank 0 writes; with Ray ranks, its files come back to write here): a
        checkpoint any number of ranks resumes from."""
        if self._ranks is None:
            raise ModelError("the actor is not set up; call actor.setup() first")
        self._ranks.save(Path(folder))

    def load(self, folder: Path) -> None:
        """:meth:`Actor.load` on every rank (sets the ranks up first if needed)."""
        self.setup()
        self._ranks.load(Path(folder))
        self._step = int(torch.load(Path(folder) / "state.pt", map_location="cpu")["step"])

    def close(self) -> None:
        """Stop the ranks."""
        if self._ranks is not None:
            self._ranks.close()
            self._ranks = None


def build_actor(
    cfg: ActorConfig,
    model_path: Path | None,
    cache_dir: Path | None,
    value_head: bool = False,
    cluster: ClusterConfig | None = None,
) -> Policy:
    """The actor ``cfg`` asks for: in this process (``actor.ranks: 1``), or sharded over N ranks — rank
    processes on this machine, or Ray actors with ``cluster.actor=ray`` (then even one rank)."""
    if cfg.ranks > 1 or (cluster is not None and cluster.actor == "ray"):
        return ShardedActor(cfg, model_path, cache_dir, value_head=value_head, cluster=cluster)
    return Actor(cfg, model_path, cache_dir, value_head=value_head)
