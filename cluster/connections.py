"""What routes and gateways share: running one link connection, heartbeats, dialing, snapshots.

A manager of links (``RouteManager``, ``GatewayManager``) decides what a link is for: who may
connect, what its HELLO says, what an interest frame means, what to forget when it drops. Everything
else is the same for both and lives here: a connection's reader, writer and heartbeat tasks, the
handshake (see ``cluster.handshake``: nothing but a CHALLENGE goes out before the peer has proved it
knows the secret, and a link that has not finished it in time is closed), PING and PONG, a peer's
ERR, protocol errors answered with an ERR before closing, dialing with a timeout, TLS (from the
first byte, both sides presenting certificates), interest snapshots sent in batches, and the cap on
accounts that frames from links may bring into being.
"""

from __future__ import annotations

import logging
import random
import secrets
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any, Generic, Protocol

import trio

from cluster.config import parse_url
from cluster.frames import (
    NONCE_SIZE,
    SNAPSHOT_BATCH,
    Challenge,
    Err,
    Frame,
    GatewayHello,
    Hello,
    LinkError,
    Ping,
    Pong,
    Proof,
    RouteHello,
    Snapshot,
)
from cluster.handshake import AuthenticationFailed, Handshake
from cluster.host import AccountT, NodeHost
from cluster.link import Link
from routing import InterestChange, Origin
from transport.sessions import Flusher, Session
from transport.tls import (
    TlsConfig,
    TlsError,
    client_context,
    handshake,
    secure_dialed,
    server_context,
)

__all__ = ["Dial", "LinkManager", "LinkSettings"]

log = logging.getLogger("pubmesh")

DIAL_TIMEOUT = 2.0
ACCOUNT_WARNING_INTERVAL = 10.0
"""Seconds between warnings that frames for accounts past the cap are being dropped."""

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
    def secret(self) -> str: ...

    @property
    def max_accounts(self) -> int: ...

    @property
    def max_pending(self) -> int: ...

    @property
    def write_deadline(self) -> float: ...

    @property
    def tls(self) -> TlsConfig | None: ...


class LinkManager(Generic[AccountT]):
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
    """How logs name these links ("Route", "Gateway"); lowercased, what a handshake names."""

    def __init__(
        self,
        host: NodeHost[AccountT],
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
        self.links: list[Link[AccountT]] = []
        """Every open connection, registered or not (for monitoring and shutdown)."""
        self._next_rid = 0
        self._nursery: trio.Nursery | None = None
        tls = settings.tls
        # A link's acceptor requires a certificate just as its dialer checks one (as nats-server
        # does for routes and gateways): only nodes holding certificates from ``ca_file`` get in.
        self._accept_tls = server_context(tls, require_certificates=True) if tls else None
        self._dial_tls = client_context(tls) if tls else None
        self.link_accounts: set[str] = set()
        """Accounts that frames from links brought into being (at most ``max_accounts``)."""
        self._refused_accounts = 0
        self._next_account_warning = 0.0

    @property
    def server_id(self) -> str:
        return self.host.server_id

    # -- what subclasses decide --------------------------------------------------------------

    def _hello(self, link: Link[AccountT]) -> RouteHello | GatewayHello:
        """The HELLO this node sends on ``link`` once the peer is authenticated."""
        raise NotImplementedError

    def _handshake(self, link: Link[AccountT], info: Any) -> None:
        """The peer's HELLO arrived: accept the link (register it) or refuse it."""
        raise NotImplementedError

    def _control(self, link: Link[AccountT], frame: Frame) -> None:
        """Any frame past the handshake other than a message, heartbeat or ERR."""
        raise NotImplementedError

    def _dropped(self, link: Link[AccountT]) -> None:
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
        setup: Callable[[Link[AccountT]], None] | None = None,
    ) -> Link[AccountT]:
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
        opening = Handshake(
            self.kind.lower(),
            self.settings.secret,
            dialer=solicited,
            nonce=secrets.token_bytes(NONCE_SIZE),
        )
        link = Link(
            self.host,
            partial(self._on_frame, opening),
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
            admit=self.admit_account,
        )
        session.conn = link
        self._next_rid += 1
        link.rid = self._next_rid
        if solicited:
            link.connection = f"{self._rng.getrandbits(64):016x}"
        if setup is not None:
            setup(link)
        self.links.append(link)
        link.send(opening.challenge())
        try:
            if secure is not None and not await self._secure(secure, link):
                return link
            assert self._nursery is not None  # (links are served only while ``run`` runs)
            await session.run(
                self.flusher,
                self._nursery,
                write_deadline=self.settings.write_deadline,
                timers=partial(self._heartbeat, session),
            )
        finally:
            link.close("Connection closed")
            await trio.aclose_forcefully(stream)
            self.links.remove(link)
            self._dropped(link)
        return link

    async def _secure(self, stream: trio.SSLStream[trio.abc.Stream], link: Link[AccountT]) -> bool:
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
        link: Link[AccountT] = session.conn  # type: ignore[assignment]
        settings = self.settings
        deadline = trio.current_time() + settings.ping_interval * settings.ping_max
        while link.closing is None:
            await trio.sleep(settings.ping_interval)
            if link.remote is None:  # (no PING yet: before its HELLO, a peer may send none back)
                if trio.current_time() >= deadline:
                    link.log(logging.INFO, f"{self.kind} handshake not done in time, closing")
                    link.refuse("handshake timeout", "Handshake timeout")
                    return
                continue
            if not link.heartbeat(settings.ping_interval, settings.ping_max):
                link.log(logging.INFO, f"{self.kind} silent for too long, closing")
                link.close("Stale Connection", flush=False)  # (which stops its session at once)

    def _on_frame(self, opening: Handshake, link: Link[AccountT], frame: Frame) -> None:
        """Everything but messages (which ``Link.receive`` delivers itself)."""
        kind = type(frame)
        if link.remote is None:
            self._opening(opening, link, frame)
        elif kind is Ping:
            link.send(Pong())
        elif kind is Pong:
            link.pong()
        elif kind is Err:
            text = frame.text  # type: ignore[union-attr]
            link.log(logging.WARNING, f"{self.kind} closed by peer: {text}")
            link.close(f"Closed by peer: {text}")
        elif kind is Hello or kind is Challenge or kind is Proof:
            raise LinkError(f"{kind.__name__.upper()} after the handshake")
        else:
            self._control(link, frame)

    def _opening(self, opening: Handshake, link: Link[AccountT], frame: Frame) -> None:
        """A frame before the peer's HELLO: the handshake, or a peer's ERR saying why it refused."""
        if isinstance(frame, Challenge):
            proof = opening.on_challenge(frame)
            if proof is not None:
                link.send(proof)
        elif isinstance(frame, Proof):
            try:
                proof = opening.on_proof(frame)
            except AuthenticationFailed as exc:
                self._refuse(link, str(exc))
                return
            link.decoder.open()
            if proof is not None:
                link.send(proof)
            link.send(Hello(self._hello(link)))
        elif isinstance(frame, Hello) and opening.authenticated:
            self._handshake(link, frame.info)
        elif isinstance(frame, Err):
            link.log(logging.WARNING, f"{self.kind} refused by peer: {frame.text}")
            link.close(f"Refused by peer: {frame.text}")
        else:
            raise LinkError(
                f"{type(frame).__name__.upper()} before the handshake (CHALLENGE, PROOF, HELLO)"
            )

    def admit_account(self, name: str) -> AccountT | None:
        """The account a message from a link is for, or None if it may not be brought into being
        (see ``admits``)."""
        account = self.host.accounts.get(name)
        if account is None and self.admits(name):
            account = self.host.account(name)
        return account

    def admits(self, name: str) -> bool:
        """Whether frames from links may name account ``name``: any account the node has, and new
        ones until ``max_accounts`` came from links; past that they are dropped, with a warning now
        and then, so a peer cannot make the node hold accounts without bound."""
        if name in self.link_accounts or name in self.host.accounts:
            return True
        if len(self.link_accounts) < self.settings.max_accounts:
            self.link_accounts.add(name)
            return True
        self._refused_accounts += 1
        now = trio.current_time()
        if now >= self._next_account_warning:
            self._next_account_warning = now + ACCOUNT_WARNING_INTERVAL
            log.warning(
                "%s frames for unknown accounts dropped (%d so far): %d accounts came from links "
                "already, the most allowed", self.kind, self._refused_accounts, len(self.link_accounts)
            )  # fmt: skip
        return False

    def _refuse(self, link: Link[AccountT], reason: str) -> None:
        link.log(logging.WARNING, f"Refusing {self.kind.lower()}: {reason}")
        link.refuse(reason, f"Refused: {reason}")

    def _send_snapshot(self, link: Link[AccountT], changes: Iterable[InterestChange]) -> None:
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

    def _backoff(self, delay: float, most: float | None = None) -> tuple[float, float]:
        """(how long to wait now, the delay to pass next time): exponential, with jitter, up to
        ``most`` (default: the configured ``reconnect_max``)."""
        settings = self.settings
        wait = delay * (0.5 + self._rng.random())
        most = settings.reconnect_max if most is None else max(most, settings.reconnect_max)
        return wait, min(max(delay * 2, settings.reconnect_min), most)

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
        try:
            return await secure_dialed(stream, self._dial_tls, host, self.settings.tls)
        except TlsError as exc:
            log.warning("Error trying to connect to %s %s: %s", self.kind.lower(), url, exc)
            return None


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
