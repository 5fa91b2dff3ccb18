"""The node on trio: accepts connections from any ``trio.abc.Listener`` and moves their bytes.

Each connection runs three tasks: a reader feeding ``ClientConnection.receive_data`` (through the
node's ``Flusher``, which writes what that input produced straight to the sockets it reached), a
writer for output that had to wait, and its timers (ping, auth timeout). The protocol decisions all
live in ``node.nats.client``; this module only moves bytes and keeps time.

The server also keeps what its INFO says of the cluster (``connect_urls``, see ``node.nats.discovery``),
telling the clients that take INFO updates whenever it changes, and runs lame duck mode: it stops
accepting, tells its clients (``ldm``) so they can move elsewhere, and after a grace period closes
them a few at a time, spread over ``lame_duck_duration``, before it stops for good.

With TLS configured, a client gets its INFO in the clear and then starts TLS, as nats-server's clients
expect; the handshake runs in the connection's own task, with a deadline.
"""

from __future__ import annotations

import logging
import math
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import attrs
import trio

from node.broker import Broker
from node.config.options import Config
from node.connection import Connection, Reason
from node.data.keyspaces import SWEEP_SECONDS
from node.nats.client import ClientConnection
from node.nats.discovery import connect_urls
from node.nats.protocol import writer as w
from node.redis_listeners import RedisListeners
from node.resp.commands.scripting import answer_while_busy
from node.resp.commands.table import COMMANDS
from node.resp.connection import RespConnection
from node.resp.writer import error
from transport.sessions import READ_SIZE, Flusher, Session, contain
from transport.tls import TlsError, handshake, peer_names, server_context, start_after
from transport.wake_order import keep_wake_order

__all__ = ["ClosingPace", "Server", "closing_pace"]

log = logging.getLogger("pubmesh")

FIRST_PING = 2.0
"""The first ping comes soon after connecting, to measure the round trip (as nats-server does)."""
SHUTDOWN_GRACE = 2.0
KEY_SWEEP_INTERVAL = 0.1
"""Seconds between sweeps for expired Redis keys (redis-server's ``hz`` of 10)."""
KEY_SWEEP_PAUSE = SWEEP_SECONDS / 2
"""The pause after a sweep that ran out of time, before the next: while expired keys pile up,
sweeping takes up to two thirds of the time (redis-server's slow and fast expiry cycles together
take as much), in slices short enough that clients served in between hardly notice."""
TIMERS_LINGER = 1.0
"""Seconds a Redis connection's timers run on with nothing to time before they end."""
VERIFICATIONS = 2
"""bcrypt checks run at once (each keeps a core busy for tens of milliseconds); more wait their turn."""
STALL_MAX = 0.01
"""The longest a producer waits per read for congested consumers to drain (then it carries on,
and a consumer that never drains reaches its pending limit and is cut off)."""
LAME_DUCK_MIN_PAUSE = 0.001
"""The shortest pause between batches of clients closed in lame duck mode: with more clients than
that allows, several close at each step."""
LAME_DUCK_MAX_PAUSE = 1.0
"""The longest pause between clients closed in lame duck mode (a few clients need not wait for
the whole duration)."""


@attrs.frozen
class ClosingPace:
    """How lame duck mode closes clients: ``batch`` at a time, with pauses of ``pause`` seconds
    between batches (each a random time from half of it to all of it)."""

    batch: int
    pause: float


def closing_pace(clients: int, duration: float, grace: float) -> ClosingPace:
    """Spread closing ``clients`` over what is left of ``duration`` after ``grace`` (at least a
    second), as nats-server does."""
    spread = duration - grace if duration > grace else 1.0
    pause = spread / max(clients, 1)
    if pause < LAME_DUCK_MIN_PAUSE:
        steps = max(1, int(spread / LAME_DUCK_MIN_PAUSE))
        return ClosingPace(math.ceil(clients / steps), LAME_DUCK_MIN_PAUSE)
    return ClosingPace(1, min(pause, LAME_DUCK_MAX_PAUSE))


class Server:
    """One node: the broker plus the tasks serving its connections.

    Args:
        config: the node's configuration.
        broker: the state to serve (made from ``config`` if not given).
    """

    def __init__(self, config: Config, *, broker: Broker | None = None) -> None:
        self.config = config
        self.broker = broker or Broker(config)
        self.stopping = trio.Event()
        """Set once ``shutdown`` is called."""
        self.in_lame_duck = False
        self._stop_accepting = trio.Event()
        self._lame_duck_scope: trio.CancelScope | None = None
        self.own_urls: tuple[str, ...] = ()
        """Where this node takes clients (``host:port``), as it advertises itself to them."""
        self._peer_urls: list[str] = []
        self._clustered = False
        """Whether peers ever advertised client URLs (only then does INFO carry the node's own)."""
        self._handlers = 0  # connection tasks still running
        self._handler_done = trio.Event()
        self.flusher = Flusher()
        self._redis_sessions: set[Session] = set()
        self._timing: dict[Session, trio.Event] = {}
        """Redis connections whose timers run (``_redis_timers``), each with what wakes them."""
        self._handler_nursery: trio.Nursery | None = None
        self._redis: RedisListeners | None = None
        self.broker.scripts.while_busy = self._serve_while_busy
        self._tls = server_context(config.tls) if config.tls is not None else None
        self._verifications = trio.CapacityLimiter(VERIFICATIONS)

    async def serve(
        self,
        listeners: Sequence[trio.abc.Listener[Any]],
        *,
        redis: Sequence[trio.abc.Listener[Any]] = (),
        task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve clients from ``listeners`` until ``shutdown`` is called (or the task is cancelled).

        Connections are served in the order their input arrived (``transport.wake_order``)."""
        keep_wake_order()
        async with trio.open_nursery() as handlers:
            self._handler_nursery = handlers
            async with trio.open_nursery() as acceptors:
                await acceptors.start(
                    partial(trio.serve_listeners, self.handle, list(listeners), handler_nursery=handlers)
                )
                if redis:
                    self._serve_redis_listeners(redis, acceptors, handlers)
                    acceptors.start_soon(self._keep_keys)
                    handlers.start_soon(self._check_redis_limits)
                task_status.started(listeners)
                await self._stop_accepting.wait()
                acceptors.cancel_scope.cancel()
            if not self.stopping.is_set():
                with trio.CancelScope() as self._lame_duck_scope:
                    await self._close_gradually()
                self.stopping.set()
            for client in list(self.broker.clients.values()):
                client.close(Reason.SHUTDOWN)
            # Give connections a moment to flush what they still hold, then cut them off.
            with trio.move_on_after(SHUTDOWN_GRACE):
                while self._handlers:
                    self._handler_done = trio.Event()
                    await self._handler_done.wait()
            handlers.cancel_scope.cancel()

    def _serve_redis_listeners(
        self, redis: Sequence[trio.abc.Listener[Any]], acceptors: trio.Nursery, handlers: trio.Nursery
    ) -> None:
        """Accept Redis clients on ``redis``; CONFIG SET port may move them
        (``broker.redis_listeners``)."""
        sockets = [listener for listener in redis if isinstance(listener, trio.SocketListener)]
        if len(sockets) != len(redis):  # (listeners of another kind: served as given, never moved)
            acceptors.start_soon(
                partial(trio.serve_listeners, self.handle_redis, list(redis), handler_nursery=handlers)
            )
            return
        host = (self.config.redis.host if self.config.redis else "") or self.config.host
        self._redis = self.broker.redis_listeners = RedisListeners(host, sockets, self.handle_redis)
        self._redis.start(acceptors, handlers)

    def shutdown(self) -> None:
        """Stop accepting, close every connection (flushing what it had), and let ``serve`` return."""
        self.stopping.set()
        self._stop_accepting.set()
        if self._lame_duck_scope is not None:
            self._lame_duck_scope.cancel()

    def lame_duck(self) -> None:
        """Enter lame duck mode: stop accepting clients, tell those connected (INFO with ``ldm``
        and without this node's URLs) to go elsewhere, close them gradually, then shut down."""
        if self.in_lame_duck or self.stopping.is_set():
            return
        log.info("Entering lame duck mode, stop accepting new clients")
        self.in_lame_duck = True
        self._stop_accepting.set()

    async def _close_gradually(self) -> None:
        config = self.config
        clients = list(self.broker.clients.values())
        if not clients:
            return
        self._set_connect_urls()
        for client in clients:
            client.update_info(lame_duck=True)
        await trio.sleep(config.lame_duck_grace_period)
        log.info("Closing existing clients")
        pace = closing_pace(len(clients), config.lame_duck_duration, config.lame_duck_grace_period)
        for done, client in enumerate(clients, 1):
            client.close(Reason.SHUTDOWN)
            if done < len(clients) and done % pace.batch == 0:
                await trio.sleep(pace.pause * random.uniform(0.5, 1.0))

    # -- discovery ---------------------------------------------------------------------------

    def advertise(self, peer_urls: list[str]) -> None:
        """The cluster's other nodes now take clients at ``peer_urls``: tell the clients that take
        INFO updates, if that changes what they are told."""
        self._peer_urls = peer_urls
        if self._set_connect_urls():
            for client in list(self.broker.clients.values()):
                client.update_info()

    def _set_connect_urls(self) -> bool:
        """Work out INFO's ``connect_urls`` again: whether they changed. A node that never had
        peers to advertise, or is told not to, gives none; in lame duck mode, only the others'."""
        cluster = self.config.cluster
        self._clustered = self._clustered or bool(self._peer_urls)
        if cluster is None or cluster.no_advertise or not self._clustered:
            urls = []
        else:
            urls = connect_urls(() if self.in_lame_duck else self.own_urls, self._peer_urls)
        changed = urls != self.broker.connect_urls
        self.broker.connect_urls = urls
        return changed

    async def handle(self, stream: trio.abc.Stream) -> None:
        """Serve one NATS client connection until it closes."""
        if await self._refused(stream, w.err("maximum connections exceeded")):
            return
        host, port = _peer(stream)
        secure: trio.SSLStream[trio.abc.Stream] | None = None
        if self._tls is not None:
            stream = secure = trio.SSLStream(stream, self._tls, server_side=True)
        session = Session(stream)
        conn = ClientConnection(
            self.broker,
            self.broker.next_cid(),
            host=host,
            port=port,
            wake=partial(self.flusher.wake, session),
            clock=trio.current_time,
        )
        conn.greeting()

        async def start() -> bool:
            return secure is None or await self._start_tls(secure, conn)

        await self._serve(
            session,
            conn,
            partial(self._timers, conn),
            start,
            after_input=partial(self._after_input, session, conn),
        )

    async def handle_redis(self, stream: trio.abc.Stream) -> None:
        """Serve one Redis (RESP) client connection until it closes."""
        if await self._refused(stream, error("max number of clients reached")):
            self.broker.redis_stats.rejected_connections += 1
            return
        await self._serve_redis(self._redis_session(stream))

    def _redis_session(self, stream: trio.abc.Stream) -> Session:
        """The session of a new Redis connection, counted among those served while a script is
        busy from now on."""
        host, port = _peer(stream)
        session = Session(stream)
        conn = RespConnection(
            self.broker,
            self.broker.next_cid(),
            COMMANDS,
            host=host,
            port=port,
            wake=partial(self.flusher.wake, session),
            clock=trio.current_time,
            limits=self.config.redis,
        )
        conn.set_limits(*self.broker.redis_settings.pubsub_limits)
        local = _local(stream)
        if local is not None:
            conn.local_address, conn.fd = local
        session.conn = conn
        conn.blocking.on_deadline = conn.on_awaiting = partial(self._time_redis, session, conn)
        self._redis_sessions.add(session)
        return session

    async def _serve_redis(self, session: Session) -> None:
        conn = session.conn
        assert isinstance(conn, RespConnection)
        try:
            await self._serve(session, conn, None, after_input=partial(self._after_input, session, conn))
        finally:
            self._redis_sessions.discard(session)
            self._timing.pop(session, None)

    def _serve_while_busy(self) -> None:
        """A script is busy on this thread: read what the other Redis clients sent without waiting,
        and answer it at once (``answer_while_busy``); what others were answered before the script
        began, held for a batch (``Flusher``), is sent now too."""
        self.flusher.write_touched()
        running = self.broker.scripts.running
        caller = running.caller if running is not None else None
        self._accept_while_busy()
        for session in list(self._redis_sessions):
            conn = session.conn
            if (
                session.fd < 0
                or conn is caller
                or not isinstance(conn, RespConnection)
                or conn.closing is not None
                or conn.blocking.read is not None
            ):
                continue
            try:
                data = os.read(session.fd, READ_SIZE)
            except OSError:  # (nothing to read, or the socket failed: its reader finds out later)
                continue
            if data:
                answer_while_busy(conn, data)
                session.write_now()

    def _accept_while_busy(self) -> None:
        """Take the Redis clients waiting on a plain socket listener now (redis-server accepts
        them while a script is busy and answers them BUSY): their sessions are served like the
        others', and their tasks start once the script has ended."""
        if self._handler_nursery is None or self.broker.at_connection_limit():
            return
        for listener in self._redis.listeners if self._redis is not None else ():
            if listener.socket.fileno() < 0:
                continue
            listening = socket.socket(fileno=listener.socket.fileno())
            try:
                accepted, _ = listening.accept()
            except OSError:  # (nobody waiting, or the accept failed: the listener's task retries)
                continue
            finally:
                listening.detach()
            stream = trio.SocketStream(trio.socket.from_stdlib_socket(accepted))
            self._handler_nursery.start_soon(self._serve_redis, self._redis_session(stream))

    async def _refused(self, stream: trio.abc.Stream, refusal: bytes) -> bool:
        """Whether the node is at its connection limit (then the newcomer is told so and cut off)."""
        if not self.broker.at_connection_limit():
            return False
        with trio.move_on_after(1):
            await stream.send_all(refusal)
        await trio.aclose_forcefully(stream)
        return True

    async def _serve(
        self,
        session: Session,
        conn: Connection,
        timers: Callable[[], Awaitable[None]] | None,
        start: Callable[[], Awaitable[bool]] | None = None,
        *,
        after_input: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Run a client connection of either protocol: counted, served, then retired."""
        session.conn = conn
        self.broker.add_client(conn)
        log.debug("%s - client connection created", conn.describe())
        self._handlers += 1
        try:
            if start is not None and not await start():
                return
            assert self._handler_nursery is not None  # (clients are served only while ``serve`` runs)
            await session.run(
                self.flusher,
                self._handler_nursery,
                write_deadline=self.config.write_deadline,
                timers=timers,
                after_input=after_input or self._stall_if_congested,
                settled=partial(self._settled, conn),
            )
        finally:
            conn.close(Reason.SHUTDOWN)  # a no-op unless cancelled from outside
            conn.retire()
            await trio.aclose_forcefully(session.stream)
            self._handlers -= 1
            self._handler_done.set()
            self.flusher.wrote.set()
            log.debug("%s - client connection closed: %s", conn.describe(), conn.closing)

    async def _keep_keys(self) -> None:
        """Reclaim expired keys nobody reads: a short sweep ten times a second, and while sweeps
        run out of time with expired keys left, one after each ``KEY_SWEEP_PAUSE`` (clients are
        served in between); each time, count the memory of the keys changed since
        (``Keyspaces.settle``) and, while ``maxmemory`` is set, measure the clients' output
        buffers (part of the memory it limits)."""
        keyspaces = self.broker.keyspaces
        while True:
            await trio.sleep(KEY_SWEEP_PAUSE if keyspaces.behind else KEY_SWEEP_INTERVAL)
            keyspaces.sweep(time.time_ns() // 1_000_000)
            self.broker.redis_stats.sample(time.monotonic())
            keyspaces.settle()
            if keyspaces.maxmemory:
                keyspaces.measure_output(self.broker.pending_output())

    def _time_redis(self, session: Session, conn: RespConnection) -> None:
        """Something a Redis connection's timers follow has changed (a blocked read's deadline,
        work left to await, a reply waiting for its commit): wake them, or start them."""
        moved = self._timing.get(session)
        if moved is not None:
            moved.set()
        elif session.start(partial(self._redis_timers, session, conn)):
            self._timing[session] = trio.Event()

    async def _redis_timers(self, session: Session, conn: RespConnection) -> None:
        """A Redis connection's timers, while it has something to time: a blocked read's deadline
        when it comes (it moves whenever the connection blocks or unblocks), work a served blocked
        read left (awaited: ``_settle``), and replies that wait for their commits (sent in order as
        they settle: ``RespConnection.drain``). Started by the first of those; they end once none
        was left for ``TIMERS_LINGER`` seconds, so an idle connection holds no task for them (its
        output limit is checked by ``_check_redis_limits``)."""
        try:
            while True:
                moved = self._timing[session] = trio.Event()
                if not conn.in_order.count and (conn.awaiting is None or conn.settling):
                    deadline = conn.blocking.deadline
                    linger = deadline == math.inf
                    with trio.move_on_at(trio.current_time() + TIMERS_LINGER if linger else deadline):
                        await moved.wait()  # (work left while this was busy is done at once)
                    if linger and not moved.is_set() and conn.awaiting is None:
                        return
                if conn.awaiting is not None:
                    await self._settle(session, conn)
                while conn.in_order.count:
                    await conn.drain()
                    self.flusher.process(session, b"")  # (requests held at ``MAX_WAITING`` run on)
                    session.write_now()
                conn.deadline_due()
        finally:
            del self._timing[session]

    async def _check_redis_limits(self) -> None:
        """Once a second, every Redis client's output against its soft limit (``limits_due``)."""
        while True:
            await trio.sleep(1.0)
            for session in list(self._redis_sessions):
                conn = session.conn
                assert isinstance(conn, RespConnection)
                conn.limits_due()

    async def _start_tls(self, stream: trio.SSLStream[trio.abc.Stream], conn: ClientConnection) -> bool:
        """Whether the client completed a TLS handshake in time: after taking the INFO in the clear,
        or (``handshake_first``) before the INFO, which then goes out over TLS."""
        tls = self.config.tls
        assert tls is not None
        greeting = bytearray() if tls.handshake_first else conn.take_output()
        try:
            if tls.handshake_first:
                await handshake(stream, tls)
            else:
                await start_after(stream, bytes(greeting), tls)
        except TlsError as exc:
            log.error("%s - %s", conn.describe(), exc)
            conn.close(Reason.TLS_HANDSHAKE, flush=False)
            return False
        finally:
            conn.output_sent(greeting, len(greeting))
        conn.tls_names = peer_names(stream)
        return True

    async def _after_input(self, session: Session, conn: Connection) -> None:
        """Run a sign-in's bcrypt check in a worker thread (the connection reads nothing more
        meanwhile), then let the connection carry on with what it has read, which may hold another
        sign-in; likewise await the work a command left (``Connection.awaiting``); and pause for
        congested consumers."""
        while (verifying := conn.verifying) is not None and not verifying.done:
            check = verifying.check
            user = await trio.to_thread.run_sync(
                check.verify, limiter=self._verifications, abandon_on_cancel=True
            )
            self.broker.auth.remember(check, user)
            verifying.done = True
            self.flusher.process(session, b"")
        await self._settle(session, conn)
        await self._stall_if_congested()

    def _settled(self, conn: Connection) -> bool:
        """Whether ``_after_input`` would return at once for ``conn`` (no sign-in being checked,
        no work a command left, no congested consumer to pause for): its reader's input may then
        be handled in its place (``Session.run``)."""
        verifying = conn.verifying
        return (
            (verifying is None or verifying.done)
            and (conn.awaiting is None or conn.settling)
            and not self.broker.congested
        )

    async def _settle(self, session: Session, conn: Connection) -> None:
        """Await the work commands left (``Connection.awaiting``: a replicated write's commit, a
        read's barrier), then let the connection carry on with its input, which may leave more.
        One task at a time: the connection's reader, or its timers when a blocked read another
        client's write served left the work."""
        if conn.settling:
            return  # (the other task loops until none is left)
        conn.settling = True
        try:
            while (awaiting := conn.awaiting) is not None:  # (a write's commit, a read's barrier)
                try:
                    await awaiting()  # (a read's barrier then runs the read: inside the boundary too)
                except Exception as exc:
                    conn.awaiting = None
                    contain(conn, exc)
                    return
                if conn.awaiting is awaiting:  # (else it left more: a read it ran may write, as
                    conn.awaiting = None  # EXEC; or a served blocked read did meanwhile)
                self.flusher.process(session, b"")
                session.write_now()  # (a reply held back may not have woken the writer)
        finally:
            conn.settling = False

    async def _stall_if_congested(self) -> None:
        """Pause a producer whose messages pushed consumers (clients, routes, gateways) past their
        stall threshold."""
        congested = self.broker.congested
        if not congested:
            return
        with trio.move_on_after(STALL_MAX):
            while any(c.closing is None and c.pending_bytes > c.stall_at for c in congested):
                self.flusher.wrote = trio.Event()
                await self.flusher.wrote.wait()
        congested.clear()

    async def _timers(self, conn: ClientConnection) -> None:
        config = self.config
        async with trio.open_nursery() as nursery:
            if conn.awaiting_connect:
                nursery.start_soon(self._auth_timer, conn)
            delay = min(config.ping_interval, FIRST_PING) * (1 + random.random() / 5)
            while True:
                await trio.sleep(delay)
                conn.ping_due()
                delay = config.ping_interval

    async def _auth_timer(self, conn: ClientConnection) -> None:
        await trio.sleep(self.config.auth_timeout)
        conn.auth_expired()


def _peer(stream: trio.abc.Stream) -> tuple[str, int]:
    if isinstance(stream, trio.SocketStream):
        try:
            host, port, *_ = stream.socket.getpeername()
        except OSError:
            return "", 0
        return str(host), int(port)
    return "", 0


def _local(stream: trio.abc.Stream) -> tuple[str, int] | None:
    """The address a client connected to, as ``host:port``, and the socket's descriptor."""
    if isinstance(stream, trio.SocketStream):
        try:
            host, port, *_ = stream.socket.getsockname()
        except OSError:
            return None
        return f"{host}:{port}", stream.socket.fileno()
    return None
