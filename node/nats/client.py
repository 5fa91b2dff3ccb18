"""One NATS client connection's protocol logic, without I/O.

``receive_data`` takes bytes from the socket and acts on every complete operation; what must go back
to the client accumulates in ``outbound``, and ``closing`` says when (and why) the connection must
end. The trio adapter in ``node.server`` moves the bytes and runs the timers; everything a client
can observe is decided here, so it can be tested by feeding bytes and reading bytes.

Behaviour follows nats-server's, because clients depend on it: which errors close the connection,
the exact ``-ERR`` texts, verbose/pedantic defaulting to on until CONNECT says otherwise, options
left out of CONNECT keeping their value, and the 503 no-responders reply.

**Strings from the wire.** The protocol is bytes, but parts of the node (subject tries, the msgpack
codec of links, monitoring's JSON) hold text, and text must be valid Unicode or encoding it fails
far from the connection that sent it. So text is made at this edge, by one rule:

- What is published stays bytes, end to end: PUB and HPUB subjects, replies, sids, headers and
  payloads are never decoded on the publish path (a route forwards the bytes it was given); an
  ``-ERR`` that quotes them quotes the bytes as sent.
- Subjects and queue names of a SUB become text, decoded strictly as UTF-8: one that is not valid
  UTF-8 gets ``-ERR 'Invalid Subject'``, as any other invalid subject does, and the connection
  carries on.
- CONNECT's credentials (user, pass, auth_token...) that are not valid Unicode (a lone surrogate
  escape, bytes that are not UTF-8) fail authentication; its other strings (name, lang, version)
  have each offending character replaced by U+FFFD. ``node.nats.protocol.connect`` reads CONNECT so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final

from node.accounts.auth import Verification, Verifying
from node.accounts.permissions import PermissionSet
from node.broker import Broker
from node.connection import MAX_SUBS_EXCEEDED, Connection, Reason
from node.nats.protocol import (
    ClientOpParser,
    Connect,
    Err,
    Ping,
    Pong,
    ProtocolError,
    PubBatch,
    Sub,
    Unsub,
)
from node.nats.protocol import writer as w
from routing import REPLY_PREFIX, InvalidSubjectError, Message, Subscription
from routing.channels import RESERVED_PREFIX

__all__ = ["ClientConnection"]

log = logging.getLogger("pubmesh")


AUTH_VIOLATION = "Authorization Violation"
INVALID_SUBJECT = "Invalid Subject"
INVALID_PUBLISH_SUBJECT = "Invalid Publish Subject"
_RESERVED_REPLIES = (b"_R_.", b"$JS.ACK.", REPLY_PREFIX)
_RESERVED_SUBJECTS = RESERVED_PREFIX.decode()
_UNDERSCORE: Final = ord("_")
_DOLLAR: Final = ord("$")
"""Where Redis channels that are not subjects live (``routing.channels``): not for NATS clients."""
_BARE_PREFIXES = (b"$JS.ACK.", REPLY_PREFIX)  # these two are reserved only with something after them
RTT_REFRESH = 3600.0
"""Seconds after which the ping timer wants a new round-trip time (nats-server's
DEFAULT_RTT_MEASUREMENT_INTERVAL), and so pings even a client it heard from lately."""


def _is_literal(subject: bytes) -> bool:
    """A valid publish subject, checked on the bytes (pedantic mode) to avoid decoding."""
    tokens = subject.split(b".")
    return b"" not in tokens and b"*" not in tokens and b">" not in tokens


def _text(value: bytes) -> str:
    """Published bytes, quoted in an ``-ERR``: ``writer.err`` turns them back into the same bytes."""
    return value.decode("utf-8", "surrogateescape")


class ClientConnection(Connection):
    """The protocol state of one client connection.

    Args:
        broker: the node it belongs to.
        cid: its connection id (``client_id`` in INFO, ``cid`` in /connz).
        host, port: the peer's address, for INFO and /connz.
        wake: called when ``outbound`` gains data or the connection starts closing, so the I/O
            side knows to write; called at most once until ``take_output``.
        clock: seconds, for round trips and ping timing (the I/O side's, so a test clock works).
    """

    def __init__(
        self,
        broker: Broker,
        cid: int,
        *,
        host: str = "",
        port: int = 0,
        wake: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        config = broker.config
        super().__init__(
            broker,
            cid,
            kind="nats",
            host=host,
            port=port,
            wake=wake,
            clock=clock,
            # Past this a consumer is congested, and producers feeding it pause briefly
            # (nats-server's fast-producer stall): a consumer that is slower, but keeps up over
            # time, survives.
            stall_at=config.max_pending * 3 // 4,
            # Options in force before CONNECT are nats-server's defaults.
            options={"verbose": True, "pedantic": True, "echo": True},
        )
        self.parser = ClientOpParser(
            max_control_line=config.max_control_line, max_payload=config.max_payload
        )
        self.max_pending = config.max_pending
        self.verbose = self.pedantic = self.echo = True
        self.headers = self.no_responders = False
        # Until CONNECT, a client without a user (credentials are required, and there is no
        # no_auth_user) is allowed nothing but CONNECT. Where credentials are required, the auth
        # timer runs until a CONNECT, or until the no_auth_user is signed in.
        self.awaiting_connect = broker.auth.required
        self.tls_names: tuple[str, ...] = ()
        """What the client's verified TLS certificate names (see ``transport.tls.peer_names``)."""
        self.connected = False  # (nats-server's connectReceived: a CONNECT after it is a repeat)
        self.info_updates = False
        """Whether the client takes INFO updates: it asked (``protocol`` 1 in CONNECT), and has had
        the PONG to its first PING, as nats-server requires (no INFO comes between the two)."""
        self._ponged = False
        self._heard = False  # whether anything arrived yet (looked at while a CONNECT is awaited)
        self._filtered: set[Subscription] = set()
        """Subscriptions whose deliveries are checked: those that overlap a denied subject, and
        those whose first token is a wildcard (they would match the Redis-only ``$R.`` space)."""
        # Round trips and pings.
        self._rtt_estimated = False  # nats-server takes the time until CONNECT as a first estimate
        self.pings_out = 0
        self.last_ping_sent = 0.0
        self.active_since_ping = False

    # -- input -----------------------------------------------------------------------------------

    def greeting(self) -> None:
        """Queue the INFO a client expects as the very first line."""
        self._send(w.info(self.info()))

    def info(self) -> dict[str, Any]:
        broker = self.broker
        fields = broker.identity()
        fields["headers"] = True
        fields["max_payload"] = self.broker.config.max_payload
        fields["client_id"] = self.cid
        fields["client_ip"] = self.host
        if self.awaiting_connect and self.user is None:
            fields["auth_required"] = True
        tls = self.broker.config.tls
        if tls is not None:
            fields["tls_required"] = True
            if tls.verify or tls.verify_and_map:
                fields["tls_verify"] = True
        if broker.connect_urls:
            fields["connect_urls"] = broker.connect_urls
        return fields

    def update_info(self, *, lame_duck: bool = False) -> None:
        """Send the INFO again (its cluster's URLs changed, or the node is entering lame duck
        mode), if this client takes updates."""
        if self.info_updates and self.closing is None:
            fields = self.info()
            if lame_duck:
                fields["ldm"] = True
            self._send(w.info(fields))

    def receive_data(self, data: bytes) -> None:
        """Act on every complete operation in what the client sent so far."""
        if self.closing:  # (a truth test, so the checks below are not narrowed away)
            return
        if self.verifying is not None:
            if self.verifying.done:
                options, self.verifying = self.verifying.then, None
                self._sign_in(options)  # (the verdict is known now)
            if self.closing is not None or self._checking():
                self.parser.receive_data(data)  # (kept for after the check)
                return
        self.last_activity_ns = time.time_ns()
        if self.awaiting_connect and data and not self._heard:
            # nats-server decides on the first byte: whatever does not start a CONNECT, even a
            # malformed line, is an Authorization Violation, unless a no_auth_user is configured.
            self._heard = True
            if data[:1] not in b"Cc" and not self._sign_in_without_connect():
                return
        self.parser.receive_data(data)
        try:
            for event in self.parser.events():
                kind = type(event)
                if kind is PubBatch:
                    self._publish(event.messages)  # type: ignore[union-attr]
                elif kind is Sub:
                    self._sub(event)  # type: ignore[arg-type]
                elif kind is Unsub:
                    self._unsub(event)  # type: ignore[arg-type]
                elif kind is Ping:
                    self.active_since_ping = True
                    self._send(w.PONG)
                    if not self._ponged and self.connected:
                        self._first_pong()
                elif kind is Pong:
                    self.pings_out = 0
                    if self.last_ping_sent:
                        self.rtt_ns = max(1, int((self._clock() - self.last_ping_sent) * 1e9))
                elif kind is Connect:
                    self._connect(event)  # type: ignore[arg-type]
                    if self._checking():
                        return  # (what follows the CONNECT stays in the parser until then)
                elif kind is Err:
                    self.close(Reason.PARSE_ERROR)
                # INFO and +OK from a client are tolerated and ignored.
                if self.closing is not None:
                    return
        except ProtocolError as exc:
            reason = {
                "maximum control line exceeded": Reason.MAX_CONTROL_LINE,
                "Maximum Payload Violation": Reason.MAX_PAYLOAD,
            }.get(exc.message or "", Reason.PROTOCOL_VIOLATION)
            self._fail(exc.message, reason)

    def _first_pong(self) -> None:
        """After the first PONG, a client that takes INFO updates gets one at once: it may have
        missed a change of the cluster since its greeting (nats-server's ``connect_info``)."""
        self._ponged = True
        if self.options.get("protocol", 0) >= 1:
            self.info_updates = True
            fields = self.info()
            fields["connect_info"] = True
            self._send(w.info(fields))

    def _checking(self) -> bool:
        """Whether a CONNECT waits for its bcrypt check (a call, not an attribute test, so that a
        check made before signing in is not taken to hold after it)."""
        return self.verifying is not None

    def _sign_in_without_connect(self) -> bool:
        """Whether a client that must authenticate may start with something other than CONNECT:
        only as the configured no_auth_user. Otherwise the connection fails."""
        if self.user is None:
            self._fail(AUTH_VIOLATION, Reason.AUTH_VIOLATION)
            return False
        self.awaiting_connect = False
        self.connected = True
        self.broker.client_connected(self)
        return True

    def _connect(self, event: Connect) -> None:
        self._sign_in({**self.options, **event.options})  # (each of the right type: node.protocol)

    def _sign_in(self, options: dict[str, Any]) -> None:
        user = self.broker.auth.authenticate(options, self.tls_names)
        if isinstance(user, Verification):
            self.verifying = Verifying(user, options)
            return
        if user is None or options.get("account") or options.get("new_account"):
            self._fail(AUTH_VIOLATION, Reason.AUTH_VIOLATION)
            return
        if not 0 <= options.get("protocol", 0) <= 1:
            self._fail("invalid client protocol", Reason.BAD_CLIENT_PROTOCOL)
            return
        headers = bool(options.get("headers"))
        no_responders = bool(options.get("no_responders"))
        if no_responders and not headers:
            self._fail("no responders requires headers support", Reason.NO_RESPONDERS_REQUIRES_HEADERS)
            return
        if self.connected and self.subs:
            # A repeated CONNECT starts afresh (nats-server 2.14 and later).
            self._drop_subs(list(self.subs.values()))
        self.options = options
        self.verbose = bool(options.get("verbose"))
        self.pedantic = bool(options.get("pedantic"))
        self.echo = bool(options.get("echo", True))
        self.headers, self.no_responders = headers, no_responders
        self.user = user
        self.account = self.broker.account(user.account)
        self.perms = PermissionSet(user.permissions) if user.permissions else None
        self.awaiting_connect = False
        self.connected = True
        self._rtt_estimated = True
        if self.verbose:
            self._send(w.OK)
        self.broker.client_connected(self)

    def _publish(self, messages: list[Message]) -> None:
        """Publish a run of PUBs. The loop is the hot path: per-message checks that the client's
        options make unnecessary are skipped wholesale."""
        self.active_since_ping = True
        broker = self.broker  # (called as a method, not as a bound one: compiled, that is a C call)
        account = self.account
        exclude = None if self.echo else self
        careful = self.verbose or self.pedantic or self.perms is not None
        count = size = 0
        for msg in messages:
            count += 1
            subject, reply, headers = msg.subject, msg.reply, msg.headers
            if headers is None:
                size += len(msg.payload)
            elif self.headers:
                size += len(headers) + len(msg.payload)
                if not headers:  # an empty header block goes out as a plain MSG, as there
                    msg = Message(subject, reply, None, msg.payload)
            else:
                self.close(Reason.PROTOCOL_VIOLATION)  # HPUB without headers: no -ERR, as there
                break
            # Subjects starting "_" or "$" may be reserved; replies always need a look.
            first = subject[0] if subject else 0
            if (careful or reply or first in (_UNDERSCORE, _DOLLAR)) and not self._may_publish(
                subject, reply
            ):
                continue
            delivered = broker.publish(account, msg, exclude)
            if not delivered and reply and self.no_responders:
                self._no_responders(subject, reply)
            if self.closing is not None:
                break
        self.in_msgs += count
        self.in_bytes += size

    def _may_publish(self, subject: bytes, reply: bytes | None) -> bool:
        """The per-message checks nats-server makes before delivering; sends any -ERR itself."""
        if self.pedantic and not _is_literal(subject):
            self._error(INVALID_PUBLISH_SUBJECT)  # and the message still goes out, as there
        if (subject.startswith(REPLY_PREFIX) and len(subject) > len(REPLY_PREFIX)) or subject.startswith(
            RESERVED_PREFIX
        ):
            self._error(f'Permissions Violation for Publish to "{_text(subject)}"')
            return False
        if self.perms is not None and not self.perms.can_publish(subject):
            self._error(f'Permissions Violation for Publish to "{_text(subject)}"')
            return False
        if reply and reply.startswith(_RESERVED_REPLIES) and reply not in _BARE_PREFIXES:
            self._error(f'Permissions Violation for Publish with Reply of "{_text(reply)}"')
            return False
        if self.verbose:
            self._send(w.OK)
        return True

    def _no_responders(self, subject: bytes, reply: bytes) -> None:
        """Tell a requester at once that nobody is listening (a 503 status on its reply sub)."""
        for sub in self.account.match(reply)[0].plain:
            if sub.owner is self:
                block = b"NATS/1.0 503\r\nNats-Subject: %b\r\n\r\n" % subject
                self._send(
                    b"HMSG %b %b %d %d\r\n%b\r\n" % (reply, sub.sid, len(block), len(block), block)
                )
                return

    def _sub(self, event: Sub) -> None:
        self.active_since_ping = True  # (even a refused SUB shows the client is alive)
        try:
            subject = event.subject.decode()
            queue = event.queue.decode() if event.queue is not None else None
        except UnicodeDecodeError:
            self._error(INVALID_SUBJECT)
            return
        if (
            queue == "_sys_"
            or subject.startswith(_RESERVED_SUBJECTS)
            or (self.perms is not None and not self.perms.can_subscribe(subject, queue))
        ):
            text = f'Permissions Violation for Subscription to "{subject}"'
            self._error(f'{text} using queue "{queue}"' if queue is not None else text)
            return
        limit = self.broker.config.max_subscriptions
        if limit and len(self.subs) >= limit:
            self._error(MAX_SUBS_EXCEEDED)
            return
        if event.sid not in self.subs:
            sub = Subscription(subject, queue, sid=event.sid, owner=self)
            try:
                self.broker.subscribe(self.account, sub)
            except InvalidSubjectError:
                self._error(INVALID_SUBJECT)
                return
            self.subs[event.sid] = sub
            if subject.partition(".")[0] in ("*", ">") or (
                self.perms is not None and self.perms.filters_deliveries(subject, queue)
            ):
                self._filtered.add(sub)
        if self.verbose:
            self._send(w.OK)

    def _unsub(self, event: Unsub) -> None:
        self.active_since_ping = True
        sub = self.subs.get(event.sid)
        if sub is not None:
            if event.max_msgs and event.max_msgs > sub.delivered:
                sub.max_msgs = event.max_msgs
            else:
                self._drop_subs([sub])
        if self.verbose:
            self._send(w.OK)

    def _drop_subs(self, subs: list[Subscription]) -> None:
        for sub in subs:
            del self.subs[sub.sid]
            self._filtered.discard(sub)
        self.broker.unsubscribe(self.account, subs)

    # -- output ----------------------------------------------------------------------------------

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        """Queue one MSG (or HMSG) for ``sub``; False if it was not delivered."""
        if self.closing is not None:
            return False
        if self._filtered and sub in self._filtered:
            subject = msg.subject
            if subject.startswith(RESERVED_PREFIX) or (
                self.perms is not None and not self.perms.can_receive(subject)
            ):
                return False
        sub.delivered += 1
        max_msgs = sub.max_msgs
        if max_msgs and sub.delivered > max_msgs:
            return False
        out = self.outbound
        subject, reply, headers, payload = msg.subject, msg.reply, msg.headers, msg.payload
        if headers is None or not self.headers:  # (without headers support: the payload alone)
            size = len(payload)
            if reply:
                out += b"MSG %b %b %b %d\r\n%b\r\n" % (subject, sub.sid, reply, size, payload)
            else:
                out += b"MSG %b %b %d\r\n%b\r\n" % (subject, sub.sid, size, payload)
        else:
            size = len(headers) + len(payload)
            if reply:
                out += b"HMSG %b %b %b %d %d\r\n" % (subject, sub.sid, reply, len(headers), size)
            else:
                out += b"HMSG %b %b %d %d\r\n" % (subject, sub.sid, len(headers), size)
            out += headers
            out += payload
            out += b"\r\n"
        self.out_msgs += 1
        self.out_bytes += size
        pending = len(out) + self._writing
        if pending > self.stall_at and self._congested(pending, self.max_pending):
            return False
        if not self._woken:
            self._woken = True
            self._wake()
        if max_msgs and sub.delivered == max_msgs and sub.sid in self.subs:
            self._drop_subs([sub])
        return True

    def _error(self, message: str) -> None:
        """An error the connection survives."""
        self._send(w.err(message))

    def _fail(self, message: str | None, reason: str) -> None:
        """An error that ends the connection; nats-server sends some without an -ERR line."""
        if message is not None:
            self._send(w.err(message))
        self.close(reason)

    # -- configuration reload --------------------------------------------------------------------

    def reload(self) -> None:
        """The node's configuration was reloaded: take its limits, and sign in again as
        nats-server does. A client whose user is gone or now leads into another account is
        closed (it reconnects to find out), one whose credentials no longer pass gets an
        Authorization Violation, and the others keep only the subscriptions the new permissions
        allow, each one dropped with a Permissions Violation naming its sid."""
        config = self.broker.config
        self.parser.max_payload = config.max_payload
        self.parser.max_control_line = config.max_control_line
        if self.closing is not None or self.awaiting_connect:
            return  # (a client yet to sign in does so under the new configuration)
        user = self.broker.auth.authenticate(self.options, self.tls_names)
        if isinstance(user, Verification):
            user = self.broker.auth.unchanged(self.user)
        name = self.options.get("user")
        if (user is None and name and not self.broker.auth.knows(name)) or (
            user is not None and user.account != self.account.name
        ):
            self.close(Reason.CLIENT_CLOSED)
            return
        if user is None:
            self._fail(AUTH_VIOLATION, Reason.AUTH_VIOLATION)
            return
        self.user = user
        self.perms = perms = PermissionSet(user.permissions) if user.permissions else None
        self._filtered = {
            sub
            for sub in self.subs.values()
            if sub.subject.partition(".")[0] in ("*", ">")
            or (perms is not None and perms.filters_deliveries(sub.subject, sub.queue))
        }
        if perms is None:
            return
        refused = [s for s in self.subs.values() if not perms.can_subscribe(s.subject, s.queue)]
        if refused:
            self._drop_subs(refused)
        for sub in refused:
            sid = sub.sid.decode("utf-8", "replace")
            queue = f' using queue "{sub.queue}"' if sub.queue is not None else ""
            text = f'"{sub.subject}"{queue} (sid "{sid}")'
            self._error(f"Permissions Violation for Subscription to {text}")
            log.info("Removed sub %s for %s - not authorized", text, self.describe())

    # -- timers (driven by the I/O side) ---------------------------------------------------------

    def ping_due(self) -> None:
        """The ping timer fired: probe an idle client, or give up on one that stopped answering."""
        if self.closing is not None:
            return
        now = self._clock()
        # A client heard from since the last firing is alive; but a PING also measures the round
        # trip, so one goes out anyway when there is no measurement yet, or the last PING is old.
        measured = (
            (self.rtt_ns or self._rtt_estimated)
            and self.last_ping_sent
            and now - self.last_ping_sent < RTT_REFRESH
        )
        if measured and self.active_since_ping:
            self.active_since_ping = False
            return
        if self.pings_out + 1 > self.broker.config.ping_max:
            self.broker.stale_connections += 1
            self._fail("Stale Connection", Reason.STALE)
            return
        self.pings_out += 1
        self.last_ping_sent = now
        self.active_since_ping = False
        self._send(w.PING)

    def auth_expired(self) -> None:
        """The auth timer fired: a client that has not authenticated by now is dropped."""
        if self.closing is None and self.awaiting_connect:
            self._fail("Authentication Timeout", Reason.AUTH_TIMEOUT)

    # -- ending ----------------------------------------------------------------------------------

    def _internal_error_reply(self) -> bytes:
        return w.err("Internal Server Error")  # (nats-server's)

    def _forget_input(self) -> None:
        self.parser.clear()

    def _release(self) -> None:
        """Closing: the subscriptions go."""
        if self.subs:
            subs = list(self.subs.values())
            self.subs.clear()
            self._filtered.clear()
            self.broker.unsubscribe(self.account, subs)

    # -- monitoring ------------------------------------------------------------------------------

    @property
    def authenticated(self) -> bool:
        """Signed in: no longer waiting for the CONNECT (or first line) that credentials require."""
        return not self.awaiting_connect
