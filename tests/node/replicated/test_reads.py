"""Linearizable reads of replicated keys on real nodes: a leader answers a read only once a majority
confirmed it still leads, so one cut off from its followers never serves a stale value."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis
import trio
from redis.exceptions import ClusterDownError

from cluster.frames import RaftFrame
from cluster.raft.messages import AppendEntries
from cluster.replication.replicas import SendFrame
from node.replicated.path import CLUSTERDOWN
from node.resp.connection import RespConnection
from node.run.launch import NodeHandle
from tests.node.replicated.test_path import (
    NAMES,
    a_led_key,
    call,
    client,
    raw,
    start_nodes,
)
from tests.support import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


class Cuts:
    """Raft frames to or from the nodes in ``names`` are dropped (routes stay up: commands still
    travel in KEYS frames)."""

    def __init__(self, nodes: dict[str, NodeHandle]) -> None:
        self.names: set[str] = set()
        for sender, handle in nodes.items():
            replicas = handle.node.replicas
            assert replicas is not None
            send = replicas._send_frame

            def dropping(
                to: str, frame: RaftFrame, send: SendFrame = send, sender: str = sender
            ) -> bool:
                return bool(self.names & {sender, to}) or send(to, frame)

            replicas._send_frame = dropping


async def test_a_leader_cut_off_answers_no_read_and_reads_see_acknowledged_writes(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    old, key = await a_led_key(nodes)
    others = [name for name in NAMES if name != old]
    assert await call(nodes[others[0]], "SET", key, "v0") is True
    assert await call(nodes[old], "GET", key) == b"v0"

    def transaction() -> list[object]:  # (a read that writes too: committed once it ran)
        with client(nodes[old]) as c:
            pipe = c.pipeline()
            pipe.get(key).set(key, "v1")
            replies: list[object] = pipe.execute()
            return replies

    assert await trio.to_thread.run_sync(transaction) == [b"v0", True]
    assert await call(nodes[others[1]], "GET", key) == b"v1"

    Cuts(nodes).names.add(old)
    with pytest.raises(ClusterDownError, match=r"^The cluster is down$"):
        await call(nodes[old], "GET", key)  # (it still thinks it leads: no majority confirms it)
    assert await raw(nodes[old], b"GET " + key + b"\r\n") == b"-CLUSTERDOWN The cluster is down\r\n"

    # The others elect a leader; a write through one is then read through the other. The old
    # leader, which hears from no leader, still answers no read (it never serves the stale v1).
    refusals: list[redis.ResponseError] = []
    with trio.fail_after(20):
        while True:
            try:
                assert await call(nodes[others[0]], "SET", key, "v2") is True
                break
            except redis.ResponseError as exc:
                refusals.append(exc)
                await trio.sleep(0.05)
    assert all(isinstance(exc, ClusterDownError) for exc in refusals)
    assert await call(nodes[others[1]], "GET", key) == b"v2"
    assert await call(nodes[others[1]], "MGET", key) == [b"v2"]
    with pytest.raises(ClusterDownError, match=r"^The cluster is down$"):
        await call(nodes[old], "GET", key)


async def test_readonly_reads_this_nodes_replica_and_readwrite_undoes_it(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    cuts = Cuts(nodes)
    leader, key = await a_led_key(nodes)
    follower, other = [name for name in NAMES if name != leader]
    port = nodes[follower].redis_port or 0
    conn = await trio.to_thread.run_sync(
        lambda: redis.Redis(host="127.0.0.1", port=port, single_connection_client=True)
    )

    async def follower_says(*args: object) -> object:
        return await trio.to_thread.run_sync(lambda: conn.execute_command(*args))

    async def until_follower_reads(value: bytes) -> None:
        with trio.fail_after(10):
            while await follower_says("GET", key) != value:  # noqa: ASYNC110 (a client's answers)
                await trio.sleep(0.02)

    try:
        assert await follower_says("READONLY") is True
        assert b" flags=r " in await follower_says("CLIENT", "INFO")  # type: ignore[operator]
        assert await follower_says("SET", key, "v0") is True  # (a write still goes to the leader)
        await until_follower_reads(b"v0")  # (its replica applied it)

        cuts.names.add(follower)
        assert await call(nodes[other], "SET", key, "v1") is True
        assert await follower_says("GET", key) == b"v0"  # (its replica, stale: at once)
        assert await follower_says("READWRITE") is True
        try:
            fresh = await follower_says("GET", key)  # (the leader's answer, or none at all)
        except ClusterDownError:
            fresh = b"(refused)"
        assert fresh in (b"v1", b"(refused)")
        cuts.names.clear()
        assert await follower_says("READONLY") is True
        await until_follower_reads(b"v1")  # (its replica catches up)
    finally:
        await trio.to_thread.run_sync(conn.close)


@pytest.mark.parametrize("through_leader", [True, False])
async def test_a_blocked_read_on_the_leader_wakes_for_a_write(
    nursery: trio.Nursery, tmp_path: Path, through_leader: bool
) -> None:
    """The read runs again when the write (a client's there, or one carried out for another
    node) wakes it, at once: it passed its read barrier already."""
    nodes = await start_nodes(nursery, tmp_path)
    leader, key = await a_led_key(nodes)
    writer = leader if through_leader else next(name for name in NAMES if name != leader)
    woke: list[bytes] = []

    def raw() -> bytes:
        with socket.create_connection(("127.0.0.1", nodes[leader].redis_port or 0)) as sock:
            sock.sendall(b"XREAD BLOCK 5000 STREAMS " + key + b" $\r\n")
            return sock.recv(1000)

    async def read() -> None:
        woke.append(await trio.to_thread.run_sync(raw))

    nursery.start_soon(read)
    broker = nodes[leader].node.server.broker
    await until(
        lambda: any(isinstance(c, RespConnection) and c.blocking.read for c in broker.clients.values())
    )
    added = await call(nodes[writer], "XADD", key, "*", "n", "1")
    await until(lambda: woke)
    assert isinstance(added, bytes)
    assert woke[0].startswith(b"*1\r\n*2\r\n$%d\r\n%s\r\n" % (len(key), key))
    assert added in woke[0]


async def test_no_read_answers_with_a_write_that_is_not_committed_in_the_end(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The leader keeps its leadership (heartbeats get through) but cannot replicate (appends are
    lost): a SET runs on it and waits for a commit that never comes; a GET after it passes the
    read barrier but may not answer the value that SET wrote, which is taken back: it waits for
    the SET's outcome and is refused as it is."""
    nodes = await start_nodes(nursery, tmp_path)
    leader, key = await a_led_key(nodes)
    assert await call(nodes[leader], "SET", key, "committed") is True
    lose_appends(nodes[leader])
    results: dict[str, object] = {}

    async def run(name: str, *args: object) -> None:
        try:
            results[name] = await call(nodes[leader], *args)
        except ClusterDownError:
            results[name] = CLUSTERDOWN

    async with trio.open_nursery() as clients:
        clients.start_soon(run, "set", "SET", key, "never")
        await until(lambda: held_value(nodes[leader], key) == b"never")
        clients.start_soon(run, "get", "GET", key)
    assert results == {"set": CLUSTERDOWN, "get": CLUSTERDOWN}
    await until(lambda: held_value(nodes[leader], key) == b"committed")  # (taken back)


def lose_appends(handle: NodeHandle) -> None:
    """Drop the AppendEntries this node sends (its heartbeats still go: it keeps leading)."""
    replicas = handle.node.replicas
    assert replicas is not None
    send = replicas._send_frame

    def dropping(to: str, frame: RaftFrame) -> bool:
        return isinstance(frame.message, AppendEntries) or send(to, frame)

    replicas._send_frame = dropping


def held_value(handle: NodeHandle, key: bytes) -> object:
    return handle.node.server.broker.keyspaces.database("$G", 0).keys.get(key)
