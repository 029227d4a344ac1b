"""The trainer: the actor (policy model, packed log-probs, optimizer) and the training loop around it.

Import from the modules (``coderl.train.actor.Actor``, ``coderl.train.loop.Trainer``): this package is
imported by the config schema (its ``ActorConfig`` / ``TrainConfig`` sections), so it stays light.
"""
