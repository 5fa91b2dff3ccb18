"""Taking a group of connections' input in the order it arrived, as a single-threaded server does.

trio wakes the readers of sockets that became readable together in one batch, and runs that batch
in either order. A server whose clients count on requests being handled in the order their bytes
reached it (redis-server's event loop takes ready sockets in the order they became ready) would
otherwise handle a request sent on one connection after a request sent later on another, half the
time: a ``PUBLISH`` sent right after another connection's ``UNSUBSCRIBE`` could still reach the
subscriber.

An ``Arrivals`` keeps the group's sockets in a level-triggered epoll set of its own, never waited
on: its ready list orders the sockets holding unread input by when they became readable (a socket
is registered afresh whenever input has been read from it, ``taken``). A reader woken for input
calls ``turn`` before it reads: while a socket ahead of its own belongs to a reader
that is waiting for input (so trio has woken it in the same batch, or is about to), it lets the
scheduler run that reader first. It gives way a bounded number of times (a reader ahead that never
comes is not waited for), and a socket whose reader is busy elsewhere (pausing for congested
consumers, say) is not waited for at all. Where epoll does not exist, ``turn`` returns at once.
"""

from __future__ import annotations

import contextlib
import select
from typing import Final

import trio

__all__ = ["Arrivals"]

SCAN: Final = 64
"""The most ready sockets looked at per turn: ours further back still goes after these."""
GIVE_WAY: Final = 4
"""The most times a reader lets readers whose input came first go ahead, per piece of input."""


class Arrivals:
    """The arrival order of a group of sockets' input (one per node and front door; its epoll set
    is closed with it)."""

    def __init__(self) -> None:
        self._epoll = select.epoll() if hasattr(select, "epoll") else None
        self.waiting: set[int] = set()
        """Sockets whose reader waits for input (it is taken out once the reader wakes)."""

    def add(self, fd: int) -> None:
        if self._epoll is not None:
            self._epoll.register(fd, select.EPOLLIN)

    def taken(self, fd: int) -> None:
        """Input was just read from ``fd``: its next input takes a new place in the order (epoll
        keeps a socket where it first became ready until a poll finds it drained, so a socket
        read since would otherwise keep a place its next input did not earn)."""
        if self._epoll is not None:
            self._epoll.unregister(fd)
            self._epoll.register(fd, select.EPOLLIN)

    def remove(self, fd: int) -> None:
        """Forget a socket (before it closes)."""
        self.waiting.discard(fd)
        if self._epoll is not None:
            with contextlib.suppress(OSError, ValueError):  # (never added, or already closed)
                self._epoll.unregister(fd)

    def _behind(self, fd: int) -> bool:
        """Whether input that came before ``fd``'s waits for a reader that is being woken."""
        assert self._epoll is not None
        waiting = self.waiting
        for other, _ in self._epoll.poll(0, SCAN):
            if other == fd:
                return False
            if other in waiting:
                return True
        return False

    async def turn(self, fd: int) -> None:
        """Return when ``fd``'s input may be read: once the readers of input that arrived before it
        have had their turn (or after giving way ``GIVE_WAY`` times)."""
        if self._epoll is None or not self.waiting:
            return
        for _ in range(GIVE_WAY):
            if not self._behind(fd):
                return
            await trio.lowlevel.cancel_shielded_checkpoint()
