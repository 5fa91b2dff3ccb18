"""Asking another node over routes: a forwarded command (``KEYS``) and the reply it waits for
(``KEYR``), matched by the request's id.

A request is sent once only: one that may have run is never sent again. While it waits, ``gone``
is asked every ``tick`` seconds whether the node asked cannot be the one to answer any more (it
died, or was cut off, and another leads the keys): the answer is then the cluster's error at once,
not after the whole wait, so that the client may send its next command to the new leader.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import trio

from cluster.frames import KeysReply, KeysRequest
from node.replicated.forwarded import CLUSTERDOWN
from node.resp.writer import error

__all__ = ["Asking", "Send"]

Send = Callable[[str, KeysRequest | KeysReply], bool]
"""Sends a frame to a route peer by server name (False: no route to it)."""


class Asking:
    """The requests this node sent and is waiting on."""

    def __init__(self, send: Send, tick: float) -> None:
        self._send = send
        self._tick = tick
        self._ids = itertools.count(1)
        self._waiting: dict[int, trio.MemorySendChannel[bytes]] = {}

    async def ask(self, to: str, request: KeysRequest, gone: Callable[[], bool]) -> bytes | None:
        """Send ``request`` to ``to``: its reply (None: no route to it)."""
        request.id = next(self._ids)
        send, receive = trio.open_memory_channel[bytes](1)
        self._waiting[request.id] = send
        try:
            if not self._send(to, request):
                return None
            while True:
                with trio.move_on_after(self._tick):
                    return await receive.receive()
                if gone():
                    return error(CLUSTERDOWN)
        finally:
            self._waiting.pop(request.id, None)

    def answered(self, reply: KeysReply) -> None:
        """A reply came (one nobody waits on any more is dropped)."""
        waiting = self._waiting.pop(reply.id, None)
        if waiting is not None:
            waiting.send_nowait(reply.reply)
