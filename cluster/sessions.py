"""Moving queued bytes to sockets, for client connections and links between nodes alike.

Each connection has a writer task that waits for output and sends it under a write deadline. But
handing output from the task that produced it to a writer task costs a trip through the scheduler,
about 40 µs per hop on a small machine, which is most of a request's round trip. So a task that
processes input does it inside ``Flusher.process``: every connection that got output meanwhile is
written at once, with one non-blocking write each, whenever its writer is idle; only what a socket
does not take goes to the writer task, which waits for room.

One ``Flusher`` serves a whole node, because a message read from a route is delivered to client
connections and the other way round.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol

import trio

__all__ = ["Flusher", "Session", "Waker"]


class Queue(Protocol):
    """What a session writes from: an ``Outbox`` whose owner can be closed."""

    outbound: bytearray
    closing: str | None

    def take_output(self) -> bytearray: ...

    def output_sent(self, data: bytearray, written: int) -> None: ...

    def close(self, reason: str, *, flush: bool = True) -> None: ...


class Waker:
    """A reusable wake-up flag for one waiting task."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = trio.Event()


class Session:
    """The I/O side of one connection: its stream, its queue, and what its tasks share."""

    __slots__ = ("busy", "fd", "queue", "stream", "waker")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.waker = Waker()
        self.queue: Queue  # set once the protocol side exists (it needs the session to wake it)
        self.busy = False  # the writer task holds data it has not finished sending
        self.fd = stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1

    def write_now(self, write_error: str) -> None:
        """Write pending output without waiting, if the writer is idle; hand it what is left."""
        queue = self.queue
        if self.fd >= 0 and not self.busy and queue.outbound:
            data = queue.take_output()
            try:
                written = os.write(self.fd, data)
            except BlockingIOError:
                written = 0
            except OSError:
                queue.close(write_error, flush=False)
                written = len(data)
            queue.output_sent(data, written)
        if queue.outbound or queue.closing is not None:
            self.waker.set()


class Flusher:
    """Direct writes after each piece of input, writer tasks for the rest; one per node.

    Args:
        write_error: the close reason when a socket write fails.
    """

    def __init__(self, write_error: str = "Write Error") -> None:
        self._write_error = write_error
        self._in_batch = False
        self._touched: list[Session] = []
        self.wrote = trio.Event()
        """Set after every write by a writer task, for producers waiting for consumers to drain."""

    def wake(self, session: Session) -> None:
        """A connection has output: note it for the task at work, or wake its writer."""
        if self._in_batch:
            self._touched.append(session)
        else:
            session.waker.set()

    def process(self, handle: Callable[[bytes], None], data: bytes) -> None:
        """Let ``handle`` act on input, then write what it produced for every connection it reached."""
        self._in_batch = True
        try:
            handle(data)
        finally:
            self._in_batch = False
            touched, self._touched = self._touched, []
            for session in touched:
                session.write_now(self._write_error)

    async def write_loop(
        self, session: Session, deadline: float, on_deadline: Callable[[], None]
    ) -> None:
        """Send a connection's output until it closes; ``on_deadline`` if a write takes too long."""
        queue, stream = session.queue, session.stream
        while True:
            if not queue.outbound and queue.closing is None:
                await session.waker.wait()
            data = queue.take_output()
            if data:
                session.busy = True
                try:
                    with trio.fail_after(deadline):
                        await stream.send_all(data)
                    queue.output_sent(data, len(data))
                    self.wrote.set()
                except trio.TooSlowError:
                    on_deadline()
                    return
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    queue.close(self._write_error, flush=False)
                    return
                finally:
                    session.busy = False
            if queue.closing is not None and not queue.outbound:
                return
