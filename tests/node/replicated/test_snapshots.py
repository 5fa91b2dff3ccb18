"""A group's leader compacts its log under writes that never stop: the writes it holds pending
(made here, not committed yet) would otherwise keep it from ever taking a snapshot, and its log
(memory and disk) would grow without end while its followers' stay short."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from cluster.placement import SlotGroup
from node.replicated.path import KeyRouter
from node.resp.connection import RespConnection
from node.resp.in_order import MAX_WAITING
from node.run.launch import NodeHandle
from tests.node.replicated.test_path import (
    NAMES,
    RAFT,
    a_led_key,
    entries,
    start_nodes,
)
from tests.support import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

SNAPSHOT = 64
"""Entries a group applies between two snapshots."""
WRITES = 1_500
CONNECTIONS = 8


def lag(handle: NodeHandle, group: str) -> int:
    """How many entries the group's log on ``handle`` holds past its snapshot."""
    assert handle.node.replicas is not None
    (found,) = [s for s in handle.node.replicas.status() if s.name == group]
    return found.applied - found.snapshot_index


def pipeline(port: int, key: bytes) -> list[bytes]:
    """XADD ``WRITES`` times on one connection without waiting for replies (so that some are
    pending on the leader most of the time); the replies' first lines."""
    request = b"".join(
        b"*5\r\n$4\r\nXADD\r\n$%d\r\n%b\r\n$1\r\n*\r\n$1\r\nn\r\n$%d\r\n%d\r\n"
        % (len(key), key, len(str(n)), n)
        for n in range(WRITES)
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        replies: list[bytes] = []
        data = b""
        while len(replies) < WRITES:
            chunk = sock.recv(1 << 16)
            assert chunk, "the connection closed"
            data += chunk
            lines = data.split(b"\r\n")
            data = lines.pop()
            replies += [line for line in lines if line[:1] in (b"$", b"-")]
    return replies


async def test_a_leader_snapshots_while_writes_keep_coming(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = await start_nodes(nursery, tmp_path, replication=RAFT.evolve(snapshot_entries=SNAPSHOT))
    leader, key = await a_led_key(nodes)
    router = nodes[leader].node.keys
    assert router is not None
    group = router.layout.group_of(key).name
    lags: list[int] = []
    replies: list[bytes] = []
    held: list[bytes] = []
    after_snapshot = KeyRouter._after_snapshot

    async def counted(
        router: KeyRouter, conn: RespConnection, group: SlotGroup, args: list[bytes]
    ) -> None:
        held.append(args[0])
        await after_snapshot(router, conn, group, args)

    monkeypatch.setattr(KeyRouter, "_after_snapshot", counted)

    async def write() -> None:
        port = nodes[leader].redis_port or 0
        replies.extend(await trio.to_thread.run_sync(pipeline, port, key))

    # (as if a snapshot had been asked for while writes were pending: the first commands wait,
    # at most ``propose_timeout`` as nothing is pending; later ones wait whenever it happens)
    router.machines[group].quieting = True
    with trio.fail_after(60):
        async with trio.open_nursery() as writing:
            for _ in range(CONNECTIONS):
                writing.start_soon(write)
            while len(replies) < CONNECTIONS * WRITES:
                lags.append(lag(nodes[leader], group))
                await trio.sleep(0.005)

    assert all(reply[:1] == b"$" for reply in replies), {r for r in replies if r[:1] != b"$"}
    # Commands were held while the leader waited to snapshot, and every write held was carried
    # out once. Held until the writes pending (at most ``MAX_WAITING``
    # per connection) were committed, the log never ran far past the interval.
    assert held, "no command waited for a snapshot"
    assert max(lags) <= SNAPSHOT + CONNECTIONS * MAX_WAITING, sorted(lags)[-5:]
    want = entries(nodes[leader], key)
    assert len(want) == CONNECTIONS * WRITES
    for name in NAMES:
        await until(lambda handle=nodes[name]: entries(handle, key) == want or None)  # type: ignore[misc]
