"""Configuration of the RL algorithm: which advantage estimator, policy loss and loss aggregation to use.

Flat on purpose (no nested models): every knob is one line under ``algo.`` in the root config. The
variant names are the keys of the plain dicts in ``coderl.rl`` (``ADVANTAGES``, ``POLICY_LOSSES``,
``LOSS_AGG``, ``KL_ESTIMATORS``), chosen once here and never by an if/elif ladder inside a loss.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coderl.section import Section
from coderl.types import ExitStatus

AdvantageName = Literal["grpo", "drgrpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gae"]
PolicyLossName = Literal["ppo_clip", "dual_clip", "gspo", "cispo"]
LossAggName = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLName = Literal["k1", "k2", "k3"]


class AlgoConfig(Section):
    """The policy-gradient algorithm: estimator, loss, aggregation, regularisers and DAPO tricks."""

    advantage: AdvantageName = "grpo"
    """Advantage estimator: grpo, drgrpo, rloo, reinforce_pp, reinforce_pp_baseline or gae (value head)."""
    policy_loss: PolicyLossName = "ppo_clip"
    """Per-token policy loss: ppo_clip (DAPO clip-higher), dual_clip, gspo (sequence ratio) or cispo."""
    loss_agg: LossAggName = "token-mean"
    """How the [B, T] loss matrix becomes a scalar; seq-mean-token-sum-norm is Dr.GRPO's constant length."""
    loss_norm_len: int | None = Field(None, ge=1)
    """Constant divisor of seq-mean-token-sum-norm (Dr.GRPO's max response length); None = padded length T."""
    clip_low: float = Field(0.2, ge=0.0)
    """PPO ratio lower clip: ratio >= 1 - clip_low."""
    clip_high: float = Field(0.28, ge=0.0)
    """PPO ratio upper clip: ratio <= 1 + clip_high (DAPO clip-higher uses 0.28)."""
    dual_clip_c: float = Field(3.0, gt=1.0)
    """Dual-clip constant c > 1: the loss of a negative-advantage token is at most -c * A (Ye et al. 2020)."""
    gspo_clip_low: float = Field(3e-4, ge=0.0)
    """GSPO sequence-ratio lower clip (paper: 3e-4)."""
    gspo_clip_high: float = Field(4e-4, ge=0.0)
    """GSPO sequence-ratio upper clip (paper: 4e-4)."""
    cispo_clip_low: float | None = Field(None, ge=0.0)
    """CISPO IS-weight lower clip 1 - value; None = no lower bound, as in MiniMax-M1."""
    cispo_clip_high: float = Field(3.0, ge=0.0)
    """CISPO IS-weight upper clip 1 + value; MiniMax-M1 tunes only this and prints no value; 3.0 caps at 4."""
    kl_coef: float = Field(0.0, ge=0.0)
    """Weight of the KL(policy || reference) penalty; 0 = no reference model needed."""
    kl_estimator: KLName = "k3"
    """KL estimator (Schulman 2020): k1 = -log r, k2 = (log r)^2 / 2, k3 = r - 1 - log r."""
    kl_in_reward: bool = False
    """Put the KL penalty in the token rewards (REINFORCE++ style) instead of in the loss."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus subtracted from the loss; 0 = off."""
    fork_share: float | None = Field(None, gt=0.0, le=1.0)
    """Train the policy loss on forking tokens only: each micro-batch's ``fork_share`` of its trained
    tokens where the policy's entropy is highest, weighted 1 / fork_share so the loss keeps its scale
    (Wang et al. 2025, "Beyond the 80/20 rule": the high-entropy minority carries RL's signal). An agent
    that copies code back changes it at a few uncertain tokens; the rest, near-certain copies, then take
    no share of a failed sample's negative advantage. None = every trained token."""
    tis_cap: float | None = Field(2.0, gt=0.0)
    """Truncated importance sampling cap on exp(trainer_logp - rollout_logp); None = off."""
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    """Discount per trained token (reinforce_pp, gae)."""
    lam: float = Field(1.0, ge=0.0, le=1.0)
    """GAE lambda."""
    norm_adv_by_std: bool = True
    """grpo: divide the group-centred reward by the group's standard deviation."""
    whiten_gae: bool = True
    """gae: normalise the advantages over the batch's trained tokens (zero mean, unit std)."""
    vf_coef: float = Field(0.1, ge=0.0)
    """gae: weight of the value head's loss next to the policy loss (the head shares the policy's trunk)."""
    value_clip: float | None = Field(0.2, gt=0.0)
    """gae: PPO value clipping, |V - V_old| <= value_clip in the loss; None = plain squared error."""
    mini_batches: int = Field(1, ge=1)
    """Optimizer steps per RL step (PPO mini-batches; verl's train batch / ppo_mini_batch_size): the step's
    groups are split into this many mini-batches of whole groups, each one optimizer step. With more than
    one, the trainer scores every sequence once before the first update and those log-probs are the old
    policy of every mini-batch, so the PPO ratio and its clipping bound how far the later ones move."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: drop groups whose rewards are all equal and refill the batch."""
    overlong_buffer: int = Field(0, ge=0)
    """DAPO soft overlong punishment length L_cache in tokens; 0 = off."""
    overlong_penalty: float = Field(1.0, ge=0.0)
    """Reward subtracted from a response that reaches the maximum length (linear ramp over the buffer)."""
    mask_exits: list[ExitStatus] = Field(default_factory=list)
    """Samples whose rollout ended with one of these exit statuses (e.g. ``format_limit``,
    ``token_limit``) count in their group's baseline but are left out of the loss: their tokens get
    no gradient and no share of its normaliser (DAPO's overlong filtering is ``[token_limit]``). A
    malformed call is a sampled token the policy gave little probability; its negative advantage moves
    the logits far more than the same advantage on the likely tokens the good samples share, and the
    push generalises (docs/training.md). The other samples still learn against the baseline the left-out
    ones lowered. [] = every sample is trained."""
    format_reward: float = Field(0.0, ge=0.0)
    """Shaping for small models: add format_reward x the share of turns with a well-formed tool call
    (1 - format_errors / turns) to the task reward; 0 = off. pass_rate still counts solved tasks only."""
    epsilon: float = Field(1e-6, gt=0.0)
    """Added to standard deviations before dividing."""
