"""One connection's blocking read (XREAD or XREADGROUP with BLOCK), as redis-server keeps a blocked
client (``Blocking``).

``Blocking.block`` puts the connection (the ``Waiter``) on each key the read waits on, with what it
waits for there (``node.data.keyspace``'s ``Database.block``), and keeps the read: the keys, the
command to run again and its deadline on the connection's clock (inf: never) as a ``BlockedRead``.
A read run again after a write woke it, that blocks again, keeps the deadline it had
(``retry_deadline``). ``end`` takes the read off its keys. Whenever a read with a deadline starts or
ends, ``on_deadline`` is called, so that the I/O side's timer follows ``deadline``. Running the read
again, and answering its timeout, are the connection's (``node.resp.connection``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from node.data.keyspace import Condition, Database, Waiter

__all__ = ["BlockedRead", "Blocking"]


class BlockedRead:
    """A blocked read: the keys it waits on, the command to run again, when it gives up."""

    __slots__ = ("args", "db", "deadline", "keys")

    def __init__(self, db: Database, keys: list[bytes], args: list[bytes], deadline: float) -> None:
        self.db = db
        self.keys = keys
        self.args = args
        self.deadline = deadline


class Blocking:
    """One connection's blocked read, if any (see the module's notes)."""

    __slots__ = ("on_deadline", "read", "retry_deadline")

    def __init__(self) -> None:
        self.read: BlockedRead | None = None
        """The blocking read waiting for a write to one of its keys (XREAD ... BLOCK)."""
        self.retry_deadline = -1.0
        """While a read a write woke runs again: its deadline (-1: none runs)."""
        self.on_deadline: Callable[[], None] = _ignore
        """Called when ``deadline`` changes (the I/O side sleeps until it)."""

    @property
    def deadline(self) -> float:
        """When the blocked read times out, on this connection's clock (inf: never, or not blocked)."""
        blocked = self.read
        return blocked.deadline if blocked is not None else math.inf

    def block(
        self,
        db: Database,
        waits: Sequence[tuple[bytes, Condition]],
        waiter: Waiter,
        *,
        deadline: float,
        retry: list[bytes],
    ) -> None:
        """Have ``waiter`` wait on each key of ``db`` for the condition given with it, to run
        ``retry`` then, until ``deadline`` (unless it is a retry: that keeps its own)."""
        if self.retry_deadline >= 0:
            deadline = self.retry_deadline
        for key, until in waits:
            db.block(key, waiter, until)
        self.read = BlockedRead(db, [key for key, _ in waits], retry, deadline)
        if deadline < math.inf:  # (else ``deadline`` stays at inf)
            self.on_deadline()

    def end(self, waiter: Waiter) -> BlockedRead | None:
        """Take ``waiter`` off the keys its read waits on; the read (None: there was none)."""
        blocked, self.read = self.read, None
        if blocked is not None:
            for key in blocked.keys:
                blocked.db.unblock(key, waiter)
            if blocked.deadline < math.inf:  # (one that never times out left ``deadline`` alone)
                self.on_deadline()
        return blocked


def _ignore() -> None:
    """What ``on_deadline`` calls until the I/O side listens: nobody to tell yet."""
