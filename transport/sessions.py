"""Running one connection over a trio stream, for every front door and every link alike.

A ``Session`` is the I/O side of one connection: a reader feeding the protocol side's
``receive_data`` (the session's own task), a writer task for output that had to wait (running only
while some does), and the protocol's timers. An idle connection thus holds one task, its reader,
plus any timers its protocol keeps running. The writer and the timers are tasks of a nursery of the
node's, each in a cancel scope of its own made as it starts (the reader's end, or ``abandon``,
cancels them): a session holds no nursery of its own, which would cost each connection ~1.3 KB.
Nor does the reader of a socket hold a cancel scope: it is stopped through the node's
``transport.readiness`` (its wait raises ``ClosedResourceError``, as with trio's ``notify_closing``).
The protocol side (a ``Connection``: a NATS client, a route or gateway link, any later front door)
decides everything a peer can observe; the session only moves bytes and keeps time.

**Containment.** Whatever is raised while handling one connection's input, timers or output ends
that connection, never the process: the error is logged with the connection's name and handed
to ``Connection.internal_error``, which tells the peer in its protocol's words (or not at all) and
closes. This is the one boundary for every kind of connection; nothing above a session needs its own.

**Direct writes.** Handing output from the task that produced it to a writer task costs a trip
through the scheduler, about 40 µs per hop on a small machine, which is most of a request's round
trip. So input is handled inside ``Flusher.process``: every connection that got output meanwhile is
written at once, with one non-blocking write each, whenever its writer is idle; only what a socket
does not take goes to the writer task, which waits for room and ends once everything is sent (it
ends the session instead once the connection has closed). Sockets that one readiness report names
together are served in place as one batch: their output is written after the last of them
(``transport.readiness``'s notes on serving in place). One ``Flusher`` serves a whole node,
because a message read from a route is delivered to client connections and the other way round.

**Reads.** On a plain socket the reader never yields between reading input and handing it on (a
trio stream yields after a read that found data waiting): input is thus never held by a suspended
task, where nothing else running on the loop could reach it (a Redis script busy on this thread
reads the other clients' sockets itself, and must find there what they sent). It yields before a
read instead, when the input it last handled came without waiting, so a client that keeps sending
takes turns with the others; a connection that had to wait for its input reads again at once,
which costs an idle connection no extra trip through the scheduler. It waits for input through the
node's ``transport.readiness``, which keeps the socket armed in one epoll of the node's (rather than
trio's arming it for each wait) and remembers input that came while the reader was busy. So after
input shorter than a full read, which emptied the socket, the reader waits straight away, without
a read that would find nothing: for a client waiting for each reply, that read (1.9 µs with Python's
exception) came once per request. And while it waits there, its input is read and handled in its
place by the readiness task (``Readiness.wait_readable``'s ``serve``), as long as the protocol side
says nothing would be awaited after it (``settled``: no sign-in being checked, no commit awaited,
no consumer to pause for): the reader is woken only for what needs a task of its own (awaiting,
a full read, the peer's end, an error), so a request costs no trip through the scheduler. With
50 clients each waiting for its reply, that took redis-benchmark's PING from 0.87 to 1.10 of
redis-server's rate.
"""

from __future__ import annotations

import enum
import logging
import math
import os
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Protocol

import trio

from transport.readiness import KEEP, Readiness

__all__ = ["Connection", "Flusher", "Hangup", "Session", "contain"]

log = logging.getLogger("pubmesh")

READ_SIZE = 1 << 16
# (Task names given as text: trio names a task by its function's ``__qualname__``, which a
# compiled method lacks.)
_GUARD = "transport.sessions.Session._guard"
_WRITE = "transport.sessions.Session._write"


class Hangup(enum.Enum):
    """How the transport saw a connection end; each protocol words it its own way."""

    CLOSED_BY_PEER = "closed by peer"
    READ_ERROR = "read error"
    WRITE_ERROR = "write error"
    WRITE_DEADLINE = "write deadline exceeded"


class Connection(Protocol):
    """The protocol side of a connection, as a session drives it (an ``Outbox`` plus input)."""

    @property
    def outbound(self) -> bytearray:
        """Bytes waiting to be written."""
        ...

    @property
    def closing(self) -> str | None:
        """Why the connection is closing, once it is."""
        ...

    def take_output(self) -> bytearray: ...

    def output_sent(self, data: bytearray, written: int) -> None: ...

    def close(self, reason: str, *, flush: bool = True) -> None: ...

    def receive_data(self, data: bytes) -> None:
        """Act on bytes from the peer (raising only on a bug: protocol errors are answered)."""
        ...

    def hangup(self, how: Hangup) -> None:
        """The stream ended or failed: close with this protocol's words for it."""
        ...

    def internal_error(self, exc: Exception) -> None:
        """Handling this connection raised ``exc``: tell the peer as the protocol allows, and close."""
        ...

    def describe(self) -> str:
        """Who this is, for log lines ("127.0.0.1:5000 - cid:7")."""
        ...


def contain(conn: Connection, exc: Exception) -> None:
    """The containment boundary: log what escaped the protocol side and end only this connection."""
    log.error("%s - internal error, closing the connection: %r", conn.describe(), exc, exc_info=exc)
    try:
        conn.internal_error(exc)
    except Exception:  # (even the protocol's own way out failed: hang up without a word)
        log.exception("%s - could not report the internal error", conn.describe())
    conn.close("Internal Error", flush=False)


def _open(conn: Connection) -> bool:
    """Whether ``conn`` has not begun closing. (Asked through a function rather than as
    ``conn.closing is None`` in place: mypy narrows a property after such a test, and a compiled
    build trusts the narrowed type, but handling input may close the connection meanwhile.)"""
    return conn.closing is None


class Session:
    """The I/O side of one connection: its stream, its protocol side, and what its tasks share."""

    __slots__ = (
        "_changed", "_flusher", "_helpers", "_jobs", "_nursery", "_over", "_readiness", "_reading",
        "_settled", "_stopped", "_write_deadline", "_writing", "busy", "conn", "fd", "stream",
    )  # fmt: skip

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.conn: Connection  # set once the protocol side exists (it needs the session to wake it)
        self.busy = False  # the writer task holds data it has not finished sending
        self.fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1
        self._nursery: trio.Nursery | None = None  # (the node's, for the writer and the timers)
        self._jobs: list[Callable[[], Awaitable[None]]] | None = []  # (None: it ran and ended)
        self._helpers: set[trio.CancelScope] | None = None  # (of the writer and timers running)
        self._changed: trio.Event | None = None  # (set as a helper ends, while the end awaits one)
        self._reading: trio.CancelScope | None = None  # (the reader's, without a socket of its own)
        self._stopped = False  # (the reader is to stop: the session is over, or abandoned)
        self._writing = False  # (a writer task runs)
        self._over = False  # (the connection has closed and its output is sent or lost)
        self._flusher: Flusher | None = None
        self._readiness: Readiness | None = None  # (the node's, while it watches the socket)
        self._write_deadline = math.inf
        self._settled: Callable[[], bool] | None = None  # (see ``run``)

    def start(self, job: Callable[[], Awaitable[None]]) -> bool:
        """Run ``job`` beside the reader, inside the containment boundary, until it returns or the
        session ends: now if the session runs, else once it starts; False (never run) once it has
        ended. A protocol side may start timers only while it has something to time, so that an
        idle connection holds no task for them."""
        if self._nursery is not None:
            self._nursery.start_soon(self._helper, partial(self._guard, job), name=_GUARD)
        elif self._jobs is not None:
            self._jobs.append(job)
        else:
            return False
        return True

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
                conn.output_sent(data, len(data))
                conn.hangup(Hangup.WRITE_ERROR)
                self.write_soon()
                return
            conn.output_sent(data, written)
        if conn.outbound or not _open(conn):
            self.write_soon()

    def write_soon(self) -> None:
        """Output waits, or the connection closes: have the writer task see to it (started unless
        it runs; it ends once nothing is left, and ends the session once the connection has
        closed and its output is sent)."""
        if self._writing or self._nursery is None or self._over:
            return  # (not running yet: ``run`` starts it if need be)
        self._writing = True
        self._nursery.start_soon(self._helper, self._write, name=_WRITE)

    def abandon(self) -> None:
        """Stop this session's tasks at once (a writer may be stuck on a socket nobody reads)."""
        self._stop_reading()
        self._cancel_helpers()

    async def run(
        self,
        flusher: Flusher,
        nursery: trio.Nursery,
        *,
        write_deadline: float,
        timers: Callable[[], Awaitable[None]] | None = None,
        after_input: Callable[[], Awaitable[None]] | None = None,
        settled: Callable[[], bool] | None = None,
    ) -> None:
        """Serve the connection until it has closed and flushed (or the session is abandoned).
        The reader is this task; the writer and the timers are tasks of ``nursery`` (the node's,
        living longer than any session), ended before this returns.

        Args:
            write_deadline: seconds one write may take before the peer counts as too slow.
            timers: the protocol's clocks (pings, auth timeout), run beside the reader.
            after_input: awaited after each piece of input (a producer pausing for its consumers).
            settled: whether ``after_input`` would return at once now; given, a parked reader's
                input may be handled in its place (see the module's notes on reads).
        """
        self._flusher, self._write_deadline, self._settled = flusher, write_deadline, settled
        self._nursery, jobs, self._jobs = nursery, self._jobs or [], None
        if timers is not None:
            jobs.insert(0, timers)
        for job in jobs:
            self.start(job)
        try:
            self.write_now()  # (what the connection said before it was served)
            if self.fd >= 0:
                self._readiness = flusher.readiness
                self._readiness.watch(self.fd)
                try:
                    await self._read(flusher, after_input)
                finally:
                    self._readiness.forget(self.fd)
                    self._readiness = None
            else:  # (a stream of another kind: stopped by cancelling its read)
                with trio.CancelScope() as self._reading:
                    if self._stopped:
                        self._reading.cancel()
                    await self._read(flusher, after_input)
            self.write_soon()  # (it has closed: the writer sends what is left, then ends)
            while self._writing:
                await self._until_changed()
        finally:
            self._nursery = None
            self._cancel_helpers()
            while self._helpers:  # (they may still touch the connection, which is retired next)
                await self._until_changed()

    def _stop_reading(self) -> None:
        """Have the reader stop: woken if it waits for input, else before it next would (what it
        awaits after input, ``after_input``, runs to its end)."""
        if self._stopped:
            return
        self._stopped = True
        if self._reading is not None:
            self._reading.cancel()
        elif self._readiness is not None:  # (its wait for input raises ClosedResourceError)
            self._readiness.notify_closing(self.fd)

    def _cancel_helpers(self) -> None:
        for helper in self._helpers or ():
            helper.cancel()

    async def _until_changed(self) -> None:
        """Wait until a writer or timers task of this session ends."""
        self._changed = trio.Event()
        await self._changed.wait()

    async def _helper(self, job: Callable[[], Awaitable[None]]) -> None:
        """Run a writer or timers task of this session in a cancel scope the session's end (or
        ``abandon``) cancels."""
        if self._nursery is None:
            return  # (started as the session ended)
        helpers = self._helpers
        if helpers is None:
            helpers = self._helpers = set()
        scope = trio.CancelScope()
        helpers.add(scope)
        try:
            with scope:
                await job()
        finally:
            helpers.discard(scope)
            if not helpers:
                self._helpers = None
            if self._changed is not None:
                self._changed.set()

    async def _read(self, flusher: Flusher, after_input: Callable[[], Awaitable[None]] | None) -> None:
        """Hand input to the protocol side until the connection closes (or the reader is
        stopped); see the module's notes on reads."""
        conn, fd = self.conn, self.fd
        wait_readable = flusher.readiness.wait_readable
        serve = self._serve_parked if self._settled is not None else None
        try:
            waited = True
            handled: object = None  # (input the readiness handled in this reader's place)
            while _open(conn):
                if handled is None:
                    if not waited:
                        await trio.lowlevel.checkpoint()
                    if fd < 0:
                        data = bytes(await self.stream.receive_some(READ_SIZE))
                    else:
                        waited = False
                        while True:
                            try:
                                data = os.read(fd, READ_SIZE)
                                break
                            except BlockingIOError:
                                if self._stopped:
                                    return
                                await wait_readable(fd)
                                waited = True
                            except OSError as exc:
                                raise trio.BrokenResourceError(str(exc)) from exc
                    if data:
                        flusher.process(self, data)
                else:
                    if isinstance(handled, OSError):
                        raise trio.BrokenResourceError(str(handled)) from handled
                    assert isinstance(handled, bytes)
                    data, handled = handled, None
                if not data:
                    conn.hangup(Hangup.CLOSED_BY_PEER)
                    return
                if after_input is not None:
                    await after_input()
                if len(data) < READ_SIZE and fd >= 0 and _open(conn) and not self._stopped:
                    # (a short read left it empty: see the notes on reads)
                    handled = await wait_readable(fd, serve)
                    waited = True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            if _open(conn):  # (else the reader was stopped: nothing to report)
                conn.hangup(Hangup.READ_ERROR)

    def _serve_parked(self) -> object:
        """The reader's turn, taken by the node's readiness while the reader waits and its socket
        reports input: read and handle the input here. ``KEEP`` when the reader may go on
        waiting (nothing to await after it, nothing more to read); else what the reader goes on
        with: None (it reads itself), the input handled (it awaits ``after_input``, then carries
        on), ``b""`` (the peer's end) or the error the read raised."""
        conn = self.conn
        if not _open(conn) or self._stopped:
            return None
        try:
            data = os.read(self.fd, READ_SIZE)
        except BlockingIOError:
            return KEEP
        except OSError as exc:
            return exc
        if not data:
            return data
        assert self._flusher is not None
        assert self._settled is not None
        self._flusher.process(self, data)
        if len(data) < READ_SIZE and _open(conn) and not self._stopped and self._settled():
            return KEEP
        return data

    async def _guard(self, timers: Callable[[], Awaitable[None]]) -> None:
        try:
            await timers()
        except Exception as exc:
            contain(self.conn, exc)
        if self._nursery is not None:
            self.write_now()  # (they may have closed the connection)

    async def _write(self) -> None:
        """Send what the socket did not take at once, until nothing is left (then this task ends:
        it is started again when needed), or until the connection has closed and its output is
        sent, or sending failed: then the session ends (the reader is stopped, and its end
        cancels the timers)."""
        conn, flusher = self.conn, self._flusher
        assert flusher is not None
        try:
            while True:
                if self.fd >= 0 and conn.outbound:
                    # What fits in the socket goes out at once: nothing stays marked as in the
                    # writer's hands while this task waits for its turn (a direct write must not
                    # wait for it).
                    self.write_now()
                    if not conn.outbound:
                        flusher.wrote.set()
                        await trio.lowlevel.checkpoint()
                data = conn.take_output()
                if data and not await self._send(data):
                    break
                if not conn.outbound:
                    if _open(conn):
                        return
                    break
        except Exception as exc:  # (a bug: it ends this connection only, as a reader's would)
            contain(conn, exc)
        finally:
            self._writing = False
        self._over = True
        self._stop_reading()

    async def _send(self, data: bytearray) -> bool:
        """Send ``data`` whole, waiting for room; False: it failed (the connection hung up)."""
        conn = self.conn
        self.busy = True
        try:
            with trio.fail_after(self._write_deadline):
                await self.stream.send_all(data)
            conn.output_sent(data, len(data))
            assert self._flusher is not None
            self._flusher.wrote.set()
            return True
        except trio.TooSlowError:
            conn.output_sent(data, 0)
            conn.hangup(Hangup.WRITE_DEADLINE)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            conn.output_sent(data, len(data))
            conn.hangup(Hangup.WRITE_ERROR)
        finally:
            self.busy = False
        return False


class Flusher:
    """Direct writes after each piece of input, writer tasks for the rest; one per node."""

    def __init__(self) -> None:
        self._in_batch = False
        self._held = False
        self._touched: list[Session] = []
        self.readiness = Readiness(self._hold)
        """The node's plain sockets, kept armed for input (here because every session is handed
        the node's flusher)."""
        self.wrote = trio.Event()
        """Set after every write by a writer task, for producers waiting for consumers to drain."""

    def wake(self, session: Session) -> None:
        """A connection has output: note it for the task at work, or wake its writer."""
        if self._in_batch:
            self._touched.append(session)
        else:
            session.write_soon()

    def process(self, session: Session, data: bytes) -> None:
        """Hand input to the session's protocol side (inside the containment boundary), then write
        what it produced for every connection it reached."""
        self._in_batch = True
        try:
            session.conn.receive_data(data)
        except Exception as exc:
            contain(session.conn, exc)
        finally:
            if not self._held:
                self._in_batch = False
                self.write_touched()

    def write_touched(self) -> None:
        """Write what the connections reached so far produced (a script busy on this thread has
        it sent meanwhile, as redis-server does while it serves others)."""
        touched, self._touched = self._touched, []
        for reached in touched:
            reached.write_now()

    def _hold(self, on: bool) -> None:
        """The readiness serves several sockets in place: hold what they produce (``on``), or
        write it now that the last one has been served."""
        self._held = self._in_batch = on
        if not on:
            self.write_touched()
