"""Snapshots in parts: split and joined again whatever the sizes, a part missed drops what was
joined, and the sender waits for the link's room and stops when the link goes."""

from __future__ import annotations

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from cluster.frames import RaftFrame
from cluster.raft.messages import InstallSnapshot, Snapshot
from cluster.replication.transfer import ROOM, Assembly, Transfers, parts
from cluster.replication.wire import SnapshotPart

pytestmark = pytest.mark.timeout(30)


def message(data: bytes, index: int = 7) -> InstallSnapshot:
    snapshot = Snapshot(index, 2, frozenset({"a", "b"}), data)
    return InstallSnapshot(sender="a", to="b", term=3, snapshot=snapshot)


@given(st.binary(min_size=1, max_size=300), st.integers(1, 64))
def test_parts_join_into_the_snapshot(data: bytes, size: int) -> None:
    assembly = Assembly()
    pieces = list(parts(message(data), size))
    assert b"".join(p.data for p in pieces) == data
    joined = [assembly.add(piece) for piece in pieces]
    assert joined[:-1] == [None] * (len(pieces) - 1)
    assert joined[-1] == message(data)


def test_a_part_missed_drops_the_rest_until_a_first_part_again() -> None:
    data = bytes(range(40))
    first, second, third, fourth = parts(message(data), 10)
    assembly = Assembly()
    assert assembly.add(first) is None
    assert assembly.add(third) is None  # (the second never came)
    assert assembly.add(fourth) is None
    for piece in (first, second, third):
        assert assembly.add(piece) is None
    assert assembly.add(fourth) == message(data)
    # A part of another snapshot does not continue this one.
    other = next(iter(parts(message(data, index=8), 10)))
    assert assembly.add(first) is None
    assert assembly.add(attrs.evolve(second, index=8)) is None
    assert assembly.add(second) is None  # (dropped: it waits for a first part)
    assert assembly.add(other) is None


async def test_the_sender_waits_for_room_and_stops_without_a_link() -> None:
    sent: list[SnapshotPart] = []
    waiting: dict[str, int | None] = {"b": ROOM + 1}

    def send(to: str, frame: RaftFrame) -> bool:
        assert isinstance(frame.message, SnapshotPart)
        sent.append(frame.message)
        return True

    transfers = Transfers(send, waiting.get)
    big = message(bytes(3 * 1024 * 1024 + 5))
    async with trio.open_nursery() as nursery:
        transfers.start(nursery, "g", big)
        transfers.start(nursery, "g", big)  # (under way: not twice)
        await trio.sleep(0.05)
        assert sent == []  # (no room on the link yet)
        waiting["b"] = 0  # (room: the parts go, and the nursery waits for the last)
    assert [p.offset for p in sent] == [0, 1 << 20, 2 << 20, 3 << 20]
    sent.clear()
    async with trio.open_nursery() as nursery:
        transfers.start(nursery, "g", big)  # (just sent in full: the follower may be installing)
    assert sent == []
    waiting["b"] = None  # (the link is gone: nothing is sent)
    async with trio.open_nursery() as nursery:
        transfers.start(nursery, "g", message(bytes(3 << 20), index=9))
    assert sent == []
