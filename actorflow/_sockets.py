"""The listening socket the inspector's and the service's servers hand to uvicorn."""

from __future__ import annotations

import socket

__all__ = ["listening_socket"]


def listening_socket(host: str, port: int, *, backlog: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port`` 0: any free one) and listening.

    It is made here, not by uvicorn, so the caller knows its port before serving and
    connections made before the server runs wait in the backlog instead of failing.
    ``IPPROTO_TCP`` is spelled out: asyncio sets ``TCP_NODELAY`` on accepted sockets
    only when their proto says TCP, and without it each response waited ~40 ms for
    a delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(backlog)
    return sock
