"""Free TCP ports: one helper for every server coderl starts on a port of its own choosing (the
sharded actor's rendezvous, engine servers a launcher starts, benchmark servers).

Owns: asking the kernel for a port nobody listens on now. Must not: hold it (the caller binds it
soon after; another process could take it in between, which callers retry or accept).
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` nobody listens on now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
