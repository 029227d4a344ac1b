"""The ``cluster`` config section: where rollouts, engines and the actor run. ``local`` (the default)
runs agent loops and sandboxes in the trainer's own process; ``ray`` runs them in rollout workers, Ray
actors placed on the nodes of a Ray cluster (:mod:`coderl.cluster.ray_rollouts`), can launch engine
replicas there (:mod:`coderl.cluster.engines`) and place the actor's ranks there
(:mod:`coderl.train.ray_ranks`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coderl.section import Section


class ClusterConfig(Section):
    backend: Literal["local", "ray"] = "local"
    """local: rollouts run in this process; ray: in rollout workers (Ray actors), each with its own
    agent loops and sandboxes on its node, generating through the trainer's engine."""
    address: str = "auto"
    """Ray cluster to join: auto = the running one if there is one (RAY_ADDRESS or this machine's),
    else a local cluster started for this run; local = always start one; or host:port of a head."""
    namespace: str | None = None
    """Ray namespace of this run's actors (rollout workers are named rollout-0, rollout-1, ...);
    default: a fresh one per run."""
    rollout_workers: int = Field(2, ge=1)
    """Rollout worker actors. Each runs at most rollout.max_sandboxes rollouts at once."""
    worker_cpus: float = Field(1.0, ge=0.0)
    """CPUs each rollout worker reserves in Ray's scheduler (its placement-group bundle)."""
    worker_resources: dict[str, float] = {}
    """Custom Ray resources each rollout worker reserves (e.g. {sandbox_node: 1} to keep workers on
    nodes started with --resources='{"sandbox_node": 4}')."""
    placement: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "SPREAD"
    """Placement-group strategy of the rollout workers' bundles (Ray's names)."""
    placement_timeout_s: float = Field(60.0, gt=0)
    """Seconds to wait for the cluster to hold every worker's bundle before failing."""
    worker_restarts: int = Field(3, ge=0)
    """Times Ray restarts a rollout worker that died (its node lost, its process killed)."""
    rollout_retries: int = Field(2, ge=0)
    """Times a rollout whose worker died is started again on another worker."""
    engine_replicas: int = Field(0, ge=0)
    """Engine servers launched as Ray actors, one per replica, each on its own node's share
    (engine_cpus / engine_gpus / engine_resources), behind the trainer's router; 0 = the trainer's own
    engine (the engine section)."""
    engine_server: Literal["coderl", "vllm", "sglang"] = "coderl"
    """What each replica launches: coderl engine serve (the embedded engine), vllm serve (with
    --logprobs-mode processed_logprobs; LoRA weight sync only) or SGLang's launch_server."""
    engine_cpus: float = Field(1.0, ge=0.0)
    """CPUs each engine replica reserves in Ray's scheduler."""
    engine_gpus: float = Field(0.0, ge=0.0)
    """GPUs each engine replica reserves (the launched server sees them through CUDA_VISIBLE_DEVICES)."""
    engine_resources: dict[str, float] = {}
    """Custom Ray resources each engine replica reserves."""
    engine_args: list[str] = []
    """Extra command-line arguments of every launched server (e.g. [--gpu-memory-utilization, '0.8'])."""
    engine_start_timeout_s: float = Field(900.0, gt=0)
    """Seconds a launched server may take to answer /health."""
    engine_host: str = "auto"
    """Address the rollout workers reach the trainer's engine at: auto = this node's IP as Ray sees it
    (127.0.0.1 when the cluster is local). The engine is served with a fresh API key per run."""
    actor: Literal["local", "ray"] = "local"
    """Where the actor's ranks (actor.ranks) run: local = processes on the trainer's machine; ray = Ray
    actors, one placement-group bundle each (actor_cpus / actor_gpus / actor_resources, strategy
    actor_placement), on any nodes of the cluster, in one torch.distributed group (gloo or NCCL).
    Checkpoints and weights reach the trainer through Ray; each rank reads model.path on its own node."""
    actor_cpus: float = Field(1.0, ge=0.0)
    """CPUs each actor rank reserves (with cluster.actor=ray); its torch threads = this, at least 1."""
    actor_gpus: float = Field(0.0, ge=0.0)
    """GPUs each actor rank reserves (with cluster.actor=ray; 1 per rank for NCCL)."""
    actor_resources: dict[str, float] = {}
    """Custom Ray resources each actor rank reserves (e.g. {trainer_node: 1})."""
    actor_placement: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """Placement-group strategy of the actor ranks' bundles (PACK: as few nodes as fit, the collectives
    stay close)."""
