"""Snapshots larger than a frame: sent in parts, as the link to the follower has room, and joined.

A Raft snapshot holds a group's whole state machine, which may be far larger than a route takes in
one frame or holds for a peer at once (``ClusterConfig.frame_room``): sent whole, the link would
cut the follower as a slow consumer, again at every retry, and a follower behind a compaction
would never catch up. So an ``InstallSnapshot`` whose data is over ``PART`` bytes goes as
``SnapshotPart`` messages (``cluster.replication.wire``): each names the snapshot (index, term,
voters), its whole size and where the part's bytes go. ``Transfers`` sends them, one task per
group and follower, each part only once the bytes waiting on the link to the follower are below
``ROOM``; it stops when the link goes, or when a newer snapshot for the follower supersedes it. The
leader asks again at every heartbeat while the follower has not installed the snapshot: a transfer
of that snapshot under way, or sent in full in the last ``AGAIN_AFTER`` seconds (the follower may
be installing it), is not started again.

On the follower's node, ``Assembly`` joins the parts one peer sends for one group, in order, into
the ``InstallSnapshot`` they make; a part that does not continue what it holds (a link lost
meanwhile) drops it, and a first part starts again. What it holds is bounded by the parts that
came (never by the size a part announces).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import trio
import trio.lowlevel

from cluster.frames import RaftFrame
from cluster.raft.messages import InstallSnapshot, Snapshot
from cluster.replication.wire import SnapshotPart

__all__ = ["AGAIN_AFTER", "PART", "ROOM", "Assembly", "Transfers", "parts", "room"]

PART = 1024 * 1024
"""Bytes of snapshot data per part; a snapshot up to this size goes whole, as one message."""
ROOM = 4 * PART
"""Bytes that may wait on the link to a follower before the next part is sent."""
AGAIN_AFTER = 2.0
"""Seconds after a snapshot was sent in full before the same one is sent to the follower again."""
_PAUSE = 0.005

SendFrame = Callable[[str, RaftFrame], bool]
Pending = Callable[[str], int | None]
"""Bytes waiting on the link to a peer (None: no link to it)."""


async def room(pending: Pending, peer: str, size: int) -> None:
    """Return once a message of ``size`` bytes may go to ``peer``: at once if it is no larger than
    a part, else once the link to the peer holds ``ROOM`` bytes or fewer waiting (or is gone:
    sending then fails as it would). Returning does not give up the task's turn, so a message sent
    right after is waiting on the link before another task asks: many large messages at once
    leave one after the other, as the link drains (what replies and requests to other nodes
    larger than a part wait for)."""
    if size <= PART:
        return
    while (waiting := pending(peer)) is not None and waiting > ROOM:  # noqa: ASYNC110 (a link announces nothing as it drains)
        await trio.sleep(_PAUSE)


def parts(message: InstallSnapshot, size: int = PART) -> Iterator[SnapshotPart]:
    """The snapshot's data in parts of ``size`` bytes, in order."""
    snapshot = message.snapshot
    data, total = snapshot.data, len(snapshot.data)
    for offset in range(0, total, size):
        yield SnapshotPart(
            sender=message.sender, to=message.to, term=message.term, index=snapshot.index,
            snap_term=snapshot.term, voters=snapshot.voters, total=total, offset=offset,
            data=data[offset : offset + size],
        )  # fmt: skip


class Assembly:
    """The parts of a snapshot one peer is sending for one group, joined in order."""

    __slots__ = ("_data", "_first")

    def __init__(self) -> None:
        self._first: SnapshotPart | None = None
        self._data = bytearray()

    def add(self, part: SnapshotPart) -> InstallSnapshot | None:
        """Take a part: the whole snapshot once this was its last part, else None."""
        first = self._first
        same = first is not None and (first.index, first.snap_term, first.total, first.term) == (
            part.index, part.snap_term, part.total, part.term,
        )  # fmt: skip
        if part.offset == 0:
            self._first, self._data = part, bytearray()
        elif not same or part.offset != len(self._data):
            self._first, self._data = None, bytearray()  # (a part missed: wait for a resend)
            return None
        self._data += part.data
        if len(self._data) < part.total:
            return None
        data, self._first, self._data = bytes(self._data), None, bytearray()
        snapshot = Snapshot(part.index, part.snap_term, part.voters, data)
        return InstallSnapshot(sender=part.sender, to=part.to, term=part.term, snapshot=snapshot)


class Transfers:
    """Snapshots being sent in parts, at most one per group and follower.

    Args:
        send: sends a frame to a route peer by server name (False: no link to it).
        pending: the bytes waiting on the link to a peer (None: no link).
    """

    def __init__(self, send: SendFrame, pending: Pending) -> None:
        self._send = send
        self._pending = pending
        self._running: dict[tuple[str, str], int] = {}
        """The snapshot index being sent, by group and follower."""
        self._sent: dict[tuple[str, str], tuple[int, float]] = {}
        """The snapshot index last sent in full, and when, by group and follower."""

    def start(self, nursery: trio.Nursery, group: str, message: InstallSnapshot) -> None:
        """Send ``message`` in parts, in the background (unless that snapshot is on its way, or
        just arrived)."""
        key, index = (group, message.to), message.snapshot.index
        sent = self._sent.get(key)
        if self._running.get(key) == index or (
            sent is not None and sent[0] == index and trio.current_time() < sent[1] + AGAIN_AFTER
        ):
            return
        self._running[key] = index
        nursery.start_soon(self._transfer, key, group, message)

    async def _transfer(self, key: tuple[str, str], group: str, message: InstallSnapshot) -> None:
        index = message.snapshot.index
        try:
            for part in parts(message):
                while True:
                    if self._running.get(key) != index:
                        return  # (a newer snapshot for this follower took over)
                    waiting = self._pending(message.to)
                    if waiting is None:
                        return  # (no link: the leader sends it again once there is)
                    if waiting <= ROOM:
                        break
                    await trio.sleep(_PAUSE)
                if not self._send(message.to, RaftFrame(group, part)):
                    return
                await trio.lowlevel.checkpoint()
            self._sent[key] = (index, trio.current_time())
        finally:
            if self._running.get(key) == index:
                del self._running[key]
