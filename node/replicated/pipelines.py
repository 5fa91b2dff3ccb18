"""Writes pipelined through a node that does not lead their keys: sent at once, answered in turn.

A connection's write of keys another node leads, when this node's replica of their group knows the
leader (or the group has a single voter), is sent to it at once (``send``) and its reply taken in
turn while the connection goes on (``RespConnection.reply_later``): the leader runs a peer's
forwarded writes in the order they came (``node.replicated.arrivals``), so a pipeline of writes
travels as one. While some are unanswered, the connection's next command runs only if it is
another such write to the same leader and group (``holds_back``); anything else (a read, another
group, a write once the leader changed, a command on no keys) waits until they are answered, so a
connection's commands never run out of order, even when the leader changes midway. A write larger
than ``MOST_BYTES``, or one for a leader whose link already holds ``ROOM`` bytes waiting, is not
pipelined (it waits for its reply, as anything else does), so a pipeline never floods a route.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import attrs
import trio

from cluster.frames import KeysRequest
from cluster.placement import Layout, SlotGroup, hash_slot
from cluster.replication.replicas import Replicas
from cluster.replication.transfer import ROOM, Pending
from node.replicated.asking import MOST_HOPS, Asked, Asking
from node.replicated.blocking import block_at
from node.replicated.forwarded import CLUSTERDOWN
from node.resp.commands.introspection import command_keys
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import error

__all__ = ["MOST_BYTES", "Pipelines"]

MOST_BYTES = 1024 * 1024
"""The largest write (bytes of arguments) pipelined; a larger one travels alone."""


@attrs.define
class _Pipeline:
    """A connection's writes sent to ``to`` for ``group`` and not answered yet."""

    group: str
    to: str
    unanswered: int = 0
    answered: trio.Event = attrs.Factory(trio.Event)


class Pipelines:
    """The writes this node's connections pipelined to other nodes.

    Args:
        layout: the keys' placement.
        replicas: the node's replica groups (whose replicas know their leaders).
        asking: sends requests to other nodes and takes their replies.
        leads: whether this node leads a group and may run its commands now.
        led_elsewhere: whether this node's replica of a group knows another leader than a node.
        patience: seconds a reply may take before the write is answered ``-CLUSTERDOWN``.
        pending: the bytes waiting on the link to a route peer: past ``ROOM``, writes are not
            pipelined to it (each then waits for its reply), so a pipeline never floods a link.
    """

    def __init__(
        self,
        layout: Layout,
        replicas: Replicas,
        asking: Asking,
        leads: Callable[[SlotGroup], bool],
        led_elsewhere: Callable[[SlotGroup, str], bool],
        patience: float,
        pending: Pending,
    ) -> None:
        self._layout = layout
        self._pending = pending
        self._replicas = replicas
        self._asking = asking
        self._leads = leads
        self._led_elsewhere = led_elsewhere
        self._patience = patience

    def send(self, conn: RespConnection, command: Command[RespConnection], args: list[bytes]) -> bool:
        """Send a write at once to the leader of its keys this node's replica knows, its reply
        taken in turn; False: it is not one to pipeline (it goes as anything else does)."""
        found = self._target(command, args)
        if found is None:
            return False
        group, to = found
        waiting = self._pending(to)
        if waiting is None or waiting > ROOM:
            return False
        request = KeysRequest(
            0, conn.account.name, conn.db, MOST_HOPS, list(args), conn.writer.version
        )  # (not to be passed on: ``MOST_HOPS``)
        asked = self._asking.send(to, request)
        if asked is None:
            return False
        pipeline = conn.pipelined
        if not isinstance(pipeline, _Pipeline) or not pipeline.unanswered:
            pipeline = conn.pipelined = _Pipeline(group.name, to)
        pipeline.unanswered += 1
        deadline = trio.current_time() + self._patience
        conn.reply_later(partial(self._relay, pipeline, group, asked, deadline), b"")
        return True

    def holds_back(
        self, conn: RespConnection, command: Command[RespConnection], args: list[bytes]
    ) -> bool:
        """Whether the command must wait for the connection's unanswered writes (then it runs
        once they are answered)."""
        pipeline = conn.pipelined
        if not isinstance(pipeline, _Pipeline) or not pipeline.unanswered:
            return False
        found = self._target(command, args)
        if found is not None and (found[0].name, found[1]) == (pipeline.group, pipeline.to):
            return False
        conn.awaiting = partial(self._after, conn, pipeline, list(args))
        return True

    def _target(
        self, command: Command[RespConnection], args: list[bytes]
    ) -> tuple[SlotGroup, str] | None:
        """The group and the leader to pipeline a command to, if it is a write to pipeline: a
        plain write (no EXEC, no blocking read) of keys in one slot, of a group this node does not
        lead but whose leader its replica knows, and not too large."""
        if not command.writes or command.key == b"exec" or sum(map(len, args)) > MOST_BYTES:
            return None
        if block_at(args) > 0:  # (a read that may block: it waits, there is no pipelining it)
            return None
        slots = {hash_slot(key) for key in command_keys(command, args)}
        if len(slots) != 1:
            return None
        group = self._layout.group_of_slot(slots.pop())
        local = self._replicas.groups.get(group.name)
        single = group.voters[0] if len(group.voters) == 1 else None  # (its only possible leader)
        to = local.leader if local is not None else single
        if to is None or self._leads(group) or to == self._replicas.node:
            return None
        return group, to

    async def _relay(
        self, pipeline: _Pipeline, group: SlotGroup, asked: Asked, deadline: float, _: bytes
    ) -> bytes:
        """The reply to a write sent to ``pipeline.to`` (the cluster's error once another leads,
        or past ``deadline``)."""
        try:
            with trio.move_on_at(deadline):
                return await self._asking.wait(asked, partial(self._led_elsewhere, group, pipeline.to))
            return error(CLUSTERDOWN)
        finally:
            pipeline.unanswered -= 1
            if not pipeline.unanswered:
                pipeline.answered.set()

    async def _after(self, conn: RespConnection, pipeline: _Pipeline, args: list[bytes]) -> None:
        """Run a command held back once the writes before it are answered."""
        await pipeline.answered.wait()
        conn.execute(args)  # (its checks and its routing again)
