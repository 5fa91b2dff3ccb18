"""Replies that wait their turn: a connection whose reply must wait for something (a replicated
write's commit) goes on with the requests after it, and everything it sends after that reply
(later replies, pushes) waits behind it, so its client receives replies in request order while the
node works on many of its requests at once (a pipeline of writes becomes one batch of proposals).

``InOrder`` holds, in order, what is waiting: a reply with what settles it (an awaitable that
answers the bytes to send: the reply, or an error in its place), or bytes that only wait for what
is before them. The connection appends to it while it is not empty (``RespConnection._send``), the
I/O side sends its items as they settle (``drain``). ``holding`` collects what one command sends,
for the replicated-keys path to hold it back until the command's change is committed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

__all__ = ["MAX_WAITING", "InOrder", "Settle"]

Settle = Callable[[bytes], Awaitable[bytes]]
"""Given a reply, waits until it may be sent: the bytes to send (the reply, or an error)."""

MAX_WAITING: Final = 1024
"""Items waiting, past which the connection runs no more of its requests until they are sent."""


class InOrder:
    """A connection's output that waits its turn (see the module docstring)."""

    __slots__ = ("_queue", "count", "held_bytes", "holding")

    def __init__(self) -> None:
        self._queue: deque[tuple[Settle | None, bytes]] | None = None
        """(Made for the first item: most connections never need one.)"""
        self.count = 0
        """Items waiting (a plain field: the connection reads it for every reply it sends)."""
        self.held_bytes = 0
        """Bytes waiting (they count toward the connection's output limits)."""
        self.holding: bytearray | None = None
        """What the running command sent, while the replicated-keys path holds it."""

    def _items(self) -> deque[tuple[Settle | None, bytes]]:
        if self._queue is None:
            self._queue = deque()
        return self._queue

    def defer(self, settle: Settle, reply: bytes) -> None:
        """``reply`` goes once ``settle`` answered (and what is before it went)."""
        self._items().append((settle, reply))
        self.count += 1
        self.held_bytes += len(reply)

    def add(self, data: bytes) -> None:
        """``data`` goes once what is before it went."""
        self._items().append((None, data))
        self.count += 1
        self.held_bytes += len(data)

    async def drain(self, send: Callable[[bytes], None]) -> None:
        """Send every item, in order, each once settled; items added meanwhile too."""
        queue = self._items()
        while queue:
            settle, data = queue[0]
            size = len(data)
            if settle is not None:
                data = await settle(data)
            queue.popleft()
            self.count -= 1
            self.held_bytes -= size
            send(data)
