"""Where the Redis front door listens, and moving it while the node runs (``CONFIG SET port``).

``RedisListeners`` serves the Redis listening sockets with one accept task
(``trio.serve_listeners``) in the node's acceptor nursery, under a cancel scope of its own.

``prepare(port)`` binds and listens on the new port at once, so that a ``CONFIG SET`` naming
several parameters fails, changing none of them, when the port is taken (redis-server's "Unable to
listen on this port"). It returns a ``Rebind``: calling it moves the front door (an accept task for
the new sockets starts, the old one is cancelled and its sockets closed; connections already made
stay); ``abandon`` closes the new sockets instead. Port 0 stops listening for Redis clients, as in
redis-server.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, Sequence

import trio

__all__ = ["Rebind", "RedisListeners"]

log = logging.getLogger("pubmesh")

Handler = Callable[[trio.SocketStream], Awaitable[None]]


class Rebind:
    """A Redis port already bound and listening, ready to take over (or be abandoned)."""

    __slots__ = ("_owner", "listeners", "port")

    def __init__(self, owner: RedisListeners, listeners: list[trio.SocketListener], port: int) -> None:
        self._owner = owner
        self.listeners = listeners
        self.port = port

    def __call__(self) -> None:
        """Serve Redis clients on the new port from now on (and no longer on the old one)."""
        self._owner.move(self)

    def abandon(self) -> None:
        """Close the new port's sockets: the change is not made."""
        for listener in self.listeners:
            listener.socket.close()
        self.listeners = []


class RedisListeners:
    """The Redis front door's listening sockets and the task accepting on them."""

    def __init__(self, host: str, listeners: Sequence[trio.SocketListener], handle: Handler) -> None:
        self.host = host
        self.listeners = list(listeners)
        self.port = listeners[0].socket.getsockname()[1] if listeners else 0
        self._handle = handle
        self._scope = trio.CancelScope()
        self._acceptors: trio.Nursery | None = None
        self._handlers: trio.Nursery | None = None

    def start(self, acceptors: trio.Nursery, handlers: trio.Nursery) -> None:
        """Accept on the sockets in ``acceptors``; connections are served in ``handlers``."""
        self._acceptors, self._handlers = acceptors, handlers
        if self.listeners:
            acceptors.start_soon(self._accept, self.listeners, self._scope)

    async def _accept(self, listeners: list[trio.SocketListener], scope: trio.CancelScope) -> None:
        with scope:
            await trio.serve_listeners(self._handle, listeners, handler_nursery=self._handlers)

    def prepare(self, port: int) -> Rebind | str:
        """Bind and listen on ``port`` (0: nowhere) for a move; the error text if that fails."""
        try:
            listeners = _listen(self.host, port) if port else []
        except OSError as exc:
            log.warning("Could not listen on %s:%d for Redis clients: %s", self.host, port, exc)
            return "Unable to listen on this port. Check server logs."
        bound = listeners[0].socket.getsockname()[1] if listeners else 0
        return Rebind(self, listeners, bound)

    def move(self, rebind: Rebind) -> None:
        """Take ``rebind``'s sockets in place of the current ones (``Rebind.__call__``)."""
        if self._acceptors is None:
            rebind.abandon()
            return
        old, old_scope = self.listeners, self._scope
        self.listeners, self.port, self._scope = rebind.listeners, rebind.port, trio.CancelScope()
        if self.listeners:
            self._acceptors.start_soon(self._accept, self.listeners, self._scope)
        old_scope.cancel()  # (the old accept task stops waiting before its sockets close)
        for listener in old:
            listener.socket.close()
        log.info("Listening for Redis connections on %s:%d", self.host, self.port)


def _listen(host: str, port: int) -> list[trio.SocketListener]:
    """Listening sockets on ``host:port`` for every address family the host has, as trio opens
    them at start (address reuse; IPv6 sockets for IPv6 only)."""
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        ):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(socket.SOMAXCONN)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return [trio.SocketListener(trio.socket.from_stdlib_socket(sock)) for sock in sockets]
