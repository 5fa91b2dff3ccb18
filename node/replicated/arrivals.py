"""Forwarded requests arriving from other nodes (``KEYS`` frames), carried out in the order they came.

A node that leads a group runs a forwarded write the moment its frame arrives (``run_now``), so a
peer's writes run in the order the peer sent them (a client's pipeline of writes, which its node
sends at once: ``node.replicated.pipelines``), and each reply (``KEYR``) goes once committed. A
write that cannot run at once (this node is not the group's leader yet, or holds the group while
it snapshots, or must pass the write on to the leader) waits in the backlog of its peer and group,
and everything from that peer for that group after it waits too, until it ran. A request that only
reads is answered on its own (its client waits for its answer, so nothing of the client's comes
after it), once its read barrier passed.

A pipelined write (sent with ``MOST_HOPS``) that finds another node leading is answered
``-CLUSTERDOWN`` without running, not passed on: its sender may have given up on it and sent later
writes to the new leader, which must not see it after them. A write still waiting an election and
a proposal's time after it arrived is answered ``-CLUSTERDOWN`` without running here (its sender
gave up on it by then; one passed on meanwhile may still run there), and so is one that finds
``MOST_WAITING`` before it. A reply larger than ``max_carried`` becomes an error that says the
command ran.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable
from typing import Protocol

import trio

from cluster.frames import KeysReply, KeysRequest
from cluster.placement import Layout, SlotGroup, hash_slot
from cluster.replication.transfer import Pending, room
from node.replicated.asking import MOST_HOPS, Send
from node.replicated.forwarded import (
    CLUSTERDOWN,
    CROSSSLOT,
    find_command,
    request_keys,
    split_watched,
)
from node.replicated.watching import Watching
from node.resp.writer import error

__all__ = ["MOST_WAITING", "REPLY_TOO_LARGE", "Arrivals", "Leading"]

MOST_WAITING = 65_536
"""Requests of one peer that may wait in its backlog."""

REPLY_TOO_LARGE = (
    "-ERR reply of more than %d bytes: too large to carry from the keys' leader (the command ran)"
)


class Leading(Protocol):
    """What arrivals ask of the command path (``node.replicated.path.KeyRouter``)."""

    def leader(self, group: SlotGroup) -> str | None:
        """Whom to send a command of ``group`` to (None: wait)."""
        ...

    def holds(self, group: SlotGroup) -> bool:
        """Whether the group's commands wait while its leader snapshots."""
        ...

    def run_forwarded(self, group: SlotGroup, request: KeysRequest) -> Awaitable[bytes]:
        """Run a forwarded command here, now: its reply, once what it changed is committed."""
        ...

    async def forward(self, group: SlotGroup, request: KeysRequest) -> bytes:
        """Have the group's leader (this node, or another) carry out the request: its reply."""
        ...


class Arrivals:
    """This node's side of the requests other nodes forward to it.

    Args:
        node: this node's server name.
        layout: the keys' placement.
        path: the command path that runs or passes on what arrives.
        watching: answers an empty transaction that counts on watches.
        send: sends a frame to a route peer by server name.
        pending: the bytes waiting on the link to a route peer (None: no link): a large reply
            waits for the link's room (``cluster.replication.transfer.room``).
        max_carried: the largest reply sent back.
        patience: seconds a write may wait for a leader before it is answered ``-CLUSTERDOWN``.
        tick: seconds between two looks for a leader meanwhile.
    """

    def __init__(
        self,
        node: str,
        layout: Layout,
        path: Leading,
        watching: Watching,
        send: Send,
        pending: Pending,
        *,
        max_carried: int,
        patience: float,
        tick: float,
    ) -> None:
        self.node = node
        self.layout = layout
        self._path = path
        self._watching = watching
        self._send = send
        self._pending = pending
        self.max_carried = max_carried
        self._patience = patience
        self._tick = tick
        self.nursery: trio.Nursery | None = None
        """Where requests are carried out (set once the path runs)."""
        self._backlogs: dict[tuple[str, str], deque[tuple[float, KeysRequest]]] = {}
        """Per route peer and group, its requests waiting for a write before them to run (and when
        each arrived); a group waiting for a leader holds up no other."""

    def receive(self, peer: str, request: KeysRequest) -> None:
        """A request from the route peer ``peer``: run now, or after the writes before it of the
        same group and peer."""
        if self.nursery is None:
            return
        group = self._group_of(request)
        key = (peer, group.name if group is not None else "")
        backlog = self._backlogs.get(key)
        if backlog is None:
            if self._run_now(peer, request):
                return
            if not _writes(request):
                self.nursery.start_soon(self._serve, peer, request)
                return
            backlog = self._backlogs[key] = deque()
            self.nursery.start_soon(self._in_turn, peer, key, backlog)
        if len(backlog) >= MOST_WAITING:
            self._reply(peer, request.id, error(CLUSTERDOWN))
            return
        backlog.append((trio.current_time(), request))

    def _run_now(self, peer: str, request: KeysRequest) -> bool:
        """Run a forwarded write at once if this node leads its group and may run it now (its
        reply goes once committed); False: it must wait, or go elsewhere, or is no plain write."""
        group = self._group_of(request)
        if (
            self.nursery is None
            or group is None
            or not _writes(request)
            or self._path.leader(group) != self.node
            or self._path.holds(group)
        ):
            return False
        outcome = self._path.run_forwarded(group, request)
        self.nursery.start_soon(self._reply_once, peer, request.id, outcome)
        return True

    async def _in_turn(
        self, peer: str, key: tuple[str, str], backlog: deque[tuple[float, KeysRequest]]
    ) -> None:
        """Carry out a peer's requests that had to wait, in order: a write once it ran (here, or
        where it was passed on), and what came after it only then; a read on its own."""
        assert self.nursery is not None
        try:
            while backlog:
                arrived, request = backlog.popleft()
                if not _writes(request):
                    self.nursery.start_soon(self._serve, peer, request)
                    continue
                if not await self._write_in_turn(peer, arrived, request):
                    self._reply(peer, request.id, error(CLUSTERDOWN))
        finally:
            del self._backlogs[key]

    async def _write_in_turn(self, peer: str, arrived: float, request: KeysRequest) -> bool:
        """Run a write that waited once this node may (or pass it on, whole): True once it ran or
        was answered; False when it waited past its patience."""
        deadline = arrived + self._patience
        with trio.move_on_at(deadline):
            while trio.current_time() < deadline:
                if self._run_now(peer, request):
                    return True
                group = self._group_of(request)
                to = self._path.leader(group) if group is not None else None
                elsewhere = to is not None and to != self.node
                if elsewhere and request.hops >= MOST_HOPS:  # (pipelined: refused, not passed on)
                    self._reply(peer, request.id, error(CLUSTERDOWN))
                    return True
                if group is None or elsewhere:
                    await self._serve(peer, request)  # (passed on, or refused)
                    return True
                await trio.sleep(self._tick)
        return False

    def _group_of(self, request: KeysRequest) -> SlotGroup | None:
        """The group of the keys a request names (None: none, or in several slots)."""
        slots = {hash_slot(key) for key in request_keys(request.args)}
        return self.layout.group_of_slot(slots.pop()) if len(slots) == 1 else None

    async def _serve(self, peer: str, request: KeysRequest) -> None:
        slots = {hash_slot(key) for key in request_keys(request.args)}
        watched, args = split_watched(request.args)
        if watched and len(args) == 1:  # (an empty transaction: the watches' maker answers)
            reply = await self._watching.settle(watched, request.protocol)
        elif len(slots) > 1:
            reply = error(CROSSSLOT)
        else:
            group = self.layout.group_of_slot(slots.pop() if slots else 0)
            reply = await self._path.forward(group, request)
        await self._answer(peer, request.id, reply)

    async def _reply_once(self, peer: str, request_id: int, outcome: Awaitable[bytes]) -> None:
        await self._answer(peer, request_id, await outcome)

    async def _answer(self, peer: str, request_id: int, reply: bytes) -> None:
        """Send a reply; a large one once the link to the peer has room (as snapshot parts)."""
        await room(self._pending, peer, len(reply))
        self._reply(peer, request_id, reply)

    def _reply(self, peer: str, request_id: int, reply: bytes) -> None:
        if len(reply) > self.max_carried:
            reply = error(REPLY_TOO_LARGE % self.max_carried)
        self._send(peer, KeysReply(request_id, reply))


def _writes(request: KeysRequest) -> bool:
    """Whether a forwarded request is one plain command that writes (no transaction, no WATCH)."""
    command = find_command(request.args)
    return command is not None and command.writes
