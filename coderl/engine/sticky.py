"""Sticky sessions: which server a conversation's turns go to, so its cached KV is reused.

Owns: the bounded map session id -> server key, least recently used entries evicted first (a
session's next turn refreshes it). Must not: choose a server (the router and the relay do, by load)
or know what a key is (a replica index, a worker name).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")


class StickySessions(Generic[K]):
    """At most ``max_sessions`` session -> key entries (LRU)."""

    def __init__(self, max_sessions: int) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions: got {max_sessions}; give at least 1")
        self.max_sessions = max_sessions
        self._entries: OrderedDict[str, K] = OrderedDict()

    def get(self, session_id: str) -> K | None:
        """The session's key (and it becomes the most recently used), or None."""
        key = self._entries.get(session_id)
        if key is not None:
            self._entries.move_to_end(session_id)
        return key

    def pin(self, session_id: str, key: K) -> None:
        """The session's turns go to ``key`` from now on; the least recently used entry beyond the
        bound is forgotten."""
        self._entries[session_id] = key
        self._entries.move_to_end(session_id)
        while len(self._entries) > self.max_sessions:
            self._entries.popitem(last=False)

    def drop(self, session_id: str) -> K | None:
        """Forget the session (it ended, or its server is gone); its key, or None."""
        return self._entries.pop(session_id, None)

    def drop_where(self, gone: Callable[[K], bool]) -> int:
        """Forget every session whose key ``gone`` says is gone; how many."""
        stale = [s for s, k in self._entries.items() if gone(k)]
        for s in stale:
            del self._entries[s]
        return len(stale)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)
