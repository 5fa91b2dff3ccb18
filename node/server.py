"""The node on trio: accepts connections from any ``trio.abc.Listener`` and moves their bytes.

Each connection runs three tasks: a reader feeding ``ClientConnection.receive_data``, a writer that
sends whatever accumulated in its outbound buffer (one ``send_all`` per batch, however many messages
arrived meanwhile), and its timers (ping, auth timeout). The protocol decisions all live in
``node.client``; this module only moves bytes and keeps time.

Handing output from the reader that produced it to another connection's writer task costs a trip
through the scheduler, about 40 µs per hop on a small machine, which is most of a request's round
trip. So a reader writes what its chunk of input produced itself, at once, with one non-blocking
write per connection it touched, whenever that connection's writer is idle; only what the socket
does not take goes to the writer task, which waits for room (under the write deadline).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Sequence
from functools import partial
from typing import Any

import trio

from node.broker import Broker
from node.client import ClientConnection, Reason
from node.config import Config
from node.protocol import writer as w

__all__ = ["Server"]

log = logging.getLogger("pubmesh")

READ_SIZE = 1 << 16
FIRST_PING = 2.0
"""The first ping comes soon after connecting, to measure the round trip (as nats-server does)."""
SHUTDOWN_GRACE = 2.0
STALL_MAX = 0.01
"""The longest a producer waits per read for congested consumers to drain (then it carries on,
and a consumer that never drains reaches its pending limit and is cut off)."""


class _Waker:
    """A reusable wake-up flag for one waiting task."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = trio.Event()


class _Session:
    """The I/O side of one client connection: its stream and the state its tasks share."""

    __slots__ = ("busy", "conn", "fd", "stream", "waker")

    def __init__(self, stream: trio.abc.Stream, waker: _Waker) -> None:
        self.stream = stream
        self.waker = waker
        self.conn: ClientConnection  # set once the connection exists
        self.busy = False  # the writer task holds data it has not finished sending
        self.fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1

    def write_now(self) -> None:
        """Write pending output without waiting, if the writer is idle; hand it what is left."""
        conn = self.conn
        if self.fd >= 0 and not self.busy and conn.outbound:
            data = conn.take_output()
            try:
                written = os.write(self.fd, data)
            except BlockingIOError:
                written = 0
            except OSError:
                conn.close(Reason.WRITE_ERROR, flush=False)
                written = len(data)
            conn.output_sent(data, written)
        if conn.outbound or conn.closing is not None:
            self.waker.set()


class Server:
    """One node: the broker plus the tasks serving its connections.

    Args:
        config: the node's configuration.
        broker: the state to serve (made from ``config`` if not given).
    """

    def __init__(self, config: Config, *, broker: Broker | None = None) -> None:
        self.config = config
        self.broker = broker or Broker(config)
        self._shutdown = trio.Event()
        self._handlers = 0  # connection tasks still running
        self._handler_done = trio.Event()
        self._wrote = trio.Event()  # set after every write, for producers stalled on a consumer
        # While a reader processes input, connections given output are collected here and written
        # by that reader when it is done, instead of waking their writer tasks.
        self._in_batch = False
        self._touched: list[_Session] = []

    async def serve(
        self,
        listeners: Sequence[trio.abc.Listener[Any]],
        *,
        task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve clients from ``listeners`` until ``shutdown`` is called (or the task is cancelled)."""
        async with trio.open_nursery() as handlers:
            async with trio.open_nursery() as acceptors:
                await acceptors.start(
                    partial(trio.serve_listeners, self.handle, list(listeners), handler_nursery=handlers)
                )
                task_status.started(listeners)
                await self._shutdown.wait()
                acceptors.cancel_scope.cancel()
            for client in list(self.broker.clients.values()):
                client.close(Reason.SHUTDOWN)
            # Give connections a moment to flush what they still hold, then cut them off.
            with trio.move_on_after(SHUTDOWN_GRACE):
                while self._handlers:
                    self._handler_done = trio.Event()
                    await self._handler_done.wait()
            handlers.cancel_scope.cancel()

    def shutdown(self) -> None:
        """Stop accepting, close every connection (flushing what it had), and let ``serve`` return."""
        self._shutdown.set()

    async def handle(self, stream: trio.abc.Stream) -> None:
        """Serve one client connection until it closes."""
        host, port = _peer(stream)
        broker = self.broker
        if broker.at_connection_limit():
            with trio.move_on_after(1):
                await stream.send_all(w.err("maximum connections exceeded"))
            await trio.aclose_forcefully(stream)
            return
        session = _Session(stream, _Waker())
        conn = ClientConnection(
            broker, broker.next_cid(), host=host, port=port, wake=partial(self._wake, session)
        )
        session.conn = conn
        broker.add_client(conn)
        log.debug("%s:%d - cid:%d - client connection created", host, port, conn.cid)
        conn.greeting()
        self._handlers += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read, session)
                nursery.start_soon(self._timers, conn)
                await self._write(session)
                nursery.cancel_scope.cancel()
        finally:
            conn.close(Reason.SHUTDOWN)  # a no-op unless cancelled from outside
            await trio.aclose_forcefully(stream)
            self._handlers -= 1
            self._handler_done.set()
            self._wrote.set()
            log.debug(
                "%s:%d - cid:%d - client connection closed: %s", host, port, conn.cid, conn.closing
            )

    def _wake(self, session: _Session) -> None:
        """A connection has output: note it for the reader at work, or wake its writer."""
        if self._in_batch:
            self._touched.append(session)
        else:
            session.waker.set()

    def _process(self, conn: ClientConnection, data: bytes) -> None:
        """Feed one read to a connection, then write what it produced for everyone it reached."""
        self._in_batch = True
        try:
            conn.receive_data(data)
        finally:
            self._in_batch = False
            touched, self._touched = self._touched, []
            for session in touched:
                session.write_now()

    async def _read(self, session: _Session) -> None:
        conn = session.conn
        try:
            while conn.closing is None:
                data = await session.stream.receive_some(READ_SIZE)
                if not data:
                    conn.close(Reason.CLIENT_CLOSED)
                    return
                self._process(conn, bytes(data))
                if self.broker.congested:
                    await self._stall()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            conn.close(Reason.READ_ERROR)

    async def _stall(self) -> None:
        """Pause a producer whose messages pushed consumers past their stall threshold."""
        congested = self.broker.congested
        with trio.move_on_after(STALL_MAX):
            while any(c.closing is None and c.pending_bytes > c.stall_at for c in congested):
                self._wrote = trio.Event()
                await self._wrote.wait()
        congested.clear()

    async def _write(self, session: _Session) -> None:
        conn, stream = session.conn, session.stream
        deadline = self.config.write_deadline
        while True:
            if not conn.outbound and conn.closing is None:
                await session.waker.wait()
            data = conn.take_output()
            if data:
                session.busy = True
                try:
                    with trio.fail_after(deadline):
                        await stream.send_all(data)
                    conn.output_sent(data, len(data))
                    self._wrote.set()
                except trio.TooSlowError:
                    self.broker.slow_consumers += 1
                    conn.close(Reason.SLOW_DEADLINE, flush=False)
                    return
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    conn.close(Reason.WRITE_ERROR, flush=False)
                    return
                finally:
                    session.busy = False
            if conn.closing is not None and not conn.outbound:
                return

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
