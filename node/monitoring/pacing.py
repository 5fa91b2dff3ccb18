"""Building monitoring documents without holding up the node: the loop is given back a slice at a time.

The views run on the trio loop that runs the broker and its routes, and a listing may hold a hundred
thousand subscriptions: built in one go, it would stop every connection of the node for a second. So
the views that list things are coroutines that give the loop back whenever they have worked for a
``Pacer`` slice. They read the broker only on the loop, from copies of its collections taken in one
step (so a change between steps never breaks an iteration), and each connection or subscription is
read as it is at the moment it is listed, much as nats-server locks one connection at a time.

What a listing keeps between steps is plain data (tuples of text and numbers), never a record per
item that refers to a connection or a link: a plain tuple of text is soon untracked by the garbage
collector, where records holding references count towards a full collection, a stall of its own
when there are a hundred thousand of them.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import trio
import trio.lowlevel

__all__ = ["Pacer", "itself", "paced_map", "paced_sorted"]

_RUN = 1024
"""Items sorted in one step; longer lists are sorted in runs of this size and merged."""

T = TypeVar("T")
R = TypeVar("R")


class Pacer:
    """Gives the loop back to other tasks each time the monitoring work of one task step has run for
    ``step`` seconds, so a document of any size delays the node's connections by about that much at
    a time rather than by the time the whole document takes."""

    def __init__(self, step: float = 0.002) -> None:
        self.step = step
        self._until = time.perf_counter() + step

    async def tick(self) -> None:
        """Called after each small unit of work (one item listed, sorted or written)."""
        if time.perf_counter() >= self._until:
            await trio.lowlevel.checkpoint()
            self._until = time.perf_counter() + self.step


async def paced_map(func: Callable[[T], R], items: Iterable[T], pace: Pacer) -> list[R]:
    """``[func(item) for item in items]``, over a copy of ``items`` taken in one step."""
    out: list[R] = []
    for item in list(items):
        out.append(func(item))
        await pace.tick()
    return out


async def paced_sorted(
    items: Sequence[T], key: Callable[[T], Any], pace: Pacer, count: int | None = None
) -> list[T]:
    """``sorted(items, key=key)[:count]``, sorted in runs and merged lazily, so that sorting any
    number of items never holds the loop for long. Each key is read once; ties keep their order."""
    keyed: list[tuple[Any, int]] = []
    for seq, item in enumerate(items):
        keyed.append((key(item), seq))
        await pace.tick()
    runs: list[list[tuple[Any, int]]] = []
    for start in range(0, len(keyed), _RUN):
        runs.append(sorted(keyed[start : start + _RUN]))
        await pace.tick()
    out: list[T] = []
    for _, seq in itertools.islice(heapq.merge(*runs), count):
        out.append(items[seq])
        await pace.tick()
    return out


def itself(item: T) -> T:
    """The sort key of plain data that sorts as it is."""
    return item
