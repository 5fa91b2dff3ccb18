"""One Redis client connection's protocol logic, without I/O: requests in, replies and pushes out.

``receive_data`` takes bytes from the socket and runs every complete request; replies and pushes
accumulate in ``outbound`` (an ``Outbox``), and ``closing`` says when the connection must end. The
trio adapter in ``node.server`` moves the bytes and runs the output-limit timer.

**One namespace.** A channel is a subject (``routing.channels``): SUBSCRIBE adds an ordinary
subscription to the account, so NATS publishes reach it and its interest crosses routes and
gateways like any other; PUBLISH goes through ``Broker.publish``. Deliveries always show the
channel's own bytes. Headers and a NATS message's reply subject are not shown to Redis clients.
Pattern subscriptions (PSUBSCRIBE) keep Redis's glob language and are matched by the broker for
publishes made on this node only (they are not announced to other nodes).

**Replies follow redis-server 7.2**: exact error texts, arity errors, the RESP2 subscribed-mode
restrictions and its ``pong`` array, and pushes produced while a command runs (publishing to
oneself) written after that command's reply. ``PUBLISH`` answers the receivers reached on this
node, as Redis Cluster does: channel and pattern subscribers, Redis and NATS clients alike.

**Authentication.** With users configured, a connection starts as the ``no_auth_user`` (if there
is one) or unauthenticated, allowed only AUTH, HELLO, QUIT and RESET. ``AUTH user pass`` signs
in as a configured user; ``AUTH secret`` signs in with a token, or as a user called ``default``.
The user's account and permissions apply: publishing or subscribing to a denied channel is
refused with ``-NOPERM``, and so is a PSUBSCRIBE pattern that could match any channel the user
could not SUBSCRIBE to (``routing.reach`` decides it exactly; the error names such a channel).
Until a connection first signs in, its unwritten output is held to ``UNAUTHENTICATED_OUTPUT``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Final

from node.accounts.auth import Verification, Verifying
from node.accounts.permissions import PermissionSet
from node.broker import VERSION, Broker
from node.config.options import RedisConfig, UserConfig
from node.connection import MAX_SUBS_EXCEEDED, Connection, Reason
from node.data.keyspace import CommitFailed, Condition, Database
from node.integers import string2ll
from node.resp.commands.keys import KEY_COMMANDS
from node.resp.commands.memory import POLICY, config_set, memory_info
from node.resp.commands.streams import HELP, STREAM_COMMANDS, XGROUP, XINFO
from node.resp.errors import RespProtocolError
from node.resp.parser import RequestParser
from node.resp.writer import (
    OK,
    PONG,
    RESP2,
    Writer,
    array,
    bulk,
    error,
    integer,
    protocol_error,
    simple,
    writer_for,
)
from routing import Message, Subscription, channel_subject, glob_match
from routing.glob import MAX_PATTERN

__all__ = ["REDIS_VERSION", "RespConnection"]

REDIS_VERSION: Final = "7.2.0"
"""The redis-server version whose behaviour this front door follows (HELLO and INFO report it)."""

_NO_AUTH: Final = frozenset([b"auth", b"hello", b"quit", b"reset"])
_NOT_QUEUED: Final = frozenset([b"exec", b"discard", b"multi", b"watch", b"quit", b"reset"])
"""What runs at once even inside MULTI."""
_SUBSCRIBED_ONLY: Final = frozenset(
    {b"subscribe", b"ssubscribe", b"psubscribe", b"unsubscribe", b"sunsubscribe", b"punsubscribe"}
    | {b"ping", b"quit", b"reset"}
)
NOAUTH: Final = "-NOAUTH Authentication required."
WRONGPASS: Final = "-WRONGPASS invalid username-password pair or user is disabled."
HELLO_NOAUTH: Final = (
    "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> "
    "AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol "
    "version at the same time"
)
NOT_INTEGER: Final = "value is not an integer or out of range"
_WRITES: Final = frozenset(
    b"del unlink expire pexpire expireat pexpireat persist rename flushdb flushall xadd xtrim xdel "
    b"xsetid xreadgroup xack xclaim xautoclaim xgroup".split()
)
"""The commands that change keys (redis-server's ``write`` flag), refused while the journal
cannot be written."""
_READS: Final = frozenset(
    b"exists type keys scan ttl pttl dbsize xrange xrevrange xlen xread xpending xinfo exec".split()
)
"""The commands that read keys and change nothing else (EXEC: what it runs was checked as it was
queued)."""
_DENYOOM: Final = frozenset(b"xadd xsetid xgroup|create xgroup|createconsumer".split())
"""The commands that may add data (redis-server's ``denyoom`` flag), refused past ``maxmemory``."""
_OOM_IN_MULTI: Final = frozenset([b"exec", b"discard", b"quit", b"reset"])
"""Inside MULTI past ``maxmemory``, every other command is refused (queueing takes memory too)."""
_REMEMBERED_CHANNEL: Final = 256
"""A publisher's last channel is remembered with its subject, since publishers tend to repeat
one (when no longer than this: a huge one would be held on to after its request)."""
BAD_NAME: Final = "Client names cannot contain spaces, newlines or special characters."
UNAUTHENTICATED_OUTPUT: Final = 16 * 1024
"""The most unwritten output a client that has never signed in may hold: past it, the connection
is closed at once, its output dropped, as redis-server closes such a client (whatever spills out
of its 16 KiB reply buffer is over its 1 KiB limit for them), so a client that pipelines requests
before signing in and never reads the replies cannot make the node hold them."""

Handler = Callable[["RespConnection", list[bytes]], None]


class _Command:
    """A command's arity as redis-server checks it (negative: at least that many arguments),
    its handler, and its subcommands (for container commands such as CLIENT). ``key`` is the
    name as ``COMMANDS`` files it: lowercase bytes. ``writes``: it changes keys; ``on_keys``: it
    reads or changes keys and nothing else (the name of a container's subcommand,
    ``xgroup|create``, is flagged by its container's); ``denyoom``: it may add data."""

    __slots__ = ("arity", "denyoom", "handler", "key", "name", "on_keys", "subcommands", "writes")

    def __init__(
        self,
        name: str,
        arity: int,
        handler: Handler | None,
        subcommands: dict[bytes, _Command] | None = None,
    ) -> None:
        self.name = name
        self.key = name.encode()
        self.arity = arity
        self.handler = handler
        self.subcommands = subcommands
        family = self.key.partition(b"|")[0]
        self.writes = family in _WRITES and not self.key.endswith(b"|help")
        self.on_keys = self.writes or family in _READS
        self.denyoom = self.key in _DENYOOM


def _on_keys(args: list[bytes]) -> bool:
    """Whether the request reads or changes keys and nothing else (see ``_Command``)."""
    command = _AS_SENT.get(args[0]) or COMMANDS.get(args[0].lower())
    return command is not None and command.on_keys


def _text(value: bytes) -> str:
    """Client bytes quoted in an error line: ``writer.error`` turns them back into the same bytes."""
    return value.decode("utf-8", "surrogateescape")


def _pattern_refusal(pattern: bytes, channel: bytes | None) -> str:
    """Why a pattern was refused: a channel it can match that the user may not subscribe to."""
    quoted = f"No permissions to access the '{_text(pattern)}' pattern"
    if channel is None:
        return f"-NOPERM {quoted}: too complex to check against this user's subscribe permissions"
    return f"-NOPERM {quoted}: it matches the channel '{_text(channel[:128])}', which is not allowed"


class _Blocked:
    """A blocked read: the keys it waits on, the command to run again, when it gives up."""

    __slots__ = ("args", "db", "deadline", "keys")

    def __init__(self, db: Database, keys: list[bytes], args: list[bytes], deadline: float) -> None:
        self.db = db
        self.keys = keys
        self.args = args
        self.deadline = deadline


class RespConnection(Connection):
    """The protocol state of one Redis client connection.

    Args:
        broker: the node it belongs to.
        cid: its connection id (CLIENT ID, and ``cid`` in /connz).
        host, port: the peer's address.
        wake: called when ``outbound`` gains data or the connection starts closing.
        clock: seconds, for the output-buffer soft limit.
        limits: the ``[redis]`` settings (output-buffer limits).
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
        limits: RedisConfig | None = None,
    ) -> None:
        limits = limits or RedisConfig()
        super().__init__(
            broker,
            cid,
            kind="resp",
            host=host,
            port=port,
            wake=wake,
            clock=clock,
            stall_at=limits.soft_limit,
            # CLIENT SETNAME and SETINFO, shown by /connz as a NATS client's CONNECT fields are.
            options={"name": "", "lang": "", "version": ""},
        )
        self.hard_limit = limits.hard_limit
        self.soft_seconds = limits.soft_seconds
        self._over_soft_since = -1.0
        self._channel = self._subject = b""  # the last channel published to, and its subject
        self.writer: Writer = RESP2
        self.parser = RequestParser(authenticated=self.user is not None)
        self._capped = self.user is None  # output held to UNAUTHENTICATED_OUTPUT until a sign-in
        self.shard: dict[bytes, Subscription] = {}
        """Shard channel subscriptions (SSUBSCRIBE): the same namespace, acknowledged apart."""
        self.patterns: dict[bytes, None] = {}
        self.db = 0
        self._database: Database | None = None
        self._database_of = self.account  # the account _database belongs to
        self._reply_off = self._skip = self._skip_next = False
        self._running = False
        self._held = bytearray()  # pushes produced while a command runs: they go after its reply
        self.queued: list[list[bytes]] | None = None
        """Commands queued since MULTI (None outside a transaction)."""
        self._queue_failed = False
        self._queued_denyoom = False  # a command that may add data was queued since MULTI
        self._captured: list[bytes] | None = None  # EXEC's replies, collected
        self.dirty = False
        """A key this connection WATCHes was written (its next EXEC fails)."""
        self._watching: list[tuple[Database, bytes]] = []
        self.blocked: _Blocked | None = None
        """The blocking read waiting for a write to one of its keys (XREAD ... BLOCK)."""
        self._retry_deadline = -1.0
        self._unacked = -1
        """Where in ``outbound`` the replies that wait on the journal's commit start (-1: none)."""
        self._unacked_replies = 0
        # (An AUTH, or HELLO AUTH, whose bcrypt check runs waits in ``verifying``: it runs again
        # once the verdict is in, and the requests after it wait for it.)
        self.on_deadline: Callable[[], None] = _ignore
        """Called when ``deadline`` changes (the I/O side sleeps until it)."""
        self.last_command = "NULL"
        self.commands = 0

    @property
    def subscribed(self) -> bool:
        """In Redis's pub/sub mode: subscribed to any channel, pattern or shard channel."""
        return bool(self.subs or self.patterns or self.shard)

    @property
    def authenticated(self) -> bool:
        """Signed in now (as a user, the ``no_auth_user``, or anyone where nobody must sign in)."""
        return self.user is not None

    def _set_user(self, user: UserConfig | None) -> None:
        self.user = user
        if user is not None:
            self._capped = False
        self.parser.authenticated = user is not None
        self.perms = PermissionSet(user.permissions) if user is not None and user.permissions else None

    # -- input -----------------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Run every complete request the client sent so far."""
        if self.closing:  # (a truth test, so the checks below are not narrowed away)
            return
        self.last_activity_ns = time.time_ns()
        self.parser.receive_data(data)
        verifying = self.verifying
        if verifying is not None and verifying.done:
            self.verifying = None
            self._execute(verifying.then)
        self._run_buffered()

    def _waiting(self) -> bool:
        """Whether a blocked read or a bcrypt check holds up this connection's requests (a call, not
        an attribute test, so that a check before running a request is not taken to hold after it)."""
        return self.blocked is not None or self.verifying is not None

    def _run_buffered(self) -> None:
        """Run the requests buffered so far, until one blocks (the rest wait for it); then commit
        the journal, before any of their replies can leave."""
        if self._waiting():
            return
        try:
            for command in self.parser.commands():
                self._run(command.args)
                if self.closing is not None or self._waiting():
                    break
        except RespProtocolError as exc:
            if exc.message is not None:
                self._send(protocol_error(exc.message))
            self.close(Reason.PROTOCOL_VIOLATION)
        self._commit()

    def _run(self, args: list[bytes]) -> None:
        """One request, with the journal's bookkeeping: the replies from the first one that changed
        keys on are answered with the journal's error if the commit fails (so none of them may
        have changed anything but keys: the journal commits before any other command), and
        readers the request woke are served once what woke them is committed."""
        keyspaces = self.broker.keyspaces
        journal = keyspaces.journal
        if journal is None:
            self._execute(args)
        else:
            if self._unacked >= 0 and not _on_keys(args):
                self._commit()
            start, before = len(self.outbound), journal.buffered
            self._execute(args)
            if self._unacked < 0 and journal.buffered > before and _on_keys(args):
                self._unacked = start  # (else what grew is not this request's: a capture's)
            if self._unacked >= 0 and len(self.outbound) > start:
                self._unacked_replies += 1
        if keyspaces.ready:  # (readers a write woke are served after that write)
            self._commit()
            keyspaces.serve_ready()

    def _commit(self) -> None:
        """Commit the journal; if that fails, the replies since the first change (taken back)
        become the journal's error, one per reply."""
        journal = self.broker.keyspaces.journal
        if journal is None:
            return
        try:
            journal.commit()
        except CommitFailed as exc:
            if self._unacked >= 0:
                del self.outbound[self._unacked :]
                self.outbound += error(str(exc)) * self._unacked_replies
        finally:
            self._unacked = -1
            self._unacked_replies = 0

    def _execute(self, args: list[bytes]) -> None:
        """One request, checked as redis-server's ``processCommand`` checks it, in its order."""
        self.commands += 1
        command = _AS_SENT.get(args[0]) or COMMANDS.get(args[0].lower())
        self._running = True
        try:
            if command is None:
                shown = ""
                for arg in args[1:]:
                    if len(shown) >= 128:
                        break
                    shown += f"'{_text(arg)[: 128 - len(shown)]}' "
                self._queue_failed = self.queued is not None
                self._error(
                    f"unknown command '{_text(args[0])[:128]}', with args beginning with: {shown}"
                )
                return
            name = command.key
            if command.subcommands is not None and len(args) >= 2:
                sub = command.subcommands.get(args[1].lower())
                if sub is None:
                    self._error(
                        f"unknown subcommand '{_text(args[1])[:128]}'. Try {command.name.upper()} HELP."
                    )
                    return
                command = sub
            if (command.arity > 0 and len(args) != command.arity) or len(args) < -command.arity:
                self._queue_failed = self.queued is not None
                self._error(f"wrong number of arguments for '{command.name}' command")
                return
            if self.user is None and name not in _NO_AUTH:
                self._reply(error(NOAUTH))
                return
            if command.denyoom or self.queued is not None:
                oom = self.broker.keyspaces.oom
                if oom is not None and self._refuse_on_oom(command, oom):
                    return
            if command.writes:  # (a blocked XREADGROUP's retry too: nothing left to take back)
                refusal = self.broker.keyspaces.refusal
                if refusal is not None:
                    self._queue_failed = self.queued is not None
                    self._reply(error(refusal))
                    return
            if self.writer is RESP2 and self.subscribed and name not in _SUBSCRIBED_ONLY:
                self._error(
                    f"Can't execute '{command.name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                    "QUIT / RESET are allowed in this context"
                )
                return
            if self.queued is not None and name not in _NOT_QUEUED:
                self.queued.append(args)
                self._queued_denyoom = self._queued_denyoom or command.denyoom
                self._reply(b"+QUEUED\r\n")
                return
            self.last_command = command.name
            assert command.handler is not None
            command.handler(self, args)
        finally:
            self._running = False
            self._skip, self._skip_next = self._skip_next, False
            if self._held:
                held, self._held = self._held, bytearray()
                self._send(bytes(held))

    def _refuse_on_oom(self, command: _Command, oom: str) -> bool:
        """Past ``maxmemory``: whether ``command`` is refused, as redis-server refuses it (one that
        may add data; inside MULTI any but EXEC, DISCARD, QUIT and RESET, the transaction then
        failing; an EXEC of such a command ends its transaction)."""
        if self.queued is None:
            self._reply(error(oom))  # (only a command that may add data gets here)
            return True
        if command.key == b"exec":
            if not self._queued_denyoom:
                return False
            self.queued = None
            self.unwatch()
            self._error(f"-EXECABORT Transaction discarded because of: {oom.removeprefix('-')}")
            return True
        if command.key in _OOM_IN_MULTI:
            return False
        self._queue_failed = True
        self._reply(error(oom))
        return True

    # -- output ----------------------------------------------------------------------------------

    def _reply(self, data: bytes) -> None:
        """A command's reply, unless CLIENT REPLY silenced it (or EXEC collects it)."""
        if self._captured is not None:
            self._captured.append(data)
        elif not (self._reply_off or self._skip):
            self._send(data)
            if self._capped and self.pending_bytes > UNAUTHENTICATED_OUTPUT:
                self._cut_off()

    def _error(self, text: str) -> None:
        self._reply(error(text))

    def _push(self, data: bytes, size: int) -> bool:
        """Queue a delivery; False when it made the connection a slow consumer (closed)."""
        if self._running:
            self._held += data
        else:
            self.outbound += data
            if not self._woken:
                self._woken = True
                self._wake()
        self.out_msgs += 1
        self.out_bytes += size
        pending = len(self.outbound) + self._writing + len(self._held)
        if pending > self.stall_at:
            if self._congested(pending, self.hard_limit):
                return False
            if self._over_soft_since < 0:
                self._over_soft_since = self._clock()
        return True

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        """Deliver a message published on one of this connection's channels."""
        if self.closing is not None:
            return False
        payload = msg.payload
        if self.shard and self.shard.get(sub.sid) is sub:
            return self._push(self.writer.smessage(sub.sid, payload), len(payload))
        return self._push(self.writer.message(sub.sid, payload), len(payload))

    def deliver_pattern(self, pattern: bytes, channel: bytes, msg: Message) -> bool:
        """Deliver a message whose channel matched one of this connection's patterns."""
        if self.closing is not None:
            return False
        payload = msg.payload
        return self._push(self.writer.pmessage(pattern, channel, payload), len(payload))

    # -- subscriptions ---------------------------------------------------------------------------

    def _may_subscribe(self, channels: list[bytes]) -> bool:
        """Whether the user may subscribe to all of them; refuses the command if not."""
        perms = self.perms
        if perms is None:
            return True
        for channel in channels:
            if not perms.can_subscribe(channel_subject(channel).decode(), None):
                self._error(f"-NOPERM No permissions to access the '{_text(channel)}' channel")
                return False
        return True

    def subscribe(self, channels: list[bytes], *, shard: bool) -> None:
        if not self._may_subscribe(channels):
            return
        table = self.shard if shard else self.subs
        for channel in channels:
            sub = table.get(channel)
            if sub is None:
                if self._at_limit():
                    return
                sub = Subscription(channel_subject(channel).decode(), sid=channel, owner=self)
                self.broker.subscribe(self.account, sub)
                table[channel] = sub
            if shard:
                self._send(self.writer.subscription(b"ssubscribe", channel, len(self.shard)))
            else:
                self._send(self.writer.subscription(b"subscribe", channel, self._count()))

    def unsubscribe(self, channels: list[bytes], *, shard: bool) -> None:
        table = self.shard if shard else self.subs
        kind = b"sunsubscribe" if shard else b"unsubscribe"
        if not channels:
            channels = list(table)
            if not channels:
                self._send(self.writer.subscription(kind, None, len(table) if shard else self._count()))
                return
        for channel in channels:
            sub = table.pop(channel, None)
            if sub is not None:
                self.broker.unsubscribe(self.account, [sub])
            self._send(self.writer.subscription(kind, channel, len(table) if shard else self._count()))

    def psubscribe(self, patterns: list[bytes]) -> None:
        for pattern in patterns:
            if len(pattern) > MAX_PATTERN:
                self._error(f"pattern is longer than {MAX_PATTERN} bytes")
                return
        perms = self.perms
        for pattern in patterns:
            if perms is not None and not perms.can_psubscribe(pattern):
                self._error(_pattern_refusal(pattern, perms.refused_channel(pattern)))
                return
        for pattern in patterns:
            if pattern not in self.patterns:
                if self._at_limit():
                    return
                self.patterns[pattern] = None
                self.broker.subscribe_pattern(self.account, pattern, self)
            self._send(self.writer.subscription(b"psubscribe", pattern, self._count()))

    def punsubscribe(self, patterns: list[bytes]) -> None:
        if not patterns:
            patterns = list(self.patterns)
            if not patterns:
                self._send(self.writer.subscription(b"punsubscribe", None, self._count()))
                return
        for pattern in patterns:
            if self.patterns.pop(pattern, 0) is None:
                self.broker.unsubscribe_pattern(self.account, pattern, self)
            self._send(self.writer.subscription(b"punsubscribe", pattern, self._count()))

    def _at_limit(self) -> bool:
        """Whether one more subscription would pass ``max_subscriptions``, channels, shard channels
        and patterns counted together; refuses the command if so (what it took so far stays)."""
        limit = self.broker.config.max_subscriptions
        if limit and len(self.subs) + len(self.shard) + len(self.patterns) >= limit:
            self._error(MAX_SUBS_EXCEEDED)
            return True
        return False

    def _count(self) -> int:
        """Channels plus patterns, as subscribe acknowledgements count them."""
        return len(self.subs) + len(self.patterns)

    def _drop_all(self) -> None:
        """Forget every subscription without a word (RESET, a new account, closing)."""
        subs = list(self.subs.values()) + list(self.shard.values())
        self.subs.clear()
        self.shard.clear()
        if subs:
            self.broker.unsubscribe(self.account, subs)
        for pattern in self.patterns:
            self.broker.unsubscribe_pattern(self.account, pattern, self)
        self.patterns.clear()

    def publish(self, channel: bytes, payload: bytes) -> None:
        if channel == self._channel and channel:
            subject = self._subject
        else:
            subject = channel_subject(channel)
            if len(channel) <= _REMEMBERED_CHANNEL:
                self._channel, self._subject = channel, subject
        if self.perms is not None and not self.perms.can_publish(subject):
            self._error(f"-NOPERM No permissions to access the '{_text(channel)}' channel")
            return
        self.in_msgs += 1
        self.in_bytes += len(payload)
        count, _ = self.broker.publish_counted(self.account, Message(subject, None, None, payload))
        self._reply(integer(count))

    # -- keys, transactions and blocking reads --------------------------------------------------

    @property
    def database(self) -> Database:
        """The selected database of the connection's account."""
        db = self._database
        if db is None or db.index != self.db or self._database_of is not self.account:
            # (looked up again whenever SELECT, AUTH, RESET or a replayed record changed either)
            db = self._database = self.broker.keyspaces.database(self.account.name, self.db)
            self._database_of = self.account
        return db

    def log_write(self, args: list[bytes]) -> None:
        """Record a change to the keys as the command that repeats it (when the node keeps a
        journal, ``--store_dir``)."""
        journal = self.broker.keyspaces.journal
        if journal is not None:
            journal.append(self.account.name, self.db, args)

    def exec_queued(self) -> None:
        """EXEC: run the queued commands as one, their replies gathered into one array."""
        queued, self.queued = self.queued, None
        assert queued is not None
        dirty, failed = self.dirty, self._queue_failed
        self.unwatch()
        if failed:
            self._error("-EXECABORT Transaction discarded because of previous errors.")
            return
        if dirty:
            self._reply(self.writer.null_array)
            return
        replies: list[bytes] = []
        self._captured = replies
        try:
            for args in queued:
                command = COMMANDS[args[0].lower()]
                if command.subcommands is not None:
                    command = command.subcommands[args[1].lower()]
                assert command.handler is not None
                command.handler(self, args)
        finally:
            self._captured = None
        self._reply(array(replies))

    def watch(self, keys: list[bytes]) -> None:
        db = self.database
        for key in keys:
            db.watch(key, self)
            self._watching.append((db, key))

    def unwatch(self) -> None:
        for db, key in self._watching:
            db.unwatch(key, self)
        self._watching.clear()
        self.dirty = False

    @property
    def may_block(self) -> bool:
        """Whether a blocking read may wait (not inside EXEC, where it answers as if timed out)."""
        return self._captured is None

    @property
    def deadline(self) -> float:
        """When the blocked read times out, on this connection's clock (inf: never, or not blocked)."""
        blocked = self.blocked
        return blocked.deadline if blocked is not None else math.inf

    def block(
        self, waits: Sequence[tuple[bytes, Condition]], *, timeout_ms: int, retry: list[bytes]
    ) -> None:
        """Wait until a write to one of the keys meets the condition given with it, then run
        ``retry``; answer a null array if ``timeout_ms`` (0: never) passes first. A retry that
        blocks again keeps the deadline."""
        if self._retry_deadline >= 0:
            deadline = self._retry_deadline
        else:
            deadline = self._clock() + timeout_ms / 1000 if timeout_ms else math.inf
        db = self.database
        for key, until in waits:
            db.block(key, self, until)
        self.blocked = _Blocked(db, [key for key, _ in waits], retry, deadline)
        if deadline < math.inf:  # (else ``deadline`` stays at inf)
            self.on_deadline()

    def _unblock(self) -> _Blocked | None:
        blocked, self.blocked = self.blocked, None
        if blocked is not None:
            for key in blocked.keys:
                blocked.db.unblock(key, self)
            if blocked.deadline < math.inf:  # (one that never times out left ``deadline`` alone)
                self.on_deadline()
        return blocked

    def wake(self) -> None:
        """A write met what this connection waits for on one of its keys: run the read again."""
        blocked = self._unblock()
        if blocked is None or self.closing is not None:
            return
        self._retry_deadline = blocked.deadline
        try:
            self._run(blocked.args)
        finally:
            self._retry_deadline = -1.0
        self._run_buffered()
        self._commit()  # (when the retry blocked again, or requests wait on something else)

    def deadline_due(self) -> None:
        """The timer fired: a blocked read past its deadline answers a null array."""
        blocked = self.blocked
        if blocked is not None and self._clock() >= blocked.deadline:
            self.unblock(as_error=False)

    def unblock(self, *, as_error: bool) -> bool:
        """End a blocked read early (its timeout, or CLIENT UNBLOCK); whether one was blocked."""
        if self._unblock() is None:
            return False
        if as_error:
            self._send(error("-UNBLOCKED client unblocked via CLIENT UNBLOCK"))
        else:
            self._send(self.writer.null_array)
        self._run_buffered()
        return True

    # -- authentication --------------------------------------------------------------------------

    def sign_in(self, name: bytes | None, password: bytes, command: list[bytes]) -> bool | None:
        """AUTH's check: a user and password, or (no user name) a token or the ``default`` user's
        password. Switching to another account drops the subscriptions of the old one.

        None: a bcrypt check is under way in a worker thread; ``command`` runs again when it is done
        (inside EXEC, which cannot wait, the check runs at once)."""
        auth = self.broker.auth
        secret = _text(password)
        if name is not None:
            attempts = [{"user": _text(name), "pass": secret}]
        else:
            attempts = [{"auth_token": secret}, {"user": "default", "pass": secret}]
        user = None
        for options in attempts:
            found = auth.authenticate(options)
            if isinstance(found, Verification):
                if self.may_block:
                    self.verifying = Verifying(found, list(map(bytes, command)))
                    return None
                found = auth.check_now(options)
            if found is not None:
                user = found
                break
        if user is None:
            return False
        account = self.broker.account(user.account)
        if account is not self.account:
            self._drop_all()
            self.account = account
        self._set_user(user)
        return True

    def reset(self) -> None:
        """RESET: as if newly connected (without a new id)."""
        self._drop_all()
        self.queued = None
        self._queue_failed = False
        self.unwatch()
        self.writer = RESP2
        self.db = 0
        self.options["name"] = ""
        self._reply_off = self._skip_next = False
        user = self.broker.auth.without_credentials()
        account = self.broker.account(user.account if user else "$G")
        self.account = account
        self._set_user(user)

    # -- timers (driven by the I/O side) ---------------------------------------------------------

    def limits_due(self) -> None:
        """The output-limit timer fired: close a subscriber that stayed above the soft limit."""
        if self.closing is not None:
            return
        if self.pending_bytes <= self.stall_at:
            self._over_soft_since = -1.0
        elif self._over_soft_since < 0:
            self._over_soft_since = self._clock()
        elif self._clock() - self._over_soft_since >= self.soft_seconds:
            self._cut_off()

    # -- ending ----------------------------------------------------------------------------------

    def _internal_error_reply(self) -> bytes:
        return error("internal error")

    def _forget_input(self) -> None:
        self.parser.clear()

    def _release(self) -> None:
        """Closing: subscriptions, a blocked read and watched keys go, and so do pushes held for
        after a reply."""
        self._held.clear()
        self._drop_all()
        self._unblock()
        self.unwatch()

    # -- introspection ---------------------------------------------------------------------------

    def client_line(self) -> bytes:
        """This connection as a line of CLIENT LIST (the fields clients and tools read)."""
        now = time.time_ns()
        user = (self.user.user if self.user is not None else None) or "default"
        flags = ("P" if self.subscribed else "") + ("b" if self._waiting() else "")
        flags += "x" if self.queued is not None else ""
        flags = flags or "N"
        line = (
            f"id={self.cid} addr={self.host}:{self.port} laddr= fd=-1 name={self.name} "
            f"age={(now - self.start_ns) // 10**9} idle={(now - self.last_activity_ns) // 10**9} "
            f"flags={flags} db={self.db} sub={len(self.subs)} psub={len(self.patterns)} "
            f"ssub={len(self.shard)} multi=-1 qbuf={self.parser.buffered} obl=0 oll=0 "
            f"omem={self.pending_bytes} tot-mem=0 events=r cmd={self.last_command} user={user} "
            f"resp={self.writer.version} lib-name={self.options.get('lang') or ''} "
            f"lib-ver={self.options.get('version') or ''}\n"
        )
        return line.encode("utf-8", "surrogateescape")


def _ignore() -> None:
    """What ``on_deadline`` calls until the I/O side listens: nobody to tell yet."""


def _resp_clients(conn: RespConnection) -> list[RespConnection]:
    """The Redis connections of this node in the same account (what PUBSUB and CLIENT see)."""
    return [
        c
        for c in conn.broker.clients.values()
        if isinstance(c, RespConnection) and c.account is conn.account
    ]


# -- commands -------------------------------------------------------------------------------------


def _ping(conn: RespConnection, args: list[bytes]) -> None:
    if len(args) > 2:
        conn._error("wrong number of arguments for 'ping' command")
    elif conn.writer is RESP2 and conn.subscribed:
        conn._reply(array([bulk(b"pong"), bulk(args[1] if len(args) > 1 else b"")]))
    else:
        conn._reply(bulk(args[1]) if len(args) > 1 else PONG)


def _echo(conn: RespConnection, args: list[bytes]) -> None:
    conn._reply(bulk(args[1]))


def _quit(conn: RespConnection, args: list[bytes]) -> None:
    conn._reply(OK)
    conn.close(Reason.CLIENT_CLOSED)


def _reset(conn: RespConnection, args: list[bytes]) -> None:
    conn.reset()
    conn._reply(simple(b"RESET"))


def _auth(conn: RespConnection, args: list[bytes]) -> None:
    if len(args) > 3:
        conn._error("syntax error")
    elif len(args) == 2 and not conn.broker.auth.required:
        conn._error(
            "AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?"
        )
    else:
        signed_in = conn.sign_in(args[1] if len(args) == 3 else None, args[-1], args)
        if signed_in is not None:  # (else it is answered when it runs again)
            conn._reply(OK if signed_in else error(WRONGPASS))


def _hello(conn: RespConnection, args: list[bytes]) -> None:
    version = conn.writer.version
    if len(args) > 1:
        asked = string2ll(args[1])
        if asked is None or not 0 <= asked <= 2**31 - 1:
            conn._error("Protocol version is not an integer or out of range")
            return
        if asked not in (2, 3):
            conn._reply(error("-NOPROTO unsupported protocol version"))
            return
        version = asked
    credentials: tuple[bytes, bytes] | None = None
    name: bytes | None = None
    i = 2
    while i < len(args):
        option = args[i].lower()
        left = len(args) - i - 1
        if option == b"auth" and left >= 2:
            credentials = (args[i + 1], args[i + 2])
            i += 3
        elif option == b"setname" and left >= 1:
            name = args[i + 1]
            i += 2
        else:
            conn._error(f"Syntax error in HELLO option '{_text(args[i])}'")
            return
    if credentials is not None:
        signed_in = conn.sign_in(*credentials, args)
        if signed_in is None:
            return  # (answered when it runs again)
        if not signed_in:
            conn._reply(error(WRONGPASS))
            return
    if conn.user is None:
        conn._reply(error(HELLO_NOAUTH))
        return
    if name is not None:
        if not _valid_name(name):
            conn._error(BAD_NAME)
            return
        conn.options["name"] = _text(name)
    conn.writer = writer_for(version)
    w = conn.writer
    conn._reply(
        w.map(
            [
                (bulk(b"server"), bulk(b"redis")),
                (bulk(b"version"), bulk(REDIS_VERSION.encode())),
                (bulk(b"proto"), integer(version)),
                (bulk(b"id"), integer(conn.cid)),
                (bulk(b"mode"), bulk(b"standalone")),
                (bulk(b"role"), bulk(b"master")),
                (bulk(b"modules"), array([])),
            ]
        )
    )


def _select(conn: RespConnection, args: list[bytes]) -> None:
    db = string2ll(args[1])
    if db is None:
        conn._error(NOT_INTEGER)
    elif not 0 <= db < 16:
        conn._error("DB index is out of range")
    else:
        conn.db = db
        conn._reply(OK)


def _valid_name(name: bytes) -> bool:
    return all(33 <= byte <= 126 for byte in name)


def _client_id(conn: RespConnection, args: list[bytes]) -> None:
    conn._reply(integer(conn.cid))


def _client_setname(conn: RespConnection, args: list[bytes]) -> None:
    if not _valid_name(args[2]):
        conn._error(BAD_NAME)
        return
    conn.options["name"] = _text(args[2])
    conn._reply(OK)


def _client_getname(conn: RespConnection, args: list[bytes]) -> None:
    name = conn.name
    conn._reply(bulk(name.encode("utf-8", "surrogateescape")) if name else conn.writer.null)


def _client_setinfo(conn: RespConnection, args: list[bytes]) -> None:
    attr = args[2].lower()
    key = {b"lib-name": "lang", b"lib-ver": "version"}.get(attr)
    if key is None:
        conn._error(f"Unrecognized option '{_text(args[2])}'")
    elif not all(33 <= byte <= 126 for byte in args[3]):
        conn._error(f"{_text(args[2])} cannot contain spaces, newlines or special characters.")
    else:
        conn.options[key] = _text(args[3])
        conn._reply(OK)


def _client_list(conn: RespConnection, args: list[bytes]) -> None:
    conn._reply(conn.writer.verbatim(b"".join(c.client_line() for c in _resp_clients(conn))))


def _client_info(conn: RespConnection, args: list[bytes]) -> None:
    conn._reply(conn.writer.verbatim(conn.client_line()))


def _client_kill(conn: RespConnection, args: list[bytes]) -> None:
    """``CLIENT KILL addr`` (answers OK) or ``CLIENT KILL ID id | ADDR addr ...`` (answers a count)."""
    if len(args) == 3:
        victims = [c for c in _resp_clients(conn) if f"{c.host}:{c.port}".encode() == args[2]]
        if not victims:
            conn._error("No such client")
            return
        victims[0].close(Reason.CLIENT_CLOSED)
        conn._reply(OK)
        return
    if len(args) % 2:
        conn._error("syntax error")
        return
    victims = _resp_clients(conn)
    for i in range(2, len(args), 2):
        field, value = args[i].lower(), args[i + 1]
        if field == b"id":
            cid = string2ll(value)
            if cid is None or cid <= 0:
                conn._error("client-id should be greater than 0")
                return
            victims = [c for c in victims if c.cid == cid]
        elif field == b"addr":
            victims = [c for c in victims if f"{c.host}:{c.port}".encode() == value]
        else:
            conn._error("syntax error")
            return
    for victim in victims:
        victim.close(Reason.CLIENT_CLOSED)
    conn._reply(integer(len(victims)))


def _client_reply(conn: RespConnection, args: list[bytes]) -> None:
    mode = args[2].lower()
    if mode == b"on":
        conn._reply_off = conn._skip_next = False
        conn._skip = False
        conn._reply(OK)
    elif mode == b"off":
        conn._reply_off = True
    elif mode == b"skip":
        if not conn._reply_off:
            conn._skip_next = True
    else:
        conn._error("syntax error")


def _help(lines: list[bytes]) -> Handler:
    def reply(conn: RespConnection, args: list[bytes]) -> None:
        conn._reply(array(simple(line) for line in lines))

    return reply


def _command_info_entry(command: _Command) -> bytes:
    return array(
        [
            bulk(command.name.encode()),
            integer(command.arity),
            array([]),
            integer(0),
            integer(0),
            integer(0),
            array([]),
            array([]),
            array([]),
            array([]),
        ]
    )


def _command(conn: RespConnection, args: list[bytes]) -> None:
    conn._reply(array(_command_info_entry(c) for c in COMMANDS.values()))


def _command_count(conn: RespConnection, args: list[bytes]) -> None:
    conn._reply(integer(len(COMMANDS)))


def _command_docs(conn: RespConnection, args: list[bytes]) -> None:
    conn._reply(conn.writer.map([]))


def _command_info(conn: RespConnection, args: list[bytes]) -> None:
    names = [name.lower() for name in args[2:]] or list(COMMANDS)
    entries = []
    for name in names:
        command = COMMANDS.get(name)
        entries.append(conn.writer.null_array if command is None else _command_info_entry(command))
    conn._reply(array(entries))


def _info(conn: RespConnection, args: list[bytes]) -> None:
    broker = conn.broker
    wanted = {arg.lower() for arg in args[1:]} or {b"default"}
    everything = bool(wanted & {b"all", b"everything", b"default"})
    sections: list[str] = []
    if everything or b"server" in wanted:
        uptime = (time.time_ns() - broker.start_ns) // 10**9
        sections.append(
            "# Server\r\n"
            f"redis_version:{REDIS_VERSION}\r\nredis_mode:standalone\r\n"
            f"pubmesh_version:{VERSION}\r\nserver_name:{broker.server_name}\r\n"
            f"process_id:{os.getpid()}\r\nuptime_in_seconds:{uptime}\r\n"
            f"uptime_in_days:{uptime // 86400}\r\n"
        )
    if everything or b"clients" in wanted:
        resp = [c for c in broker.clients.values() if isinstance(c, RespConnection)]
        subscribers = sum(1 for c in resp if c.subs or c.patterns)
        unauthenticated = sum(1 for c in resp if not c.authenticated)
        sections.append(
            "# Clients\r\n"
            f"connected_clients:{len(resp)}\r\npubsub_clients:{subscribers}\r\n"
            f"unauthenticated_clients:{unauthenticated}\r\n"
            f"maxclients:{broker.config.max_connections}\r\n"
        )
    if everything or b"memory" in wanted:
        sections.append(memory_info(conn))
    if everything or b"persistence" in wanted:
        store = broker.keyspaces.store
        fields: list[tuple[str, int | str]] = [("loading", 0), ("aof_enabled", int(store is not None))]
        fields += store.info() if store is not None else [("aof_rewrite_in_progress", 0)]
        sections.append("# Persistence\r\n" + "".join(f"{k}:{v}\r\n" for k, v in fields))
    if everything or b"stats" in wanted:
        patterns = sum(len(a.patterns) for a in broker.accounts.values() if a.patterns is not None)
        channels = {ch for c in _resp_clients(conn) for ch in c.subs}
        in_msgs, _, out_msgs, _ = broker.traffic()
        sections.append(
            "# Stats\r\n"
            f"total_connections_received:{broker.total_connections}\r\n"
            f"pubsub_channels:{len(channels)}\r\npubsub_patterns:{patterns}\r\n"
            f"total_messages_in:{in_msgs}\r\ntotal_messages_out:{out_msgs}\r\n"
            f"client_output_buffer_limit_disconnections:{broker.slow_consumers}\r\n"
        )
    if everything or b"keyspace" in wanted:
        databases = conn.broker.keyspaces.keyspace(conn.account.name).databases()
        lines = [
            f"db{n}:keys={len(db)},expires={db.expiring()},avg_ttl=0\r\n"
            for n, db in sorted(databases.items())
            if len(db)
        ]
        sections.append("# Keyspace\r\n" + "".join(lines))
    conn._reply(conn.writer.verbatim("\r\n".join(sections).encode()))


_CONFIG = {
    b"databases": b"16",
    b"save": b"",
    b"maxmemory-policy": POLICY,
    b"notify-keyspace-events": b"",
    b"cluster-enabled": b"no",
}


def _config_get(conn: RespConnection, args: list[bytes]) -> None:
    limits = "client-output-buffer-limit"
    store = conn.broker.keyspaces.store
    table = _CONFIG | {
        b"maxmemory": b"%d" % conn.broker.keyspaces.maxmemory,
        b"appendonly": b"no" if store is None else b"yes",
        b"appendfsync": b"everysec" if store is None else store.appendfsync.encode(),
    }
    found: dict[bytes, bytes] = {}
    for pattern in args[2:]:
        for key, value in table.items():
            if glob_match(pattern, key, nocase=True):
                found[key] = value
        if glob_match(pattern, limits.encode(), nocase=True):
            hard, soft = conn.hard_limit, conn.stall_at
            found[limits.encode()] = b"normal 0 0 0 slave 268435456 67108864 60 pubsub %d %d %d" % (
                hard,
                soft,
                int(conn.soft_seconds),
            )
    conn._reply(conn.writer.map((bulk(k), bulk(v)) for k, v in found.items()))


def _bgrewriteaof(conn: RespConnection, args: list[bytes]) -> None:
    store = conn.broker.keyspaces.store
    if store is None:
        conn._error("no append only file to rewrite: keys are kept in memory only (see store_dir)")
    elif store.rewrite():
        conn._reply(simple(b"Background append only file rewriting started"))
    else:
        conn._error("Background append only file rewriting already in progress")


def _time(conn: RespConnection, args: list[bytes]) -> None:
    now = time.time_ns() // 1000
    conn._reply(array([bulk(b"%d" % (now // 10**6)), bulk(b"%d" % (now % 10**6))]))


def _multi(conn: RespConnection, args: list[bytes]) -> None:
    if conn.queued is not None:
        conn._error("MULTI calls can not be nested")
        return
    conn.queued = []
    conn._queue_failed = conn._queued_denyoom = False
    conn._reply(OK)


def _exec(conn: RespConnection, args: list[bytes]) -> None:
    if conn.queued is None:
        conn._error("EXEC without MULTI")
        return
    conn.exec_queued()


def _discard(conn: RespConnection, args: list[bytes]) -> None:
    if conn.queued is None:
        conn._error("DISCARD without MULTI")
        return
    conn.queued = None
    conn.unwatch()
    conn._reply(OK)


def _watch(conn: RespConnection, args: list[bytes]) -> None:
    if conn.queued is not None:
        conn._error("WATCH inside MULTI is not allowed")
        return
    conn.watch(args[1:])
    conn._reply(OK)


def _unwatch(conn: RespConnection, args: list[bytes]) -> None:
    conn.unwatch()
    conn._reply(OK)


def _client_unblock(conn: RespConnection, args: list[bytes]) -> None:
    how = args[3].lower() if len(args) == 4 else b"timeout"
    if len(args) > 4 or how not in (b"timeout", b"error"):
        conn._error("CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
        return
    cid = string2ll(args[2])
    if cid is None:
        conn._error(NOT_INTEGER)
        return
    target = conn.broker.clients.get(cid)
    done = isinstance(target, RespConnection) and target.unblock(as_error=how == b"error")
    conn._reply(integer(1 if done else 0))


def _subscribe(conn: RespConnection, args: list[bytes]) -> None:
    conn.subscribe(args[1:], shard=False)


def _ssubscribe(conn: RespConnection, args: list[bytes]) -> None:
    conn.subscribe(args[1:], shard=True)


def _unsubscribe(conn: RespConnection, args: list[bytes]) -> None:
    conn.unsubscribe(args[1:], shard=False)


def _sunsubscribe(conn: RespConnection, args: list[bytes]) -> None:
    conn.unsubscribe(args[1:], shard=True)


def _psubscribe(conn: RespConnection, args: list[bytes]) -> None:
    conn.psubscribe(args[1:])


def _punsubscribe(conn: RespConnection, args: list[bytes]) -> None:
    conn.punsubscribe(args[1:])


def _publish(conn: RespConnection, args: list[bytes]) -> None:
    conn.publish(args[1], args[2])


def _channel_list(conn: RespConnection, args: list[bytes], *, shard: bool) -> None:
    seen: dict[bytes, None] = {}
    for client in _resp_clients(conn):
        table = client.shard if shard else client.subs
        for channel in table:
            seen[channel] = None
    pattern = args[2] if len(args) > 2 else None
    conn._reply(array(bulk(c) for c in seen if pattern is None or glob_match(pattern, c)))


def _pubsub_channels(conn: RespConnection, args: list[bytes]) -> None:
    if len(args) > 3:
        conn._error("wrong number of arguments for 'pubsub|channels' command")
        return
    _channel_list(conn, args, shard=False)


def _pubsub_shardchannels(conn: RespConnection, args: list[bytes]) -> None:
    if len(args) > 3:
        conn._error("wrong number of arguments for 'pubsub|shardchannels' command")
        return
    _channel_list(conn, args, shard=True)


def _numsub(conn: RespConnection, args: list[bytes], *, shard: bool) -> None:
    clients = _resp_clients(conn)
    items = []
    for channel in args[2:]:
        count = sum(1 for c in clients if channel in (c.shard if shard else c.subs))
        items += [bulk(channel), integer(count)]
    conn._reply(array(items))


def _pubsub_numsub(conn: RespConnection, args: list[bytes]) -> None:
    _numsub(conn, args, shard=False)


def _pubsub_shardnumsub(conn: RespConnection, args: list[bytes]) -> None:
    _numsub(conn, args, shard=True)


def _pubsub_numpat(conn: RespConnection, args: list[bytes]) -> None:
    patterns = conn.account.patterns
    conn._reply(integer(len(patterns) if patterns is not None else 0))


_PUBSUB_HELP = [
    b"PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CHANNELS [<pattern>]",
    b"    Return the currently active channels matching a <pattern> (default: '*').",
    b"NUMPAT",
    b"    Return number of subscriptions to patterns.",
    b"NUMSUB [<channel> ...]",
    b"    Return the number of subscribers for the specified channels, excluding",
    b"    pattern subscriptions(default: no channels).",
    b"SHARDCHANNELS [<pattern>]",
    b"    Return the currently active shard level channels matching a <pattern> (default: '*').",
    b"SHARDNUMSUB [<shardchannel> ...]",
    b"    Return the number of subscribers for the specified shard level channel(s)",
    b"HELP",
    b"    Prints this help.",
]
_CLIENT_HELP = [
    b"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"GETNAME",
    b"ID",
    b"INFO",
    b"KILL <ip:port> | KILL ID <id> | KILL ADDR <ip:port>",
    b"LIST",
    b"REPLY (ON|OFF|SKIP)",
    b"UNBLOCK <clientid> [TIMEOUT|ERROR]",
    b"SETINFO <LIB-NAME|LIB-VER> <value>",
    b"SETNAME <name>",
    b"HELP",
]
_COMMAND_HELP = [
    b"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"(no subcommand)",
    b"COUNT",
    b"DOCS [<command-name> ...]",
    b"INFO [<command-name> ...]",
    b"HELP",
]
_CONFIG_HELP = [
    b"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"GET <pattern>",
    b"SET <directive> <value>",
    b"HELP",
]


def _container(
    name: str, arity: int, default: Handler | None, subs: dict[str, tuple[int, Handler]]
) -> _Command:
    """A command with subcommands (``name|sub`` in error texts); ``default`` runs it bare."""
    table = {key.encode(): _Command(f"{name}|{key}", a, h) for key, (a, h) in subs.items()}
    return _Command(name, arity, default, table)


COMMANDS: Final[dict[bytes, _Command]] = {
    b"ping": _Command("ping", -1, _ping),
    b"echo": _Command("echo", 2, _echo),
    b"quit": _Command("quit", -1, _quit),
    b"reset": _Command("reset", 1, _reset),
    b"hello": _Command("hello", -1, _hello),
    b"auth": _Command("auth", -2, _auth),
    b"select": _Command("select", 2, _select),
    b"client": _container(
        "client",
        -2,
        None,
        {
            "id": (2, _client_id),
            "setname": (3, _client_setname),
            "getname": (2, _client_getname),
            "setinfo": (4, _client_setinfo),
            "list": (-2, _client_list),
            "info": (2, _client_info),
            "kill": (-3, _client_kill),
            "reply": (3, _client_reply),
            "unblock": (-3, _client_unblock),
            "help": (2, _help(_CLIENT_HELP)),
        },
    ),
    b"command": _container(
        "command",
        -1,
        _command,
        {
            "count": (2, _command_count),
            "docs": (-2, _command_docs),
            "info": (-2, _command_info),
            "help": (2, _help(_COMMAND_HELP)),
        },
    ),
    b"info": _Command("info", -1, _info),
    b"config": _container(
        "config",
        -2,
        None,
        {"get": (-3, _config_get), "set": (-4, config_set), "help": (2, _help(_CONFIG_HELP))},
    ),
    b"time": _Command("time", 1, _time),
    b"bgrewriteaof": _Command("bgrewriteaof", 1, _bgrewriteaof),
    b"subscribe": _Command("subscribe", -2, _subscribe),
    b"unsubscribe": _Command("unsubscribe", -1, _unsubscribe),
    b"psubscribe": _Command("psubscribe", -2, _psubscribe),
    b"punsubscribe": _Command("punsubscribe", -1, _punsubscribe),
    b"ssubscribe": _Command("ssubscribe", -2, _ssubscribe),
    b"sunsubscribe": _Command("sunsubscribe", -1, _sunsubscribe),
    b"publish": _Command("publish", 3, _publish),
    b"spublish": _Command("spublish", 3, _publish),
    b"pubsub": _container(
        "pubsub",
        -2,
        None,
        {
            "channels": (-2, _pubsub_channels),
            "numsub": (-2, _pubsub_numsub),
            "numpat": (2, _pubsub_numpat),
            "shardchannels": (-2, _pubsub_shardchannels),
            "shardnumsub": (-2, _pubsub_shardnumsub),
            "help": (2, _help(_PUBSUB_HELP)),
        },
    ),
}
"""The commands this front door serves, by lowercase name."""
COMMANDS.update(
    {
        b"multi": _Command("multi", 1, _multi),
        b"exec": _Command("exec", 1, _exec),
        b"discard": _Command("discard", 1, _discard),
        b"watch": _Command("watch", -2, _watch),
        b"unwatch": _Command("unwatch", 1, _unwatch),
        **{
            name.encode(): _Command(name, a, h)
            for name, (a, h) in (KEY_COMMANDS | STREAM_COMMANDS).items()
        },
        b"xgroup": _container("xgroup", -2, None, {**XGROUP, "help": (2, _help(HELP["xgroup"]))}),
        b"xinfo": _container("xinfo", -2, None, {**XINFO, "help": (2, _help(HELP["xinfo"]))}),
    }
)

_AS_SENT: Final = {**COMMANDS, **{name.upper(): command for name, command in COMMANDS.items()}}
"""The commands by name as clients send it nearly always (all lowercase or all uppercase), so
looking one up seldom needs a lowercased copy of the name."""
