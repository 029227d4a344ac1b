"""Stored responses for ``previous_response_id``: per session, in memory, bounded.

A stored response keeps the items it added to its conversation (the request's new input items, then its
output items) and a link to the response it continued, so a chain of N turns holds each item once. A
session keeps its latest ``per_session`` responses addressable (older ones stay reachable through the
chain of a newer one); the ``sessions`` least recently used sessions are kept. This is a cache: after
a restart, or once evicted, a response is rebuilt from the session's durable record (the recorded
request and reply of each response in its chain, :func:`coderl.proxy.responses_api.responses_router`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from coderl.proxy.responses_items import Item

PER_SESSION = 64
SESSIONS = 1024


@dataclass(frozen=True)
class StoredResponse:
    parent: StoredResponse | None
    """The response this one continued (its ``previous_response_id``), if any."""
    items: tuple[Item, ...]
    """The request's input items, then the response's output items."""

    def conversation(self) -> list[Item]:
        """Every item of the conversation up to and including this response's output."""
        chain: list[StoredResponse] = []
        node: StoredResponse | None = self
        while node is not None:
            chain.append(node)
            node = node.parent
        return [item for link in reversed(chain) for item in link.items]


class ResponseMemory:
    """The stored responses of each session, by response id (least recently used evicted first)."""

    def __init__(self, per_session: int = PER_SESSION, sessions: int = SESSIONS) -> None:
        self.per_session = per_session
        self.sessions = sessions
        self._by_session: OrderedDict[str, OrderedDict[str, StoredResponse]] = OrderedDict()

    def get(self, session_id: str, response_id: str) -> StoredResponse | None:
        responses = self._by_session.get(session_id)
        if responses is None or response_id not in responses:
            return None
        self._by_session.move_to_end(session_id)
        responses.move_to_end(response_id)
        return responses[response_id]

    def put(self, session_id: str, response_id: str, response: StoredResponse) -> None:
        responses = self._by_session.setdefault(session_id, OrderedDict())
        self._by_session.move_to_end(session_id)
        responses[response_id] = response
        responses.move_to_end(response_id)
        while len(responses) > self.per_session:
            responses.popitem(last=False)
        while len(self._by_session) > self.sessions:
            self._by_session.popitem(last=False)

    def __len__(self) -> int:
        return sum(len(r) for r in self._by_session.values())
