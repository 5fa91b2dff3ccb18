"""What every client connection is, whichever protocol it speaks: NATS (``node.nats.client``) or
Redis (``node.resp.connection``).

``Connection`` is the ``Outbox`` of one client with the state the node keeps of it: who it is
(connection id, address, user, account, permissions), its subscriptions, what monitoring shows
of it (times, traffic, round trip, the client's name and library), and how it ends. Each
protocol derives from it and adds its own parsing and replies; ``kind`` names the protocol
("nats", "resp"), as /connz's ``type`` shows it.

**Ending** is the same for every protocol: the transport's news of a hang-up (``hangup``), a bug
(``internal_error``, which sends the protocol's own generic error first), a slow consumer
(``_congested`` and ``_cut_off``: past its limit of pending output a connection is closed at once,
its output dropped, and counted in the broker's ``slow_consumers``), then ``close`` (which lets go
of what only an open connection holds: each protocol's ``_forget_input`` and ``_release`` say
what that is) and, once the
I/O side is done, ``retire`` (which keeps only what /connz shows of a closed connection). Close
reasons are nats-server's words (``Reason``), for every protocol.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from node.accounts.account import DEFAULT_ACCOUNT, Account
from node.accounts.auth import Verifying
from node.accounts.permissions import PermissionSet
from node.broker import Broker
from node.config.options import UserConfig
from routing import Message, Subscription
from transport.outbox import Outbox
from transport.sessions import Hangup

__all__ = ["MAX_SUBS_EXCEEDED", "Connection", "Reason"]


class Reason:
    """Why a connection closed, in nats-server's words (``/connz`` shows them)."""

    CLIENT_CLOSED: Final = "Client Closed"
    PROTOCOL_VIOLATION: Final = "Protocol Violation"
    PARSE_ERROR: Final = "Parse Error"
    BAD_CLIENT_PROTOCOL: Final = "Bad Client Protocol Version"
    NO_RESPONDERS_REQUIRES_HEADERS: Final = "No Responders Requires Headers"
    AUTH_VIOLATION: Final = "Authentication Failure"
    AUTH_TIMEOUT: Final = "Authentication Timeout"
    STALE: Final = "Stale Connection"
    SLOW_PENDING: Final = "Slow Consumer (Pending Bytes)"
    SLOW_DEADLINE: Final = "Slow Consumer (Write Deadline)"
    MAX_PAYLOAD: Final = "Maximum Message Payload Exceeded"
    MAX_CONTROL_LINE: Final = "Maximum Control Line Exceeded"
    MAX_CONNECTIONS: Final = "Maximum Connections Exceeded"
    SHUTDOWN: Final = "Server Shutdown"
    READ_ERROR: Final = "Read Error"
    WRITE_ERROR: Final = "Write Error"
    INTERNAL_ERROR: Final = "Internal Error"
    TLS_HANDSHAKE: Final = "TLS Handshake Failure"


MAX_SUBS_EXCEEDED: Final = "maximum subscriptions exceeded"
"""The error of a subscription past ``max_subscriptions``, in every protocol."""

_HANGUP_REASONS: Final = {
    Hangup.CLOSED_BY_PEER: Reason.CLIENT_CLOSED,
    Hangup.READ_ERROR: Reason.READ_ERROR,
    Hangup.WRITE_DEADLINE: Reason.SLOW_DEADLINE,
    Hangup.WRITE_ERROR: Reason.WRITE_ERROR,
}
"""How a client connection words the transport's news of its end."""
_KEEPS_OUTPUT: Final = frozenset({Hangup.CLOSED_BY_PEER, Hangup.READ_ERROR})
"""Ends after which what is queued may still be flushed (a write that failed flushes nothing)."""

_SHOWN_OPTIONS: Final = ("name", "lang", "version")
"""The client's fields /connz shows (from a NATS CONNECT, or Redis's CLIENT SETNAME and SETINFO)."""


def _ignore() -> None:
    """The wake-up of a retired connection: there is no one left to wake."""


def _no_one() -> None:
    """What ``Connection.on_awaiting`` calls until the server listens."""


class Connection(Outbox):
    """The state of one client connection that is the same in every protocol.

    Args:
        broker: the node it belongs to.
        cid: its connection id (``cid`` in /connz).
        kind: its protocol, as /connz's ``type`` names it ("nats", "resp").
        host, port: the peer's address.
        wake: called when ``outbound`` gains data or the connection starts closing, so the I/O
            side knows to write; called at most once until ``take_output``.
        clock: seconds, for the protocol's timers (the I/O side's, so a test clock works).
        stall_at: pending bytes past which the connection is congested, and producers feeding it
            pause briefly.
        options: the client's fields before it names any (/connz shows ``_SHOWN_OPTIONS``).
    """

    def __init__(
        self,
        broker: Broker,
        cid: int,
        *,
        kind: str,
        host: str,
        port: int,
        wake: Callable[[], None],
        clock: Callable[[], float],
        stall_at: int,
        options: dict[str, Any],
    ) -> None:
        super().__init__(wake)
        self.broker = broker
        self.cid = cid
        self.kind: Final = kind
        self.host = host
        self.port = port
        self._clock = clock
        self.stall_at = stall_at
        self.options = options
        # Until it signs in, a client is anonymous, or (when credentials are required) the
        # configured no_auth_user, or nobody at all.
        self.user: UserConfig | None = broker.auth.without_credentials()
        self.account: Account = broker.account(self.user.account if self.user else DEFAULT_ACCOUNT)
        self.perms: PermissionSet | None = (
            PermissionSet(self.user.permissions) if self.user and self.user.permissions else None
        )
        self.awaiting: Callable[[], Awaitable[None]] | None = None
        """Work the server awaits before the connection reads on (a replicated write's commit:
        ``node.replicated.path``); input waits for it."""
        self.settling = False
        """The server is awaiting ``awaiting`` (one task at a time does)."""
        self.on_awaiting: Callable[[], None] = _no_one
        """Called when work to await was left outside the connection's own input (a blocked read
        that another client's write served): the server awaits it then."""
        self.verifying: Verifying[Any] | None = None
        """A sign-in whose bcrypt check the server runs off the event loop (``Verifying.then`` is
        what the protocol does again once the verdict is in); input waits for it."""
        self.subs: dict[bytes, Subscription] = {}
        """Subscriptions, by sid (NATS) or channel (Redis): what /connz lists."""
        # Monitoring.
        self.start_ns = self.last_activity_ns = time.time_ns()
        self.stop_ns = 0
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0
        self.rtt_ns = 0

    # -- what each protocol says for itself -------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Act on every complete request or operation the client sent so far."""
        raise NotImplementedError

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        """Queue a message for one of this connection's subscriptions; False if it was not
        delivered (closed, filtered, over its max, or it made the connection a slow consumer)."""
        raise NotImplementedError

    @property
    def authenticated(self) -> bool:
        """Signed in, or needing no credentials: False while the node waits for them."""
        raise NotImplementedError

    def _forget_input(self) -> None:
        """Drop what was received and not yet acted on (closing, or retired)."""
        raise NotImplementedError

    def _release(self) -> None:
        """Closing: let go of what only an open connection holds (its subscriptions, and whatever
        else the protocol keeps), at once."""
        raise NotImplementedError

    def _internal_error_reply(self) -> bytes:
        """The protocol's generic error, sent before an internal error closes the connection."""
        raise NotImplementedError

    def update_info(self, *, lame_duck: bool = False) -> None:
        """The node's INFO changed (its cluster's URLs, or it is entering lame duck mode): a
        protocol that tells its clients does so here; by default nothing is sent."""

    def reload(self) -> None:
        """The node's configuration was reloaded: a protocol whose open connections take it up
        does so here; by default a connection keeps what it started with."""

    # -- monitoring ------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return str(self.options.get("name") or "")

    def describe(self) -> str:
        """Who this is, for log lines ("127.0.0.1:5000 - cid:7")."""
        return f"{self.host}:{self.port} - cid:{self.cid}"

    # -- slow consumers --------------------------------------------------------------------------

    def _congested(self, pending: int, limit: int) -> bool:
        """``pending`` bytes are past ``stall_at``: producers feeding this connection pause for it,
        unless they are past ``limit`` too, and it is cut off as a slow consumer (True)."""
        if pending > limit:
            self._cut_off()
            return True
        self.broker.congested.add(self)
        return False

    def _cut_off(self) -> None:
        """An output limit was passed: close at once, dropping the output, as a slow consumer
        (/varz ``slow_consumers``, Redis's ``client_output_buffer_limit_disconnections``)."""
        self.broker.slow_consumers += 1
        self.close(Reason.SLOW_PENDING, flush=False)

    # -- ending ----------------------------------------------------------------------------------

    def hangup(self, how: Hangup) -> None:
        """The transport saw the connection end (see ``transport.sessions``)."""
        if how is Hangup.WRITE_DEADLINE and self.closing is None:
            self.broker.slow_consumers += 1
        self.close(_HANGUP_REASONS[how], flush=how in _KEEPS_OUTPUT)

    def internal_error(self, exc: Exception) -> None:
        """A bug surfaced while serving this client: it gets the protocol's generic error and goes."""
        self.outbound.clear()
        self._send(self._internal_error_reply())
        self.close(Reason.INTERNAL_ERROR)

    def close(self, reason: str, *, flush: bool = True) -> None:
        """Start closing: let go of subscriptions now; the I/O side flushes (unless told not to)."""
        if self.closing is not None:
            return
        self.closing = reason
        self.stop_ns = time.time_ns()
        self._forget_input()  # (nothing more is read)
        if not flush:
            self.outbound.clear()
        self._release()
        self.broker.remove_client(self)
        self._notify()

    def retire(self) -> None:
        """The I/O side is done with this (closed) connection: keep only what /connz shows of it.

        The broker remembers thousands of closed connections, so nothing an open one may hold
        stays: buffered input and output (up to the protocol's limits), permissions, the client's
        fields that monitoring does not show, and the way to the session (and its socket).
        """
        self._forget_input()
        self.outbound = bytearray()
        self._writing = 0
        self.perms = None
        self.options = {key: self.options[key] for key in _SHOWN_OPTIONS if key in self.options}
        self._wake = _ignore
