"""Draft tokens from a sequence's own context (prompt lookup), for speculative decoding.

A coding agent copies a lot: it reads a function, then writes it back with one token changed. The
draft for the next tokens is what followed the latest earlier occurrence of the sequence's last few
tokens (its last 3-gram, else its last 2-gram); the engine verifies the draft in one forward and keeps
what the model itself would have produced (:func:`coderl.engine.sampler.verify_draft`), so a draft
only ever changes how fast tokens come, never which.
"""

from __future__ import annotations

from collections.abc import Iterable

LONGEST = 3
"""The longest n-gram looked up (the longest match wins)."""
SHORTEST = 2
"""The shortest n-gram looked up: a single token recurs too often in code to predict what follows."""


class NGramDraft:
    """An index of every n-gram of a growing token sequence (n in [SHORTEST, LONGEST]) to where it
    last occurred; :meth:`propose` drafts the tokens that followed the latest earlier occurrence of
    the sequence's own tail."""

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        self.tokens: list[int] = []
        self._after: dict[tuple[int, ...], int] = {}
        """n-gram -> the position right after its latest occurrence that has a token there."""
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        """Append tokens; each n-gram that now has a successor becomes findable."""
        seq = self.tokens
        for tok in tokens:
            t = len(seq)  # the position tok lands at: every n-gram ending just before it has a successor
            for n in range(SHORTEST, LONGEST + 1):
                if t >= n:
                    self._after[tuple(seq[t - n : t])] = t
            seq.append(tok)

    def propose(self, k: int) -> list[int]:
        """Up to ``k`` tokens that followed the latest earlier occurrence of the longest tail n-gram
        found; empty when none recurs."""
        seq = self.tokens
        if k <= 0:
            return []
        for n in range(LONGEST, SHORTEST - 1, -1):
            if len(seq) < n:
                continue
            at = self._after.get(tuple(seq[-n:]))
            if at is not None:
                return seq[at : at + k]
        return []
