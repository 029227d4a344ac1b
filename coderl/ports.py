"""Free TCP ports: one helper for every server coderl starts on a port of its own choosing (the
sharded actor's rendezvous, engine servers a launcher starts, benchmark servers).

Owns: asking the kernel for a port nobody listens on now. Must not: hold it (the caller binds it
soon after; another process could take it in between, which callers retry or accept).
"""

from __future__ import annotations

import socket

from coderl.errors import ConfigError


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` nobody listens on now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_host(host: str, key: str = "server.host") -> None:
    """ConfigError, naming ``key`` and ``host``, unless a server can listen on ``host`` here: a name that
    does not resolve, or an address that is not this machine's, was a bare ``[Errno -2]`` from the
    server once it started. (A port in use is left to the server, which names it.)"""
    if not host:
        return  # every interface, to the server
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"{key}: got {host!r}, which does not resolve ({exc.strerror}); give an address of this "
                          "machine such as 127.0.0.1 (loopback) or 0.0.0.0 (every interface)") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address[0], 0))
        except OSError as exc:
            raise ConfigError(f"{key}: got {host!r}, which is not an address of this machine ({exc.strerror}); "
                              "give 127.0.0.1 (loopback) or 0.0.0.0 (every interface)") from None
