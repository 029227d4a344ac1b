"""Stop strings: found while tokens are generated, and cut on a token boundary afterwards.

An engine given ``SamplingParams.stop`` checks the text of each new token's tail (:class:`StopWatch`)
and ends the request at the token that completes a stop string, so a stop saves the rest of the
generation. That token stays in ``Completion.token_ids`` (it was sampled) and ``Completion.stop_str``
names the string.

What a caller returns and records is cut by :func:`cut_at_stop`: the whole tokens before the stop
string begins, and exactly their text. When the stop string begins inside a token (``"lo wo"`` in the
token ``" world"``), that token is dropped with the stop: the reply ends a few characters early, but the
recorded ids decode to exactly the text the client received — the next turn never builds on text the
agent did not see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from coderl.engine.params import ExpectName

Decode = Callable[[list[int]], str]

_SLACK = 8
"""Extra tokens of tail: special tokens and partial UTF-8 bytes can decode to no character at all."""


def first_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """(where, which) of the stop string that begins first in ``text`` (the longer on a tie)."""
    hits = [(text.find(s), -len(s), s) for s in stops if s and s in text]
    if not hits:
        return None
    at, _, stop = min(hits)
    return at, stop


def partial_stop_at(text: str, stops: Sequence[str]) -> int:
    """Where the earliest stop string could still begin as ``text`` grows: the first position whose
    rest of the text is the start of a stop string (``len(text)`` when no stop string could)."""
    reach = max((len(s) for s in stops), default=0)
    for at in range(max(0, len(text) - reach + 1), len(text)):
        tail = text[at:]
        if any(s.startswith(tail) for s in stops if s):
            return at
    return len(text)


class StopWatch:
    """Finds a stop string as a completion grows, decoding only the last tokens: a stop string of n
    characters spans at most n tokens, and every earlier position was checked on an earlier token."""

    def __init__(self, decode: Decode, stops: Sequence[str]) -> None:
        self.decode = decode
        self.stops = [s for s in stops if s]
        self.window = max((len(s) for s in self.stops), default=0) + _SLACK

    def check(self, ids: list[int]) -> str | None:
        """The stop string that the text of ``ids`` now contains, if any."""
        if not self.stops or not ids:
            return None
        hit = first_stop(self.decode(ids[-self.window :]), self.stops)
        return None if hit is None else hit[1]


def cut_at_stop(decode: Decode, ids: list[int], stops: Sequence[str]) -> tuple[int, str, str | None]:
    """(how many ids to keep, their text, the stop string hit): every id whose text lies before the
    first stop string; all of ``ids`` and their text when no stop string occurs."""
    text = decode(ids)
    hit = first_stop(text, stops)
    if hit is None:
        return len(ids), text, None
    at, stop = hit
    lo, hi = 0, len(ids)  # the most ids whose text ends at or before the stop begins
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(decode(ids[:mid])) <= at:
            lo = mid
        else:
            hi = mid - 1
    return lo, decode(ids[:lo]), stop


NameVerdict = Literal["met", "departed", "pending"]

NAME_WINDOW = 48
"""Tokens over which :class:`NameWatch` looks: a name still pending after them (spaces, say) is left
to the caller's parser."""


def name_verdict(text: str, expect: ExpectName) -> NameVerdict:
    """Whether ``text`` opens with one of ``expect.names`` then ``expect.end`` (met), never can
    (departed), or may yet (pending). As Qwen3-Coder's XML parser reads ``<function=NAME>``: the name
    is the text before ``end``, less the white space around it, with no line break in it."""
    if text.endswith("\ufffd"):  # a character's bytes split across tokens: the next ones finish it
        return "pending"
    cut = text.find(expect.end)
    head = text if cut < 0 else text[:cut]
    name = head.strip()
    if "\n" in head:
        return "departed"
    if cut >= 0:
        return "met" if name in expect.names else "departed"
    if name and head.rstrip() != head:  # a space after the name: only end may follow it
        return "pending" if name in expect.names else "departed"
    return "pending" if any(n.startswith(name) for n in expect.names) else "departed"


class NameWatch:
    """Checks a growing completion against ``expect`` (:func:`name_verdict`) until it is met, departs,
    or runs past :data:`NAME_WINDOW` tokens; :meth:`check` answers True at the token that departs."""

    def __init__(self, decode: Decode, expect: ExpectName) -> None:
        self.decode = decode
        self.expect = expect
        self.done = False

    def check(self, ids: list[int]) -> bool:
        if self.done or not ids:
            return False
        verdict = name_verdict(self.decode(ids), self.expect)
        self.done = verdict != "pending" or len(ids) >= NAME_WINDOW
        return verdict == "departed"
