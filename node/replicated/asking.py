"""Asking another node over routes: a forwarded command (``KEYS``) and the reply it waits for
(``KEYR``), matched by the request's id.

A request is sent once only: one that may have run is never sent again. While it waits, ``gone``
is asked every ``tick`` seconds whether the node asked cannot be the one to answer any more (it
died, or was cut off, and another leads the keys): the answer is then the cluster's error at once,
not after the whole wait, so that the client may send its next command to the new leader.

Sending and waiting may be apart (``send``, then ``wait``): a pipeline of writes is sent at once
and its replies taken in turn. A request nobody waits for any more (its client left) is forgotten
once ``FORGET_AFTER`` seconds old, when later ones are sent.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import attrs
import trio

from cluster.frames import KeysReply, KeysRequest
from node.replicated.forwarded import CLUSTERDOWN
from node.resp.writer import error

__all__ = ["FORGET_AFTER", "MOST_HOPS", "Asked", "Asking", "Send"]

Send = Callable[[str, KeysRequest | KeysReply], bool]
"""Sends a frame to a route peer by server name (False: no route to it)."""
MOST_HOPS = 2
"""Times a request may be passed on (by a node that does not lead its keys). A pipelined write is
sent with this many already, so a node that no longer leads refuses it rather than passing it on:
its sender may have given up on it meanwhile and sent later writes to the new leader, which must
not see this one after them."""
FORGET_AFTER = 600.0
"""Seconds after which a request nobody waits for is forgotten (its reply, if any, dropped)."""


@attrs.frozen
class Asked:
    """A request sent, whose reply comes on ``reply``."""

    id: int
    reply: trio.MemoryReceiveChannel[bytes]


class Asking:
    """The requests this node sent and is waiting on."""

    def __init__(self, send: Send, tick: float) -> None:
        self._send = send
        self._tick = tick
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[float, trio.MemorySendChannel[bytes]]] = {}

    async def ask(self, to: str, request: KeysRequest, gone: Callable[[], bool]) -> bytes | None:
        """Send ``request`` to ``to``: its reply (None: no route to it)."""
        asked = self.send(to, request)
        return None if asked is None else await self.wait(asked, gone)

    async def answer(self, to: str, request: KeysRequest, *, within: float) -> bytes:
        """``to``'s own reply to ``request`` (the cluster's error without one in ``within`` seconds)."""
        with trio.move_on_after(within):
            reply = await self.ask(to, request, lambda: False)
            if reply is not None:
                return reply
        return error(CLUSTERDOWN)

    def send(self, to: str, request: KeysRequest) -> Asked | None:
        """Send ``request`` to ``to`` now (None: no route to it); ``wait`` for its reply."""
        now = trio.current_time()
        while self._waiting:  # (the oldest first: forget those nobody waits for)
            oldest = next(iter(self._waiting))
            if now - self._waiting[oldest][0] < FORGET_AFTER:
                break
            del self._waiting[oldest]
        request.id = next(self._ids)
        send, receive = trio.open_memory_channel[bytes](1)
        self._waiting[request.id] = (now, send)
        if not self._send(to, request):
            del self._waiting[request.id]
            return None
        return Asked(request.id, receive)

    async def wait(self, asked: Asked, gone: Callable[[], bool]) -> bytes:
        """The reply to a request sent, or the cluster's error once ``gone`` says it cannot come."""
        try:
            while True:
                with trio.move_on_after(self._tick):
                    return await asked.reply.receive()
                if gone():
                    return error(CLUSTERDOWN)
        finally:
            self._waiting.pop(asked.id, None)

    def answered(self, reply: KeysReply) -> None:
        """A reply came (one nobody waits on any more is dropped)."""
        waiting = self._waiting.pop(reply.id, None)
        if waiting is not None:
            waiting[1].send_nowait(reply.reply)
