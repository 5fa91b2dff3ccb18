"""One connection between two nodes, without I/O: frames in and out, liveness, counters.

A ``Link`` knows nothing of what frames mean; the route manager decides that. It keeps what every
connection needs whatever it carries: the peer's HELLO once it came, when the peer was last heard
from (any frame counts, so a busy link needs no pings), heartbeat state, the accounts whose interest
arrived over it (what to forget if it drops), and traffic counters for monitoring.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Generic

from cluster.decoder import FrameDecoder
from cluster.frames import (
    Err,
    Frame,
    GatewayHello,
    LinkError,
    MessageFrame,
    Ping,
    RouteHello,
    encode,
)
from cluster.host import AccountT, Forwarder, NodeHost
from cluster.message_frames import pack_message
from routing import Message, Origin
from transport.outbox import Outbox
from transport.sessions import Hangup

__all__ = ["Link"]

log = logging.getLogger("pubmesh")

Control = Callable[["Link[AccountT]", Frame], None]
"""What a link's manager does with every frame but messages (raising ``LinkError`` to refuse)."""

SLOW_PENDING = "Slow Consumer (Pending Bytes)"
SLOW_DEADLINE = "Slow Consumer (Write Deadline)"


class Link(Outbox, Generic[AccountT]):
    """The protocol side of one route (or gateway) connection.

    Args:
        host: the node messages arriving here are published into.
        control: the manager's handler for every other frame.
        solicited: whether this node dialed it.
        max_frame: the largest frame the peer may send.
        max_pending: the most bytes held for the peer before the link is cut as a slow consumer.
        wake: the I/O side's wake-up (see ``Outbox``).
        abandon: stops the I/O side at once, for a close that writes nothing more (its writer may
            be stuck on a socket nobody reads).
        address: the peer's (host, port), for monitoring.
        clock: the time source for liveness (the I/O side's, so a test clock works).
        origin: what kind of link this is, as the publish path needs to know.
        takes_messages: False where a peer sending messages breaks the protocol.
        kind: how log lines name it ("Route", "Gateway").
        admit: the account a message is for, by name, or None to drop it (see
            ``LinkManager.admits``).
    """

    def __init__(
        self,
        host: NodeHost[AccountT],
        control: Control[AccountT],
        *,
        solicited: bool,
        max_frame: int,
        max_pending: int,
        wake: Callable[[], None],
        abandon: Callable[[], None],
        address: tuple[str, int] = ("", 0),
        clock: Callable[[], float] = time.monotonic,
        origin: Origin = Origin.ROUTE,
        takes_messages: bool = True,
        kind: str = "Link",
        admit: Callable[[str], AccountT | None] | None = None,
    ) -> None:
        super().__init__(wake)
        self._abandon = abandon
        self.max_pending = max_pending
        self.stall_at = max_pending * 3 // 4
        """Pending bytes past which the link is congested (as a client connection's ``stall_at``)."""
        self.host = host
        self.control = control
        self.kind = kind
        self.admit: Callable[[str], AccountT | None] = admit or host.account
        self._accounts: dict[str, AccountT] = {}
        """Accounts admitted on this link so far, by name: the per-message lookup (bounded by what
        ``admit`` lets in)."""
        self.origin = origin
        """Where messages arriving here come from, for the forwarding rules."""
        self.takes_messages = takes_messages
        """Whether the peer may send messages here (a gateway's outbound side carries none in)."""
        self.solicited = solicited
        self.address = address
        self.rid = 0
        """The link's number on this node (``rid`` in /routez)."""
        self.peer: Forwarder | None = None
        """Whom the manager registered this link for."""
        self.connection = ""
        """A name both ends give this connection (chosen by the dialer), to tell them apart."""
        self._clock = clock
        self.decoder = FrameDecoder(max_frame)
        self.remote: RouteHello | GatewayHello | None = None
        """The peer's HELLO, once received (it comes only after the peer proved it knows the
        secret)."""
        self.slot: int | str | None = None
        """Which of the peer's pooled connections this is (an index, or a pinned account)."""
        self.registered = False
        """Whether this link is the one in use for its slot (a duplicate never is)."""
        self.accounts: set[str] = set()
        """Accounts whose interest arrived over this link: what to forget when it drops."""
        self.last_heard = clock()
        self.ping_sent = 0.0
        self.rtt = 0.0
        self.start_ns = self.last_activity_ns = time.time_ns()
        self.stop_ns = 0
        self.in_msgs = self.in_bytes = self.out_msgs = self.out_bytes = 0

    def frames(self, data: bytes) -> Iterator[Frame]:
        """The frames in ``data`` (raising ``LinkError`` at a bad one); the peer is alive."""
        self.last_heard = self._clock()
        self.last_activity_ns = time.time_ns()
        self.decoder.receive_data(data)
        return self.decoder.frames()

    def receive_data(self, data: bytes) -> None:
        """Act on what the peer sent: messages straight into the node (the hot path, kept here),
        every other frame to ``control`` (the manager). A protocol error is answered with an ERR
        frame and the link closes.

        A message arriving on a connection that is not (or no longer) the one in use for its slot
        is dropped: its peer will resend the slot's interest on the connection that is.
        """
        if self.closing:  # (a truth test, so the check in the loop is not narrowed away)
            return
        try:
            for frame in self.frames(data):
                if type(frame) is MessageFrame:
                    if not self.takes_messages:
                        raise LinkError("a message on a link that carries none this way")
                    if self.registered:
                        msg = frame.msg
                        self.in_msgs += 1
                        self.in_bytes += len(msg.payload)
                        account = self._accounts.get(frame.account)
                        if account is None:
                            account = self.admit(frame.account)
                            if account is not None:
                                self._accounts[frame.account] = account
                        if account is not None:
                            self.host.publish(account, msg, None, self.origin, frame.queues)
                    elif self.remote is None:
                        raise LinkError("the first frame must be HELLO")
                else:
                    self.control(self, frame)
                if self.closing is not None:
                    return
        except LinkError as exc:
            self.log(logging.WARNING, f"{self.kind} protocol error: {exc}")
            self.refuse(f"protocol error: {exc}", f"Protocol error: {exc}")

    def refuse(self, text: str, reason: str) -> None:
        """Tell the peer why in an ERR frame, then close."""
        self.send(Err(text))
        self.close(reason)

    def hangup(self, how: Hangup) -> None:
        """The transport saw the connection end (see ``transport.sessions``)."""
        if how is Hangup.CLOSED_BY_PEER:
            self.close("Closed by peer")
        elif how is Hangup.READ_ERROR:
            self.close("Read error")
        elif how is Hangup.WRITE_DEADLINE:
            self._slow(SLOW_DEADLINE)
        else:
            self.close("Write error", flush=False)

    def internal_error(self, exc: Exception) -> None:
        self.outbound.clear()
        self.refuse("internal error", "Internal Error")

    def describe(self) -> str:
        host, port = self.address
        return f"{f'{host}:{port}' if host else 'memory'} - rid:{self.rid}"

    def log(self, level: int, text: str) -> None:
        log.log(level, "%s - %s", self.describe(), text)

    def send(self, frame: Frame) -> None:
        self._send(encode(frame))

    def send_bytes(self, data: bytes) -> None:
        """Queue a frame already encoded (one announcement going to many peers is encoded once)."""
        self._send(data)

    def send_message(self, account: str, msg: Message, queues: tuple[str, ...]) -> None:
        """Queue a MSG frame (the hot path: packed directly, no frame object)."""
        self.out_msgs += 1
        self.out_bytes += len(msg.payload)
        self._send(pack_message(account, msg, queues))

    def _send(self, data: bytes) -> None:
        """Queue one frame, whatever it is: interest, heartbeats and messages all count."""
        out = self.outbound
        out += data
        pending = len(out) + self._writing
        if pending > self.stall_at and self._congested(pending):
            return
        if not self._woken:
            self._woken = True
            self._wake()

    def _congested(self, pending: int) -> bool:
        """Note the peer falling behind; True if the frame is not to be sent (the link is cut)."""
        if pending <= self.max_pending:
            if self.closing is None:
                self.host.congested.add(self)
            return False
        if self.closing is None:
            self._slow(SLOW_PENDING)
        else:
            self.outbound.clear()  # closing already, and still given more than it may hold
        return True

    def _slow(self, reason: str) -> None:
        """Cut the link as a slow consumer: counted, nothing more written, and (as on any
        disconnect) its manager forgets what came over it, and redials it if it dials it."""
        if self.closing is None:
            self.log(logging.WARNING, f"{reason}, {self.pending_bytes} bytes pending: closing")
            self.host.count_slow_link(self.kind)
            self.close(reason, flush=False)

    def heartbeat(self, interval: float, allowed: int) -> bool:
        """The heartbeat timer fired: ping, and say whether the peer is still alive.

        A peer is dead when nothing at all came from it for ``allowed`` intervals: a partition
        leaves the TCP connection open, and silence is then the only sign.
        """
        now = self._clock()
        if now - self.last_heard > interval * allowed:
            return False
        self.ping_sent = now
        self.send(Ping())
        return True

    def pong(self) -> None:
        if self.ping_sent:
            self.rtt = self._clock() - self.ping_sent

    def close(self, reason: str, *, flush: bool = True) -> None:
        """Start closing; without ``flush``, nothing more is written and the I/O side stops now."""
        if self.closing is None:
            self.stop_ns = time.time_ns()
            super().close(reason, flush=flush)
            if not flush:
                self._abandon()
