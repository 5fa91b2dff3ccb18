"""One Redis client connection's protocol logic, without I/O: requests in, replies and pushes out.

``receive_data`` takes bytes from the socket and runs every complete request; replies and pushes
accumulate in ``outbound`` (an ``Outbox``), and ``closing`` says when the connection must end. The
trio adapter in ``node.server`` moves the bytes and runs the output-limit timer.

The connection checks each request as redis-server's ``processCommand`` does (arity, sign-in,
``maxmemory``, the journal's state, RESP2's subscribed mode, MULTI's queue) against the command
table it is given (``node.resp.dispatch``) and runs the command's handler. The handlers
(``node.resp.commands``) answer through ``reply`` and ``error``; the connection keeps what outlives
a request: the reply buffer and CLIENT REPLY's mode, the subscriptions, the selected database, the
user signed in, and the output limits. It holds two records of its own: MULTI's queue and the
keys WATCHed (``transaction``, a ``node.resp.transaction.Transaction``, which EXEC runs through
``capture``), and a blocked read (``blocking``, a ``node.resp.blocking.Blocking``, which it runs
again when a write wakes it). How it is shown to CLIENT LIST and MONITOR is
``node.resp.client_list``'s and ``node.resp.monitor_lines``'.

**Replies follow redis-server 7.2**: exact error texts, arity errors, the RESP2 subscribed-mode
restrictions, and pushes produced while a command runs (publishing to oneself) written after that
command's reply.

**Authentication.** With users configured, a connection starts as the ``no_auth_user`` (if there
is one) or unauthenticated, allowed only the commands flagged ``no_auth`` (AUTH, HELLO, QUIT and
RESET). Until a connection first signs in, its unwritten output is held to
``UNAUTHENTICATED_OUTPUT``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from functools import partial
from time import perf_counter_ns
from typing import Final

from node.accounts.permissions import PermissionSet
from node.broker import Broker
from node.config.options import RedisConfig, UserConfig
from node.connection import Connection, Reason
from node.data.durability import CommitFailed
from node.data.keyspace import WRONGTYPE, Condition, Database, WrongType
from node.resp.blocking import Blocking
from node.resp.dispatch import Command, CommandTable
from node.resp.errors import RespProtocolError
from node.resp.in_order import MAX_WAITING, InOrder, Settle
from node.resp.monitor_lines import monitor_line
from node.resp.parser import RequestParser
from node.resp.tracking import ClientTracking, Tracker
from node.resp.transaction import Transaction
from node.resp.writer import (
    RESP2,
    Writer,
    as_text,
    error,
    protocol_error,
)
from routing import Message, Subscription

__all__ = ["UNAUTHENTICATED_OUTPUT", "Handler", "RespConnection"]

NOAUTH: Final = "-NOAUTH Authentication required."
UNAUTHENTICATED_OUTPUT: Final = 16 * 1024
"""The most unwritten output a client that has never signed in may hold: past it, the connection
is closed at once, its output dropped, as redis-server closes such a client (whatever spills out
of its 16 KiB reply buffer is over its 1 KiB limit for them), so a client that pipelines requests
before signing in and never reads the replies cannot make the node hold them."""


class RespConnection(Connection):
    """The protocol state of one Redis client connection.

    Args:
        broker: the node it belongs to.
        cid: its connection id (CLIENT ID, and ``cid`` in /connz).
        commands: the commands it serves.
        host, port: the peer's address.
        wake: called when ``outbound`` gains data or the connection starts closing.
        clock: seconds, for the output-buffer soft limit.
        limits: the ``[redis]`` settings (output-buffer limits).
    """

    def __init__(
        self,
        broker: Broker,
        cid: int,
        commands: CommandTable[RespConnection],
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
        self.table = commands
        self.hard_limit = limits.hard_limit
        self.soft_seconds = limits.soft_seconds
        self._over_soft_since = -1.0
        self.last_channel = self.last_subject = b""
        """The last channel published to, and its subject (PUBLISH remembers them)."""
        self.writer: Writer = RESP2
        self.parser = RequestParser(
            authenticated=self.user is not None,
            max_request=broker.redis_settings.query_buffer_limit,
        )
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
        self.in_order = InOrder()
        """Output waiting behind a reply that waits for its commit (replicated keys)."""
        self.transaction = Transaction()
        """MULTI's queue and the keys WATCHed (``node.resp.transaction``)."""
        self._captured: list[bytes] | None = None  # EXEC's replies, collected
        self.blocking = Blocking()
        """A blocked read, and the deadline the I/O side's timer follows (``node.resp.blocking``)."""
        self._unacked = -1
        """Where in ``outbound`` the replies that wait on the journal's commit start (-1: none)."""
        self._unacked_replies = 0
        # (An AUTH, or HELLO AUTH, whose bcrypt check runs waits in ``verifying``: it runs again
        # once the verdict is in, and the requests after it wait for it.)
        self.last_command = "NULL"
        self.tracking: ClientTracking | None = None
        """CLIENT TRACKING's state while it is on (``node.resp.tracking``)."""
        self.scripted = False
        """A script's client: blocking reads refuse BLOCK, as redis-server refuses it to scripts."""
        self.local_address = ""
        """``host:port`` the client connected to (CLIENT LIST's ``laddr``)."""
        self.fd = -1
        """The socket's file descriptor (CLIENT LIST's ``fd``)."""
        self.monitoring = False
        """In MONITOR mode: fed every command the node runs."""
        self.no_touch = False
        """CLIENT NO-TOUCH: the keys its commands read are not marked accessed (but by TOUCH)."""
        self.readonly = False
        """READONLY: its reads of replicated keys run on this node's replica as it is (possibly
        stale), as on a Redis Cluster replica (``node.replicated.path``)."""
        self.pipelined: object | None = None
        """The writes it sent to another node and has not had answered yet, where keys are
        replicated (``node.replicated.pipelines``; kept here: a compiled connection takes no weak
        reference)."""
        self._request: list[bytes] = []
        """The request running (or the last one)."""
        self._from_inline = False
        """Whether the request read last came as an inline line."""
        self._failed = False
        """The command running answered an error (a command EXEC runs: that one)."""
        self._mark = perf_counter_ns()
        """When the last command ended (or input came): a command's time runs from it."""

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
        self._mark = perf_counter_ns()
        self.broker.redis_stats.net_input += len(data)
        self.parser.receive_data(data)
        verifying = self.verifying
        if verifying is not None and verifying.done:
            self.verifying = None
            self.execute(verifying.then)
        self._run_buffered()

    def waiting(self) -> bool:
        """Whether a blocked read or a bcrypt check holds up this connection's requests (a call, not
        an attribute test, so that a check before running a request is not taken to hold after it)."""
        return (
            self.blocking.read is not None
            or self.verifying is not None
            or self.awaiting is not None
            or self.in_order.count >= MAX_WAITING
        )

    @property
    def query_buffer(self) -> int:
        """Bytes of requests read and not yet run, as redis-server's ``qbuf`` counts them: while a
        request runs, its own too (unless it came as an inline line)."""
        qbuf = self.parser.buffered
        if self._running and not self._from_inline:  # (as in redis-server's query buffer then)
            qbuf += 3 + len(str(len(self._request)))
            qbuf += sum(len(arg) + len(str(len(arg))) + 5 for arg in self._request)
        return qbuf

    def _run_buffered(self) -> None:
        """Run the requests buffered so far, until one blocks (the rest wait for it); then commit
        the journal, before any of their replies can leave, and count the memory of the keys they
        changed while those are still in the processor's caches (``Keyspaces.settle``; see
        ``node.data.keyspaces``)."""
        if self.waiting():
            return
        try:
            for command in self.parser.commands():
                self._from_inline = command.inline
                self._run(command.args)
                if self.closing is not None or self.waiting():
                    break
        except RespProtocolError as exc:
            if exc.message is not None:
                self._send(protocol_error(exc.message))
            self.close(Reason.PROTOCOL_VIOLATION)
        self._commit()
        keyspaces = self.broker.keyspaces
        keyspaces.settle()
        tracker = keyspaces.tracker
        if tracker is not None:  # (BCAST's invalidations of the batch's changes, gathered)
            assert isinstance(tracker, Tracker)
            tracker.send_broadcasts()

    def _run(self, args: list[bytes]) -> None:
        """One request, with the journal's bookkeeping: the replies from the first one that changed
        keys on are answered with the journal's error if the commit fails (so none of them may
        have changed anything but keys: the journal commits before any other command), and
        readers the request woke are served once what woke them is committed."""
        keyspaces = self.broker.keyspaces
        journal = keyspaces.journal
        if journal is None:
            self.execute(args)
        else:
            if self._unacked >= 0 and not self._on_keys(args):
                self._commit()
            start, before = len(self.outbound), journal.buffered
            self.execute(args)
            if self._unacked < 0 and journal.buffered > before and self._on_keys(args):
                self._unacked = start  # (else what grew is not this request's: a capture's)
            if self._unacked >= 0 and len(self.outbound) > start:
                self._unacked_replies += 1
        if keyspaces.ready:  # (readers a write woke are served after that write)
            self._commit()
            keyspaces.serve_ready()

    def _on_keys(self, args: list[bytes]) -> bool:
        """Whether the request is answered as a command on keys (the ``on_keys`` of ``FLAGS``)."""
        command = self.table.find(args[0])
        return command is not None and command.on_keys

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

    def execute(self, args: list[bytes]) -> None:
        """One request, checked as redis-server's ``processCommand`` checks it, in its order (the
        journal's bookkeeping around it is ``_run``'s)."""
        command = self.table.find(args[0])
        self._running = True
        try:
            if command is None:
                shown = ""
                for arg in args[1:]:
                    if len(shown) >= 128:
                        break
                    shown += f"'{as_text(arg)[: 128 - len(shown)]}' "
                self.transaction.refused()
                self.error(
                    f"unknown command '{as_text(args[0])[:128]}', with args beginning with: {shown}"
                )
                return
            top = command  # (whose flags say what runs before sign-in, when subscribed, in MULTI)
            if command.subcommands is not None and len(args) >= 2:
                sub = command.subcommands.get(args[1].lower())
                if sub is None:
                    shown = as_text(args[1])[:128]
                    self.error(f"unknown subcommand '{shown}'. Try {command.name.upper()} HELP.")
                    return
                command = sub
            if (command.arity > 0 and len(args) != command.arity) or len(args) < -command.arity:
                self.reject(command, f"wrong number of arguments for '{command.name}' command")
                return
            if self.user is None and not top.no_auth:
                self.reject(command, NOAUTH)
                return
            transaction = self.transaction
            if transaction.queued is not None and command.no_multi:
                self.reject(command, "Command not allowed inside a transaction")
                return
            if command.denyoom or transaction.queued is not None:
                oom = self.broker.keyspaces.oom
                if oom is not None and self._refuse_on_oom(command, oom):
                    return
            if command.writes:  # (a blocked XREADGROUP's retry too: nothing left to take back)
                refusal = self.broker.keyspaces.refusal
                if refusal is not None:
                    transaction.refused()
                    self.reject(command, refusal)
                    return
            if self.writer is RESP2 and self.subscribed and not top.subscribed:
                self.reject(
                    command,
                    f"Can't execute '{command.name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                    "QUIT / RESET are allowed in this context",
                )
                return
            if self.monitoring and top.on_keys:
                self.reject(command, "Replica can't interact with the keyspace")
                return
            if transaction.queued is not None and top.queueable:
                transaction.queue(args, command.denyoom)
                self.reply(b"+QUEUED\r\n")
                return
            keys = self.broker.key_router
            if keys is not None and keys.holds_back(self, command, args):
                return  # (it runs once the writes pipelined before it are answered)
            self.last_command = command.name
            self._request = args
            router = keys if top.on_keys else None  # (node.replicated.path)
            if router is not None:
                queued = transaction.queued
                if router.route(self, command, args):
                    if self.tracking is not None:
                        self._remember_carried(args, queued if command.key == b"exec" else None)
                    return
            tracker = self.broker.keyspaces.tracker
            if tracker is None:
                self._call(command, args)
            else:
                self._call_tracked(tracker, top, command, args)
            if router is not None:
                router.ran(self)
        finally:
            self._running = False
            self._skip, self._skip_next = self._skip_next, False
            if self._held:
                held, self._held = self._held, bytearray()
                self._send(bytes(held))

    def reject(self, command: Command[RespConnection], text: str) -> None:
        """Refuse a request before it runs, as ``rejectCommand`` does: a transaction it was to be
        queued in fails, and a refused EXEC ends its transaction (``text``: as ``error`` takes it);
        counted as rejected."""
        self.broker.redis_stats.rejected(command.name)
        if command.key == b"exec":
            self.transaction.discard()
            self.error(f"-EXECABORT Transaction discarded because of: {text.removeprefix('-')}")
            return
        self.transaction.refused()
        self.error(text)

    def _call(self, command: Command[RespConnection], args: list[bytes]) -> None:
        """Run a command's handler (a key of the wrong kind is answered ``WRONGTYPE``), counted
        (its time runs from the end of the one before, or the input that brought it: one clock
        read per command), shown to MONITOR clients, and slow-logged past the threshold. A read
        that blocks is shown when it first runs and counted when it is done (``_count``)."""
        self._failed = False
        assert command.handler is not None
        untouched = self.no_touch and command.key != b"touch"
        if untouched:
            self.broker.keyspaces.touching = False
        try:
            command.handler(self, args)
        except WrongType:
            self.error(WRONGTYPE)
        finally:
            if untouched:
                self.broker.keyspaces.touching = True
        if self.blocking.read is None:
            self._count(command.name, args)
        monitors = self.broker.redis_stats.monitors
        if monitors and not command.unmonitored and self.blocking.retry_deadline < 0:
            self._feed_monitors(monitors, args)

    def _count(self, name: str, args: list[bytes]) -> None:
        stats = self.broker.redis_stats
        now = perf_counter_ns()
        elapsed = now - self._mark
        self._mark = now
        failed, self._failed = self._failed, False
        if stats.called(name, elapsed, failed):
            stats.slow(args, elapsed, f"{self.host}:{self.port}", self.name)

    def show_to_monitors(self, args: list[bytes]) -> None:
        """Show a ``skip_monitor`` command to MONITOR clients now (before what it runs)."""
        monitors = self.broker.redis_stats.monitors
        if monitors:
            self._feed_monitors(monitors, args)

    def _feed_monitors(self, monitors: list[RespConnection], args: list[bytes]) -> None:
        addr = "lua" if self.scripted else f"{self.host}:{self.port}"
        line = monitor_line(time.time_ns() // 1000, self.db, addr, args)
        for monitor in monitors:
            monitor.feed_monitor(line)

    def feed_monitor(self, line: bytes) -> None:
        """A command another client ran (MONITOR mode), held to the output limits."""
        if self.closing is None:
            self._push(line, len(line))

    def _call_tracked(
        self,
        tracker: object,
        top: Command[RespConnection],
        command: Command[RespConnection],
        args: list[bytes],
    ) -> None:
        """Run a command while clients track keys: changes it makes are its own (NOLOOP), the
        keys it reads are remembered if this connection tracks them, and CLIENT CACHING's choice
        lasts until a command other than CLIENT ends outside MULTI."""
        assert isinstance(tracker, Tracker)
        outer, tracker.current = tracker.current, self
        try:
            self._call(command, args)
            tracker.remember(self, command.key, args)
        finally:
            tracker.current = outer
        state = self.tracking
        if state is not None and self.transaction.queued is None and top.key != b"client":
            state.caching = False

    def _remember(self, command: Command[RespConnection], args: list[bytes]) -> None:
        """A command run inside another (EXEC's, a script's) has read its keys: they are
        remembered for the client whose command runs (``Tracker.current``), if it tracks them."""
        tracker = self.broker.keyspaces.tracker
        if tracker is not None:
            assert isinstance(tracker, Tracker)
            caller = tracker.current
            if caller is not None and caller.tracking is not None:
                tracker.remember(caller, command.key, args)

    def _remember_carried(self, args: list[bytes], queued: list[list[bytes]] | None) -> None:
        """A request (or the transaction ``queued``) carried to the node that leads its keys
        reads them there: they are remembered here, where this client's invalidations come from
        (its node applies every change of the keys' group)."""
        tracker = self.broker.keyspaces.tracker
        if isinstance(tracker, Tracker):
            for request in queued if queued is not None else [args]:
                tracker.remember(self, request[0].lower(), request)

    def _refuse_on_oom(self, command: Command[RespConnection], oom: str) -> bool:
        """Past ``maxmemory``: whether ``command`` is refused, as redis-server refuses it (one that
        may add data; inside MULTI any but EXEC, DISCARD, QUIT and RESET, the transaction then
        failing; an EXEC of such a command ends its transaction)."""
        transaction = self.transaction
        if transaction.queued is None:
            self.reject(command, oom)  # (only a command that may add data gets here)
            return True
        if command.key == b"exec":
            if not transaction.denyoom:
                return False
            transaction.discard()
            self.error(f"-EXECABORT Transaction discarded because of: {oom.removeprefix('-')}")
            return True
        if command.ends_multi:
            return False
        transaction.failed = True
        self.reject(command, oom)
        return True

    # -- output ----------------------------------------------------------------------------------

    def reply(self, data: bytes) -> None:
        """A command's reply, unless CLIENT REPLY silenced it (or EXEC collects it)."""
        if data[0] == 45:  # "-"
            self._failed = True
            self.broker.redis_stats.error_reply(data)
        if self._captured is not None:
            self._captured.append(data)
        elif not (self._reply_off or self._skip):
            self._send(data)
            if self._capped and self.pending_bytes > UNAUTHENTICATED_OUTPUT:
                self._cut_off()

    def error(self, text: str) -> None:
        """An error reply: ``text`` after ``-ERR``, or a whole line starting with ``-CODE``."""
        self.reply(error(text))

    def send(self, data: bytes) -> None:
        """Bytes that are no command's reply (subscription acknowledgements): CLIENT REPLY does not
        silence them, but inside EXEC they are among its replies, as redis-server writes them
        (each adds to the array EXEC announced, one item per command)."""
        if self._captured is not None:
            self._captured.append(data)
        else:
            self._send(data)

    def _send(self, data: bytes) -> None:
        in_order = self.in_order
        if in_order.holding is not None:
            in_order.holding += data
        elif in_order.count:
            in_order.add(data)
        else:
            super()._send(data)

    def _send_now(self, data: bytes) -> None:
        super()._send(data)

    def hold_output(self) -> None:
        """Keep what the command about to run sends (``release_output`` hands it over)."""
        self.in_order.holding = bytearray()

    def release_output(self) -> bytes:
        """What was sent since ``hold_output``; sending goes on as usual."""
        held, self.in_order.holding = self.in_order.holding, None
        return bytes(held) if held is not None else b""

    def reply_later(self, settle: Settle, reply: bytes) -> None:
        """Send ``reply`` once ``settle`` answered; what the connection sends meanwhile waits
        behind it, and its next requests run (``in_order``; the I/O side calls ``drain``). A
        reply CLIENT REPLY silences now stays silent, whatever ``settle`` answers."""
        if self._reply_off or self._skip:
            settle = partial(_silent, settle)
        self.in_order.defer(settle, reply)
        self.on_awaiting()

    async def drain(self) -> None:
        """Send what waits in ``in_order``, in order, as it settles."""
        await self.in_order.drain(self._send_now)

    def output_sent(self, data: bytearray, written: int) -> None:
        self.broker.redis_stats.net_output += written
        super().output_sent(data, written)

    def set_limits(self, hard: int, soft: int, seconds: int) -> None:
        """New output limits (CONFIG SET client-output-buffer-limit's pubsub class)."""
        self.hard_limit = hard
        self.stall_at = soft
        self.soft_seconds = float(seconds)

    def set_reply_mode(self, mode: bytes) -> bool:
        """CLIENT REPLY's ``on``, ``off`` or ``skip`` (the next command's reply; not while off);
        False for any other word."""
        if mode == b"on":
            self._reply_off = self._skip_next = False
            self._skip = False
        elif mode == b"off":
            self._reply_off = True
        elif mode == b"skip":
            if not self._reply_off:
                self._skip_next = True
        else:
            return False
        return True

    def push_out(self, data: bytes) -> None:
        """Out-of-band data that is no delivery (an invalidation of CLIENT TRACKING)."""
        self._push(data, 0)

    def _push(self, data: bytes, size: int) -> bool:
        """Queue a delivery; False when it made the connection a slow consumer (closed)."""
        if self._running:
            self._held += data
        elif self.in_order.count:
            self.in_order.add(data)
        else:
            self.outbound += data
            if not self._woken:
                self._woken = True
                self._wake()
        self.out_msgs += 1
        self.out_bytes += size
        pending = len(self.outbound) + self._writing + len(self._held) + self.in_order.held_bytes
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

    def capture(self, command: Command[RespConnection], args: list[bytes], replies: list[bytes]) -> None:
        """Run ``command`` (already checked by the caller: a command EXEC runs, or a script's
        ``redis.call``) with its reply added to ``replies`` instead of sent; the keys it reads are
        remembered for tracking, and a blocking read answers at once (``may_block``)."""
        self._captured = replies
        try:
            self._call(command, args)
            self._remember(command, args)
        finally:
            self._captured = None

    def run_captured(self, command: Command[RespConnection], args: list[bytes]) -> bytes:
        """``capture`` for a script's ``redis.call``: the reply, and the command named the last."""
        replies: list[bytes] = []
        self.last_command = command.name
        self.capture(command, args, replies)
        return b"".join(replies)

    @property
    def may_block(self) -> bool:
        """Whether a blocking read may wait (not inside EXEC, where it answers as if timed out)."""
        return self._captured is None

    def block(
        self, waits: Sequence[tuple[bytes, Condition]], *, timeout_ms: int, retry: list[bytes]
    ) -> None:
        """Wait until a write to one of the keys meets the condition given with it, then run
        ``retry``; answer a null array if ``timeout_ms`` (0: never) passes first. A retry that
        blocks again keeps the deadline."""
        deadline = self._clock() + timeout_ms / 1000 if timeout_ms else math.inf
        self.blocking.block(self.database, waits, self, deadline=deadline, retry=retry)

    def wake(self) -> None:
        """A write met what this connection waits for on one of its keys: run the read again."""
        blocking = self.blocking
        blocked = blocking.end(self)
        if blocked is None or self.closing is not None:
            return
        blocking.retry_deadline = blocked.deadline
        self._mark = perf_counter_ns()
        try:
            self._run(blocked.args)
        finally:
            blocking.retry_deadline = -1.0
        self._run_buffered()
        self._commit()  # (when the retry blocked again, or requests wait on something else)
        if self.awaiting is not None:  # (a replicated read's commit: nobody's input awaits it)
            self.on_awaiting()

    def deadline_due(self) -> None:
        """The timer fired: a blocked read past its deadline answers a null array."""
        blocked = self.blocking.read
        if blocked is not None and self._clock() >= blocked.deadline:
            self.unblock(as_error=False)

    def unblock(self, *, as_error: bool) -> bool:
        """End a blocked read early (its timeout, or CLIENT UNBLOCK); whether one was blocked."""
        blocked = self.blocking.end(self)
        if blocked is None:
            return False
        command = self.table.find(blocked.args[0])
        if command is not None:
            self._mark = perf_counter_ns()
            self._failed = as_error
            self._count(command.name, blocked.args)
        if as_error:
            self._send(error("-UNBLOCKED client unblocked via CLIENT UNBLOCK"))
        else:
            self._send(self.writer.null_array)
        self._run_buffered()
        return True

    # -- signing in and RESET --------------------------------------------------------------------

    def switch_user(self, user: UserConfig) -> None:
        """Sign in as ``user``: switching to another account drops the subscriptions of the old one."""
        account = self.broker.account(user.account)
        if account is not self.account:
            self._drop_all()
            self.account = account
        self._set_user(user)

    def reset(self) -> None:
        """RESET: as if newly connected (without a new id)."""
        self.stop_monitoring()
        self._drop_all()
        self._stop_tracking()
        self.transaction.discard()
        self.writer = RESP2
        self.db = 0
        self.options["name"] = ""
        self._reply_off = self._skip_next = self.readonly = False
        user = self.broker.auth.without_credentials()
        account = self.broker.account(user.account if user else "$G")
        self.account = account
        self._set_user(user)

    # -- timers (driven by the I/O side) ---------------------------------------------------------

    def limits_due(self) -> None:
        """The output-limit timer fired: close a subscriber that stayed above the soft limit."""
        if self.closing is not None:
            return
        if self.pending_bytes + self.in_order.held_bytes <= self.stall_at:
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
        self.stop_monitoring()
        self._drop_all()
        self._stop_tracking()
        self.blocking.end(self)
        self.transaction.unwatch()

    def _stop_tracking(self) -> None:
        tracker = self.broker.keyspaces.tracker
        if self.tracking is not None and isinstance(tracker, Tracker):
            tracker.disable(self)
        self.tracking = None

    # -- introspection ---------------------------------------------------------------------------

    def start_monitoring(self) -> None:
        """MONITOR: be fed every command the node runs, from now until RESET or the end."""
        if not self.monitoring:
            self.monitoring = True
            self.broker.redis_stats.monitors.append(self)

    def stop_monitoring(self) -> None:
        if self.monitoring:
            self.monitoring = False
            self.broker.redis_stats.monitors.remove(self)


Handler = Callable[[RespConnection, list[bytes]], None]
"""A command's implementation: the connection and the request's arguments (the name first), its
arity already checked; it answers through ``RespConnection.reply`` and ``RespConnection.error``."""


async def _silent(settle: Settle, reply: bytes) -> bytes:
    """What a silenced reply sends once ``settle`` answered: nothing."""
    await settle(reply)
    return b""
