"""Guided rollouts: the environment writes the start of a demonstration in the model's place.

A weak policy whose every sample of a task fails gives a group-relative estimator nothing to learn
from. Prefix sampling (the idea of LUFFY, Yan et al. 2025, and of "prefix-guided" RL for weak models)
gives some samples of such a group a head start: the first ``tokens`` tokens of the task's gold
demonstration (its model-side turns, in order) are written by the environment, and the model samples
the rest on-policy. Those tokens are the environment's — mask 0, logprob 0, never in the loss — so
the policy is trained only on what it sampled itself, conditioned on a context that now holds part of
the answer. Annealed to 0 tokens over training, the guidance goes away and the last steps are plain
on-policy RL.

Owns: which tokens of which turn the environment writes (:class:`Guide`). Must not: sample, parse or
run tools (the loop does; a written turn's tool call runs like a sampled one).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Guide:
    """The model-side turns of a demonstration as token ids (each ending with the end-of-turn token,
    after the loop's response prefix) and how many of their tokens, counted from the first turn on,
    the environment writes."""

    turns: tuple[tuple[int, ...], ...]
    tokens: int

    @property
    def total(self) -> int:
        """Tokens of the whole demonstration."""
        return sum(len(t) for t in self.turns)

    def written(self, turn: int) -> list[int]:
        """What the environment writes at the start of model turn ``turn`` (0-based): the whole turn
        (the loop then runs its tool call without asking the engine), a first part of it (the engine
        continues it), or nothing (the engine writes the whole turn)."""
        if turn >= len(self.turns):
            return []
        before = sum(len(t) for t in self.turns[:turn])
        left = self.tokens - before
        return list(self.turns[turn][: max(0, left)])

    def whole(self, turn: int) -> bool:
        """Whether the environment writes turn ``turn`` entirely."""
        return turn < len(self.turns) and len(self.written(turn)) == len(self.turns[turn]) > 0


def guide_tokens(total: int, fraction: float) -> int:
    """Tokens written for a demonstration of ``total`` tokens at ``fraction`` (0..1), rounded down so
    that a fraction below 1 always leaves the model something to write."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"guide fraction: got {fraction}; give a share between 0 and 1")
    return int(total * fraction)
