"""Replicated keys larger than a link holds at once: a follower catches up by a snapshot of tens of
megabytes, and large values replicate, without the route being cut (a link cuts a peer that has
more than ``max_pending`` bytes waiting, and refuses a frame over ``max_frame``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import trio

from node.run.launch import NodeHandle
from tests.node.replicated.test_path import (
    NAMES,
    RAFT,
    a_led_key,
    call,
    client,
    start_member,
    start_nodes,
    stop,
)
from tests.support import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

VALUE = 1024 * 1024
"""Bytes of one value (each write is one log entry about this big)."""
WRITES = 48
"""Values written while a follower is away: more than a link may hold (32 MiB) together."""


def held_bytes(handle: NodeHandle, key: bytes) -> int:
    """The length of the string this node's own replica holds at ``key`` (-1: none)."""
    value = handle.node.server.broker.keyspaces.database("$G", 0).keys.get(key)
    return len(value) if isinstance(value, bytes | bytearray) else -1


@pytest.mark.parametrize("snapshot_entries", [8, RAFT.snapshot_entries], ids=["snapshot", "log"])
async def test_a_follower_catches_up_on_more_than_a_link_holds(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture, snapshot_entries: int
) -> None:
    """By a snapshot (the leader compacted what the follower lacks) or from the log."""
    replication = RAFT.evolve(snapshot_entries=snapshot_entries)
    nodes = await start_nodes(nursery, tmp_path, replication=replication)
    leader, tag = await a_led_key(nodes)
    follower = next(name for name in NAMES if name != leader)
    await stop(nodes[follower])
    keys = [b"{%s}big-%d" % (tag, n) for n in range(WRITES)]
    for n, key in enumerate(keys):
        assert await call(nodes[leader], "SET", key, bytes([65 + n % 26]) * VALUE) is True
    nodes[follower] = handle = await start_member(
        nursery, tmp_path, follower, nodes[leader], replication=replication
    )
    await until(lambda: all(held_bytes(handle, key) == VALUE for key in keys))
    assert "slow consumer" not in caplog.text.lower()


async def test_what_a_route_cannot_carry_is_refused_and_the_routes_stay_up(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    leader, tag = await a_led_key(nodes)
    follower = next(name for name in NAMES if name != leader)
    router = nodes[leader].node.keys
    assert router is not None
    most = router.max_carried  # (half of what a route holds for a peer)
    key, stream = b"{%s}s" % tag, b"{%s}x" % tag
    for handle in (nodes[leader], nodes[follower]):  # (a write larger than an entry may be)
        with pytest.raises(redis.ResponseError, match="larger than a replicated write"):
            await call(handle, "SET", key, bytes(most + 1))
    for _ in range(2):  # (each write fits; together they are more than a reply may carry)
        await call(nodes[leader], "XADD", stream, "*", "v", bytes(most * 2 // 3))
    assert await call(nodes[follower], "XLEN", stream) == 2
    with pytest.raises(redis.ResponseError, match="too large to carry"):
        await call(nodes[follower], "XRANGE", stream, "-", "+")

    def read_own_replica() -> int:
        with client(nodes[follower]) as c:
            c.execute_command("READONLY")
            return len(c.execute_command("XRANGE", stream, "-", "+"))

    assert await trio.to_thread.run_sync(read_own_replica) == 2
    assert "slow consumer" not in caplog.text.lower()
    assert "protocol error" not in caplog.text.lower()


async def test_many_large_replies_at_once_wait_for_the_links_room(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Eight clients of a follower read a 10 MiB value at once: 80 MiB of replies, more than a link
    holds, sent as it drains."""
    nodes = await start_nodes(nursery, tmp_path)
    leader, tag = await a_led_key(nodes)
    follower = next(name for name in NAMES if name != leader)
    key, size = b"{%s}wide" % tag, 10 * VALUE
    assert await call(nodes[leader], "SET", key, b"v" * size) is True

    def read(got: list[int]) -> None:
        with client(nodes[follower]) as c:
            got.append(len(c.get(key) or b""))

    got: list[int] = []
    async with trio.open_nursery() as readers:
        for _ in range(8):
            readers.start_soon(trio.to_thread.run_sync, read, got)
    assert got == [size] * 8
    assert "slow consumer" not in caplog.text.lower()


async def test_many_large_requests_at_once_wait_for_the_links_room(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Eight clients of a follower write a 10 MiB value each at once: 80 MiB of requests for the
    leader, more than a link holds, sent as it drains."""
    nodes = await start_nodes(nursery, tmp_path)
    leader, tag = await a_led_key(nodes)
    follower = next(name for name in NAMES if name != leader)
    size = 10 * VALUE

    def write(n: int, done: list[bool]) -> None:
        with client(nodes[follower]) as c:
            done.append(c.set(b"{%s}wide%d" % (tag, n), b"v" * size) is True)

    done: list[bool] = []
    async with trio.open_nursery() as writers:
        for n in range(8):
            writers.start_soon(trio.to_thread.run_sync, write, n, done)
    assert done == [True] * 8
    for n in range(8):
        await until(lambda: held_bytes(nodes[leader], b"{%s}wide%d" % (tag, n)) == size)  # noqa: B023
    assert "slow consumer" not in caplog.text.lower()
