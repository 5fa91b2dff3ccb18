"""Redis keys on replica groups, end to end: three nodes joined by routes over real sockets, redis-py
clients on each, writes answered once committed, any node serving any key, and a leader's death."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis
import trio
from redis.exceptions import ClusterCrossSlotError, ClusterDownError

from cluster.config import ClusterConfig, ReplicationConfig
from cluster.placement import SLOTS, hash_slot
from node.config.options import Config, RedisConfig, StreamConfig
from node.data.streams import MAX_ID, Stream, parse_id
from node.resp.connection import RespConnection
from node.run.launch import NodeHandle
from tests.support import start_node, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

NAMES = ("a", "b", "c")
ROUTES = ClusterConfig(name="keys", host="127.0.0.1", port=0, ping_interval=0.5, ping_max=3)
RAFT = ReplicationConfig(tick=0.05, election_ticks=10, propose_timeout=3.0, members=NAMES)


async def start_member(
    nursery: trio.Nursery,
    tmp_path: Path,
    name: str,
    seed: NodeHandle | None,
    streams: tuple[StreamConfig, ...] = (),
    replication: ReplicationConfig = RAFT,
    replicas: int = 3,
) -> NodeHandle:
    config = Config(
        server_name=name,
        streams=streams,
        store_dir=str(tmp_path / name),
        cluster=ROUTES.evolve(seeds=(f"nats://127.0.0.1:{seed.cluster_port}",) if seed else ()),
        replication=replication,
        redis=RedisConfig(host="127.0.0.1", port=0, replicas=replicas),
    )
    return await start_node(nursery, config)


async def start_nodes(
    nursery: trio.Nursery,
    tmp_path: Path,
    streams: tuple[StreamConfig, ...] = (),
    replication: ReplicationConfig = RAFT,
    replicas: int = 3,
) -> dict[str, NodeHandle]:
    nodes: dict[str, NodeHandle] = {}
    for name in NAMES:
        nodes[name] = await start_member(
            nursery, tmp_path, name, nodes.get("a"), streams, replication, replicas
        )
    return nodes


async def stop(handle: NodeHandle) -> None:
    handle.server.shutdown()
    with trio.fail_after(10):
        await handle.finished.wait()


def leaders(nodes: dict[str, NodeHandle]) -> dict[str, str] | None:
    """Each group's leader, once every group has one all its live members agree on and none of
    them recovers from its first start (``cluster.raft.recovery``: from then on a group outlives
    the loss of any one member, and each member may take over)."""
    found: dict[str, set[str | None]] = {}
    for handle in nodes.values():
        assert handle.node.replicas is not None
        for status in handle.node.replicas.status():
            if status.recovering:
                return None
            found.setdefault(status.name, set()).add(status.leader)
    if len(found) != len(NAMES) or any(len(s) != 1 or None in s for s in found.values()):
        return None
    return {name: next(iter(s)) for name, s in found.items()}  # type: ignore[misc]


def key_led_by(nodes: dict[str, NodeHandle], leader: str, led: dict[str, str]) -> bytes:
    keys = nodes[leader].node.keys
    assert keys is not None
    for n in range(SLOTS):
        key = b"orders-%d" % n
        if led[keys.layout.group_of(key).name] == leader:
            return key
    raise AssertionError("no group led by " + leader)


async def a_led_key(nodes: dict[str, NodeHandle]) -> tuple[str, bytes]:
    """Once every group has a leader: one leader, and a key of a group it leads."""
    led = await until(lambda: leaders(nodes))
    leader = next(iter(led.values()))
    return leader, key_led_by(nodes, leader, led)


def entries(handle: NodeHandle, key: bytes) -> list[int]:
    """The IDs of stream ``key`` in this node's own replica."""
    stream = handle.node.server.broker.keyspaces.database("$G", 0).keys.get(key)
    return [i for i, _ in stream.range(0, MAX_ID)] if isinstance(stream, Stream) else []


def client(handle: NodeHandle) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=handle.redis_port or 0, socket_timeout=10)


async def raw(handle: NodeHandle, request: bytes) -> bytes:
    """The reply's bytes to one inline request."""

    def run() -> bytes:
        with socket.create_connection(("127.0.0.1", handle.redis_port or 0), timeout=10) as sock:
            sock.sendall(request)
            return sock.recv(65536)

    return await trio.to_thread.run_sync(run)


async def call(handle: NodeHandle, *args: object) -> object:
    def run() -> object:
        with client(handle) as c:
            return c.execute_command(*args)

    return await trio.to_thread.run_sync(run)


async def test_any_node_serves_a_key_and_writes_survive_the_leader(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    led = await until(lambda: leaders(nodes))
    first = next(iter(led.values()))
    others = [name for name in NAMES if name != first]
    key = key_led_by(nodes, first, led)
    writer, reader = nodes[others[0]], nodes[others[1]]

    # A write through a node that does not lead the key's group, answered once committed.
    acked = [await call(writer, "XADD", key, "*", "n", "0")]
    assert isinstance(acked[0], bytes)
    assert await call(reader, "XRANGE", key, "-", "+") == [(acked[0], {b"n": b"0"})]
    assert await call(reader, "XLEN", key) == 1
    with pytest.raises(ClusterCrossSlotError):
        await call(writer, "MSET", "{x}1", "1", "{y}2", "2")
    assert await raw(writer, b"MGET {x}1 {y}2\r\n") == (  # (its own code, as Redis Cluster's)
        b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    )
    assert await call(writer, "MSET", "{x}1", "1", "{x}2", "2") is True
    assert await call(reader, "MGET", "{x}1", "{x}2") == [b"1", b"2"]

    # The leader goes; writes through the others resume once a new leader is elected.
    await stop(nodes[first])
    live = {name: nodes[name] for name in others}
    refusals: list[redis.ResponseError] = []
    with trio.fail_after(20):
        while len(acked) < 10:
            try:
                acked.append(await call(writer, "XADD", key, "*", "n", str(len(acked))))
            except redis.ResponseError as exc:
                refusals.append(exc)
                await trio.sleep(0.05)
    assert all(isinstance(exc, ClusterDownError) for exc in refusals)  # (never a silent success)
    ids = [parse_id(i) for i in acked if isinstance(i, bytes)]
    for handle in live.values():
        await until(lambda handle=handle: entries(handle, key) == ids)  # type: ignore[misc]
    assert len(set(ids)) == len(ids)
    assert await call(reader, "XLEN", key) == len(ids)


async def test_a_restarted_replica_catches_up_from_its_log_and_the_leader(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    leader, key = await a_led_key(nodes)
    follower = next(name for name in NAMES if name != leader)
    other = next(name for name in NAMES if name not in (leader, follower))
    acked = [await call(nodes[other], "XADD", key, "*", "n", str(n)) for n in range(3)]
    await until(lambda: len(entries(nodes[follower], key)) == 3)
    await stop(nodes[follower])
    acked += [await call(nodes[other], "XADD", key, "*", "n", str(n)) for n in range(3, 6)]
    nodes[follower] = await start_member(nursery, tmp_path, follower, nodes[leader])
    ids = [parse_id(i) for i in acked if isinstance(i, bytes)]
    assert len(ids) == 6
    await until(lambda: entries(nodes[follower], key) == ids)
    assert entries(nodes[leader], key) == ids


async def test_without_a_majority_a_write_is_refused_and_taken_back(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    leader, key = await a_led_key(nodes)
    acked = await call(nodes[leader], "XADD", key, "*", "n", "0")
    for name in NAMES:
        if name != leader:
            await stop(nodes[name])
    with pytest.raises(ClusterDownError, match=r"^The cluster is down$"):
        await call(nodes[leader], "XADD", key, "*", "n", "1")
    assert isinstance(acked, bytes)
    await until(lambda: entries(nodes[leader], key) == [parse_id(acked)])  # (the change undone)


def held(handle: NodeHandle, key: bytes) -> object:
    """What this node's own replica holds at ``key`` (expired or not)."""
    return handle.node.server.broker.keyspaces.database("$G", 0).keys.get(key)


async def test_keys_expire_where_the_leader_logs_it_so_replicas_never_part_ways(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A key past its time is removed by its group's leader, in the group's log: written again
    right after (the leader finds it expired), every replica ends with the same new value and no
    group stops; one nobody touches goes from every replica by the leader's sweep."""
    nodes = await start_nodes(nursery, tmp_path)
    leader, tag = await a_led_key(nodes)
    keys = [b"{%s}:%d" % (tag, n) for n in range(12)]
    for key in keys:
        assert await call(nodes[leader], "SET", key, "old", "PX", "30") is True
        await trio.sleep(0.05)  # (past its time: replicas' own sweeps would race the XADD)
        assert isinstance(await call(nodes[leader], "XADD", key, "*", "f", "new"), bytes)
    for handle in nodes.values():
        for key in keys:
            await until(lambda handle=handle, key=key: len(entries(handle, key)) == 1)  # type: ignore[misc]
    for handle in nodes.values():  # (no group stopped on a replica that refused an entry)
        assert handle.node.replicas is not None
        assert len(handle.node.replicas.status()) == len(NAMES)

    lone = b"{%s}:lone" % tag
    assert await call(nodes[leader], "SET", lone, "v", "PX", "100") is True
    for handle in nodes.values():
        await until(lambda handle=handle: held(handle, lone) is not None)  # type: ignore[misc]
    for handle in nodes.values():
        await until(lambda handle=handle: held(handle, lone) is None)  # type: ignore[misc]


def key_of(nodes: dict[str, NodeHandle], accept: object, prefix: bytes = b"k") -> bytes:
    """A key whose group (a ``SlotGroup``) and slot ``accept(group, slot)`` likes."""
    keys = nodes["a"].node.keys
    assert keys is not None
    for n in range(100_000):
        key = b"%s-%d" % (prefix, n)
        slot = hash_slot(key)
        if accept(keys.layout.group_of_slot(slot), slot):  # type: ignore[operator]
            return key
    raise AssertionError("no such key")


async def test_a_script_keeps_to_its_slot_and_to_keys_led_where_it_runs(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """As on a Redis Cluster node: a script's command on another group's key, or (without
    ``allow-cross-slot-keys``) on another slot than the script's, is refused, and nothing of
    another group is changed; a script with the ``no-cluster`` flag does not run."""
    nodes = await start_nodes(nursery, tmp_path)
    led = await until(lambda: leaders(nodes))
    mine = key_of(nodes, lambda group, slot: True)
    keys = nodes["a"].node.keys
    assert keys is not None
    group = keys.layout.group_of(mine)
    elsewhere = key_of(nodes, lambda g, slot: g.name != group.name)
    beside = key_of(nodes, lambda g, slot: g.name == group.name and slot != hash_slot(mine))
    script = "redis.call('SET', KEYS[1], 'a') return redis.call('SET', ARGV[1], 'b')"
    for node in nodes.values():
        with pytest.raises(redis.ResponseError, match="non local key in a cluster node"):
            await call(node, "EVAL", script, 1, mine, elsewhere)
        with pytest.raises(redis.ResponseError, match="do not hash to the same slot"):
            await call(node, "EVAL", script, 1, mine, beside)
    assert await call(nodes["a"], "GET", mine) == b"a"  # (what ran before the refusal stays)
    for key in (elsewhere, beside):
        assert await call(nodes["b"], "EXISTS", key) == 0
        for handle in nodes.values():
            assert held(handle, key) is None
    crossing = "#!lua flags=allow-cross-slot-keys\n" + script
    assert await call(nodes["c"], "EVAL", crossing, 1, mine, beside) == b"OK"
    assert await call(nodes["a"], "GET", beside) == b"b"

    # Without declared keys, a script runs where it is sent: on keys that node leads, or refused.
    stranger = next(name for name in NAMES if set(led.values()) != {name})
    foreign = key_of(nodes, lambda g, slot: led[g.name] != stranger, b"foreign")
    with pytest.raises(redis.ResponseError, match="non local key in a cluster node"):
        await call(nodes[stranger], "EVAL", "return redis.call('SET', ARGV[1], 'x')", 0, foreign)
    assert await call(nodes[stranger], "EXISTS", foreign) == 0
    with pytest.raises(redis.ResponseError, match="'no-cluster' flag is set"):
        await call(nodes["a"], "EVAL", "#!lua flags=no-cluster\nreturn 1", 0)


async def test_a_blocked_group_read_served_by_a_write_is_answered_once_committed(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """XREADGROUP ... BLOCK on the leader, served by another client's XADD: its reply (held until
    the group committed the delivery) reaches it with nothing more sent, and the delivery is on
    every replica (the entry is pending for the consumer there too). The read creates its
    consumer, a change the group commits too: the XADD often comes while that commit is under
    way, and the delivery's commit must then be awaited after it."""
    nodes = await start_nodes(nursery, tmp_path)
    leader, key = await a_led_key(nodes)
    assert await call(nodes[leader], "XGROUP", "CREATE", key, "g", "$", "MKSTREAM") == b"OK"
    read = ["XREADGROUP", "GROUP", "g", "c1", "BLOCK", "30000", "STREAMS", key, ">"]
    got: list[object] = []

    async def reader(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        got.append(await call(nodes[leader], *read))

    with trio.fail_after(20):  # (well before the read's own timeout)
        async with trio.open_nursery() as readers:
            await readers.start(reader)
            await until(lambda: blocked(nodes[leader]) == 1)
            added = await call(nodes[leader], "XADD", key, "*", "f", "v")
    assert got == [[[key, [(added, {b"f": b"v"})]]]]
    for handle in nodes.values():
        await until(lambda handle=handle: pending(handle, key) == 1)  # type: ignore[misc]


def pending(handle: NodeHandle, key: bytes) -> int:
    """Entries pending for group ``g`` of stream ``key`` in this node's own replica."""
    stream = held(handle, key)
    return len(stream.groups[b"g"].pel) if isinstance(stream, Stream) else -1


def blocked(handle: NodeHandle) -> int:
    clients = handle.server.broker.clients.values()
    return sum(1 for c in clients if isinstance(c, RespConnection) and c.blocking.read is not None)
