"""What routes and gateways share: running one link connection, heartbeats, dialing, snapshots.

A manager of links (``RouteManager``, ``GatewayManager``) decides what a link is for: who may
connect, what its HELLO says, what an interest frame means, what to forget when it drops. Everything
else is the same for both and lives here: a connection's reader, writer and heartbeat tasks, the
first frame that must be a HELLO, PING and PONG, a peer's ERR, protocol errors answered with an ERR
before closing, dialing with a timeout, TLS (from the first byte, both sides presenting certificates),
and interest snapshots sent in batches.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any, Protocol

import trio

from cluster.config import parse_url
from cluster.frames import Err, Frame, Hello, LinkError, Ping, Pong, Snapshot
from cluster.host import NodeHost
from cluster.link import Link
from routing import InterestChange, Origin
from transport.sessions import Flusher, Session
from transport.tls import TlsConfig, TlsError, client_context, handshake, server_context

__all__ = ["Dial", "LinkManager", "LinkSettings"]

log = logging.getLogger("pubmesh")

SNAPSHOT_BATCH = 1000
"""Interest entries per snapshot frame: 100k subscriptions are a hundred frames, not 100k."""
DIAL_TIMEOUT = 2.0

Dial = Callable[[str, int], Awaitable[trio.abc.Stream]]
"""Opens a stream to (host, port); the in-process harness passes one over memory."""


class LinkSettings(Protocol):
    """The settings every kind of link has (``ClusterConfig``, ``GatewayConfig``)."""

    @property
    def ping_interval(self) -> float: ...

    @property
    def ping_max(self) -> int: ...

    @property
    def reconnect_min(self) -> float: ...

    @property
    def reconnect_max(self) -> float: ...

    @property
    def max_frame(self) -> int: ...

    @property
    def max_pending(self) -> int: ...

    @property
    def write_deadline(self) -> float: ...

    @property
    def tls(self) -> TlsConfig | None: ...


class LinkManager:
    """The connection machinery of one kind of link; subclasses give the links their meaning.

    Args:
        host: the node.
        settings: heartbeats, backoff and frame size for these links.
        flusher: the node's flusher (link input is delivered to client connections and back).
        dial: how to open a connection (real TCP unless a test network is passed).
        rng: the source of backoff jitter and connection names.

    Raises:
        OSError, ssl.SSLError, ValueError: ``settings.tls`` names unusable files.
    """

    kind = "Link"
    """How logs name these links ("Route", "Gateway")."""

    def __init__(
        self,
        host: NodeHost,
        settings: LinkSettings,
        flusher: Flusher,
        *,
        dial: Dial = trio.open_tcp_stream,
        rng: random.Random | None = None,
    ) -> None:
        self.host = host
        self.settings = settings
        self.flusher = flusher
        self._dial = dial
        self._rng = rng or random.Random()
        self.links: list[Link] = []
        """Every open connection, registered or not (for monitoring and shutdown)."""
        self._next_rid = 0
        self._nursery: trio.Nursery | None = None
        tls = settings.tls
        # A link's acceptor requires a certificate just as its dialer checks one (as nats-server
        # does for routes and gateways): only nodes holding certificates from ``ca_file`` get in.
        self._accept_tls = server_context(tls, require_certificates=True) if tls else None
        self._dial_tls = client_context(tls) if tls else None

    @property
    def server_id(self) -> str:
        return self.host.server_id

    # -- what subclasses decide --------------------------------------------------------------

    def _hello(self, link: Link) -> dict[str, Any]:
        """The HELLO this node sends first on ``link``."""
        raise NotImplementedError

    def _handshake(self, link: Link, info: dict[str, Any]) -> None:
        """The peer's HELLO arrived: accept the link (register it) or refuse it."""
        raise NotImplementedError

    def _control(self, link: Link, frame: Frame) -> None:
        """Any frame past the handshake other than a message, heartbeat or ERR."""
        raise NotImplementedError

    def _dropped(self, link: Link) -> None:
        """A connection ended (for any reason): forget what came over it."""
        raise NotImplementedError

    # -- one connection ----------------------------------------------------------------------

    async def _serve(
        self,
        stream: trio.abc.Stream,
        *,
        solicited: bool,
        origin: Origin = Origin.ROUTE,
        takes_messages: bool = True,
        setup: Callable[[Link], None] | None = None,
    ) -> Link:
        """Run one connection until it closes; return its link (its ``closing`` says why).

        ``setup`` marks the new link before its HELLO goes out (a route's slot, say). An accepted
        connection does its TLS handshake (if configured) here, in its own task; a dialed one
        arrives secured by ``_connect``.
        """
        address = _peer_address(stream)
        secure: trio.SSLStream[trio.abc.Stream] | None = None
        if not solicited and self._accept_tls is not None:
            stream = secure = trio.SSLStream(stream, self._accept_tls, server_side=True)
        session = Session(stream)
        link = Link(
            self.host,
            self._on_frame,
            solicited=solicited,
            max_frame=self.settings.max_frame,
            max_pending=self.settings.max_pending,
            wake=partial(self.flusher.wake, session),
            abandon=session.abandon,
            address=address,
            clock=trio.current_time,
            origin=origin,
            takes_messages=takes_messages,
            kind=self.kind,
        )
        session.conn = link
        self._next_rid += 1
        link.rid = self._next_rid
        if solicited:
            link.connection = f"{self._rng.getrandbits(64):016x}"
        if setup is not None:
            setup(link)
        self.links.append(link)
        link.send(Hello(self._hello(link)))
        try:
            if secure is not None and not await self._secure(secure, link):
                return link
            await session.run(
                self.flusher,
                write_deadline=self.settings.write_deadline,
                timers=partial(self._heartbeat, session),
            )
        finally:
            link.close("Connection closed")
            await trio.aclose_forcefully(stream)
            self.links.remove(link)
            self._dropped(link)
        return link

    async def _secure(self, stream: trio.SSLStream[trio.abc.Stream], link: Link) -> bool:
        """Whether the TLS handshake of an accepted connection succeeded (in time)."""
        assert self.settings.tls is not None
        try:
            await handshake(stream, self.settings.tls)
        except TlsError as exc:
            link.log(logging.WARNING, f"{self.kind} {exc}")
            link.close("TLS Handshake Failure", flush=False)
            return False
        return True

    async def _heartbeat(self, session: Session) -> None:
        link: Link = session.conn  # type: ignore[assignment]
        settings = self.settings
        while link.closing is None:
            await trio.sleep(settings.ping_interval)
            if not link.heartbeat(settings.ping_interval, settings.ping_max):
                link.log(logging.INFO, f"{self.kind} silent for too long, closing")
                link.close("Stale Connection", flush=False)  # (which stops its session at once)

    def _on_frame(self, link: Link, frame: Frame) -> None:
        """Everything but messages (which ``Link.receive`` delivers itself)."""
        kind = type(frame)
        if link.remote is None:
            if kind is not Hello:
                raise LinkError("the first frame must be HELLO")
            self._handshake(link, frame.info)  # type: ignore[union-attr]
        elif kind is Ping:
            link.send(Pong())
        elif kind is Pong:
            link.pong()
        elif kind is Err:
            text = frame.text  # type: ignore[union-attr]
            link.log(logging.WARNING, f"{self.kind} closed by peer: {text}")
            link.close(f"Closed by peer: {text}")
        elif kind is Hello:
            raise LinkError("HELLO sent twice")
        else:
            self._control(link, frame)

    def _refuse(self, link: Link, reason: str) -> None:
        link.log(logging.WARNING, f"Refusing {self.kind.lower()}: {reason}")
        link.refuse(reason, f"Refused: {reason}")

    def _send_snapshot(self, link: Link, changes: Iterable[InterestChange]) -> None:
        """Interest (as announcements) in per-account batches of frames."""
        batches: dict[str, list[tuple[str, str | None, int]]] = {}
        for change in changes:
            entries = batches.setdefault(change.account, [])
            entries.append((change.subject, change.queue, change.weight))
            if len(entries) >= SNAPSHOT_BATCH:
                link.send(Snapshot(change.account, entries))
                batches[change.account] = []
        for account, entries in batches.items():
            if entries:
                link.send(Snapshot(account, entries))

    # -- dialing -----------------------------------------------------------------------------

    def _backoff(self, delay: float) -> tuple[float, float]:
        """(how long to wait now, the delay to pass next time): exponential, with jitter."""
        settings = self.settings
        wait = delay * (0.5 + self._rng.random())
        return wait, min(max(delay * 2, settings.reconnect_min), settings.reconnect_max)

    async def _connect(self, url: str) -> trio.abc.Stream | None:
        """A connection to ``url`` (secured, with TLS), or None if none could be made."""
        try:
            host, port = parse_url(url)
            with trio.fail_after(DIAL_TIMEOUT):
                stream = await self._dial(host, port)
        except (OSError, ValueError, trio.TooSlowError) as exc:
            log.debug("Error trying to connect to %s %s: %s", self.kind.lower(), url, exc)
            return None
        if self._dial_tls is None:
            return stream
        assert self.settings.tls is not None
        secure = trio.SSLStream(stream, self._dial_tls, server_hostname=host)
        try:
            await handshake(secure, self.settings.tls)
        except TlsError as exc:
            log.warning("Error trying to connect to %s %s: %s", self.kind.lower(), url, exc)
            await trio.aclose_forcefully(stream)
            return None
        return secure


def _peer_address(stream: trio.abc.Stream) -> tuple[str, int]:
    if isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if isinstance(stream, trio.SocketStream):
        try:
            host, port, *_ = stream.socket.getpeername()
        except OSError:
            return "", 0
        return str(host), int(port)
    return "", 0
