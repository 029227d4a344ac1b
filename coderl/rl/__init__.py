"""Pure RL algorithm functions over torch tensors: advantages, policy losses, KL, DAPO batch shaping.

Per-token tensors are padded ``[B, T]`` aligned with the response tokens; ``mask`` is 1 on the tokens
the model sampled (the only ones trained) and 0 on environment tokens and padding. Variants live in
plain dicts keyed by the ``Literal`` fields of ``AlgoConfig``.
"""

from coderl.rl.advantages import ADVANTAGES, compute_advantages
from coderl.rl.config import AlgoConfig
from coderl.rl.kl import KL_ESTIMATORS, entropy_from_logits, kl_penalty
from coderl.rl.losses import LOSS_AGG, POLICY_LOSSES, aggregate, count_normalisers, tis_weights
from coderl.rl.objective import compute_loss, kl_token_rewards
from coderl.rl.sampling import GroupFilter, filter_groups, format_bonus, keep_groups, overlong_penalty
from coderl.rl.value import explained_variance, value_loss

__all__ = [
    "ADVANTAGES",
    "KL_ESTIMATORS",
    "LOSS_AGG",
    "POLICY_LOSSES",
    "AlgoConfig",
    "GroupFilter",
    "aggregate",
    "compute_advantages",
    "compute_loss",
    "count_normalisers",
    "entropy_from_logits",
    "explained_variance",
    "filter_groups",
    "format_bonus",
    "keep_groups",
    "kl_penalty",
    "kl_token_rewards",
    "overlong_penalty",
    "tis_weights",
    "value_loss",
]
