"""The trainer: the actor (policy model, packed log-probs, optimizer) and, around it, the training loop."""

from coderl.train.actor import Actor, Scored
from coderl.train.config import ActorConfig

__all__ = ["Actor", "ActorConfig", "Scored"]
