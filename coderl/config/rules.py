"""Rules that tie fields of different sections together, checked on the assembled config.

Each section validates its own fields; a rule here needs two or more sections (an estimator and the
group size, an algorithm and the actor's layout). Every command loads its config through
:func:`coderl.config.load_config`, so every command refuses the same broken combination with the
same message before any work starts. A rule returns None when it holds, else what is wrong: the
keys, their values and a way out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coderl.config.models import Config

GROUP_ESTIMATORS = ("grpo", "drgrpo", "rloo", "reinforce_pp_baseline")
"""Advantage estimators that compare the samples of one task with each other."""


def group_estimator_needs_groups(cfg: Config) -> str | None:
    if cfg.algo.advantage in GROUP_ESTIMATORS and cfg.train.group_size < 2:
        return (
            f"train.group_size: got {cfg.train.group_size} — algo.advantage={cfg.algo.advantage} compares the "
            "samples of a task with each other and needs train.group_size >= 2 (or algo.advantage=reinforce_pp / gae)"
        )
    return None


def dynamic_sampling_needs_groups(cfg: Config) -> str | None:
    if cfg.algo.dynamic_sampling and cfg.train.group_size < 2:
        return (
            f"algo.dynamic_sampling: got true with train.group_size={cfg.train.group_size} — a group of one "
            "sample never has unequal rewards, so every group would be dropped; set train.group_size >= 2"
        )
    return None


def gae_needs_packing(cfg: Config) -> str | None:
    if cfg.algo.advantage == "gae" and not cfg.actor.packing:
        return (
            "actor.packing: got false with algo.advantage=gae — the value head reads the packed forward's "
            "hidden states; set actor.packing=true"
        )
    return None


def lora_sync_needs_an_adapter(cfg: Config) -> str | None:
    if cfg.train.weight_sync == "lora" and cfg.actor.lora_rank == 0:
        return (
            "train.weight_sync: got 'lora' with actor.lora_rank=0 — there is no adapter to send; set "
            "actor.lora_rank > 0 or train.weight_sync=full"
        )
    return None


def kl_needs_a_reference(cfg: Config) -> str | None:
    if cfg.algo.kl_coef > 0 and not cfg.actor.reference:
        return (
            f"algo.kl_coef: got {cfg.algo.kl_coef} with actor.reference=false — a KL penalty needs a "
            "reference policy; set actor.reference=true or algo.kl_coef=0"
        )
    return None


def pass_k_needs_samples(cfg: Config) -> str | None:
    bad = [k for k in cfg.rollout.pass_k if k > cfg.rollout.group_size]
    if bad:
        return (
            f"rollout.pass_k: got {bad} with rollout.group_size={cfg.rollout.group_size} — pass@k needs at "
            "least k samples per task; raise rollout.group_size or drop those k"
        )
    return None


def remote_agent_needs_a_command(cfg: Config) -> str | None:
    if cfg.rollout.agent == "remote" and not cfg.rollout.remote_command.strip():
        return (
            "rollout.remote_command: empty with rollout.agent=remote — the remote loop runs an agent "
            "program; give its command (e.g. the one in coderl/configs/remote_mini_swe_agent.yaml)"
        )
    return None


def sft_before_rl_needs_data(cfg: Config) -> str | None:
    if cfg.sft.before_rl and not cfg.sft.data:
        return "sft.before_rl: got true with sft.data empty — name demonstrations, e.g. sft.data=[gold:bundled:synth]"
    return None


def lora_sync_needs_the_servers_base(cfg: Config) -> str | None:
    if cfg.train.weight_sync == "lora" and cfg.sft.before_rl:
        return (
            "train.weight_sync: got 'lora' with sft.before_rl=true — the warm start changes every weight, so "
            "an adapter alone would sit on a base the engine does not have; set train.weight_sync=full (or auto)"
        )
    return None


def engine_replicas_need_ray(cfg: Config) -> str | None:
    if cfg.cluster.engine_replicas and cfg.cluster.backend != "ray":
        return (
            f"cluster.engine_replicas: got {cfg.cluster.engine_replicas} with cluster.backend=local — engine "
            "replicas are Ray actors; set cluster.backend=ray (or engine.replicas for engines in this process)"
        )
    return None


def ray_actor_needs_ray(cfg: Config) -> str | None:
    if cfg.cluster.actor == "ray" and cfg.cluster.backend != "ray":
        return (
            "cluster.actor: got ray with cluster.backend=local — the actor's ranks are placed on the Ray cluster "
            "the run joins; set cluster.backend=ray (or cluster.actor=local for rank processes on this machine)"
        )
    if cfg.cluster.actor == "ray" and cfg.actor.lora_rank > 0:
        return (
            f"cluster.actor: got ray with actor.lora_rank={cfg.actor.lora_rank} — ranks on Ray train full weights "
            "(FSDP2); set actor.lora_rank=0, or cluster.actor=local with actor.ranks=1 for LoRA"
        )
    return None


def vllm_replicas_need_lora(cfg: Config) -> str | None:
    c = cfg.cluster
    if (
        c.engine_replicas
        and c.engine_server == "vllm"
        and (cfg.actor.lora_rank == 0 or cfg.train.weight_sync == "full")
    ):
        return (
            "cluster.engine_server: got vllm with full weight sync — vLLM servers have no stable HTTP endpoint to "
            "reload full weights; set actor.lora_rank > 0 (LoRA adapters sync through vLLM's load_lora_adapter), "
            "or cluster.engine_server=sglang / coderl"
        )
    return None


RULES: list[Callable[[Config], str | None]] = [
    group_estimator_needs_groups,
    dynamic_sampling_needs_groups,
    gae_needs_packing,
    lora_sync_needs_an_adapter,
    kl_needs_a_reference,
    pass_k_needs_samples,
    remote_agent_needs_a_command,
    sft_before_rl_needs_data,
    lora_sync_needs_the_servers_base,
    engine_replicas_need_ray,
    ray_actor_needs_ray,
    vllm_replicas_need_lora,
]


def broken_rules(cfg: Config) -> list[str]:
    """What is wrong with ``cfg`` across sections (empty when every rule holds)."""
    return [msg for rule in RULES if (msg := rule(cfg)) is not None]
