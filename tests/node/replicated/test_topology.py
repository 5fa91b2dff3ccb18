"""CLUSTER SLOTS, SHARDS, NODES, INFO, KEYSLOT and MYID where keys live on replica groups: the
placement as it is, in the shapes a redis-server cluster node answers with (compared side by side
with a real one), and redis-py's cluster client finding every node from one and working."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis
import redis.cluster
import trio

from cluster.placement import SLOTS, hash_slot
from node.replicated.topology import node_id
from node.run.launch import NodeHandle
from pipeline.local import free_port, redis_server
from tests.node.replicated.test_path import NAMES, leaders, start_nodes, stop
from tests.support import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

NODE_LINE = re.compile(
    r"[0-9a-f]{40} [0-9.]+:\d+@\d+ (myself,)?(master|slave) (-|[0-9a-f]{40}) \d+ \d+ \d+ connected"
    r"( \d+(-\d+)?)*\n"
)


def ask(port: int, *args: object, protocol: int = 2) -> object:
    """A command's reply as redis-py reads it, without its CLUSTER reply parsers."""
    with redis.Redis(host="127.0.0.1", port=port, protocol=protocol, socket_timeout=10) as conn:
        conn.response_callbacks.clear()
        return conn.execute_command(*args)


def shape(value: object) -> object:
    """What kinds of values a reply holds, and its maps' keys (not the values themselves)."""
    if isinstance(value, list):
        return [shape(item) for item in value]
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    return type(value).__name__


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Three redis-server cluster nodes with the slots split between them: one node's port."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("needs redis-server and redis-cli")
    directory = tmp_path_factory.mktemp("redis-cluster")
    with ExitStack() as stack:
        ports = [
            stack.enter_context(
                redis_server(
                    "--cluster-enabled",
                    "yes",
                    "--dir",
                    str(directory),
                    "--cluster-config-file",
                    f"nodes-{n}.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--cluster-port",  # (the default, port + 10000, may exceed 65535)
                    str(free_port()),
                )
            )
            for n in range(3)
        ]
        create = ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports)]
        subprocess.run([*create, "--cluster-yes"], check=True, capture_output=True, timeout=30)
        yield ports[0]


async def outcome(port: int, *args: object) -> object:
    """A command's reply, or its error's text."""
    try:
        return await reply_of(port, *args)
    except redis.ResponseError as exc:
        return str(exc)


async def reply_of(port: int, *args: object, protocol: int = 2) -> object:
    return await trio.to_thread.run_sync(lambda: ask(port, *args, protocol=protocol))


async def test_cluster_subcommands_describe_the_placement_as_a_cluster_node_would(
    nursery: trio.Nursery, tmp_path: Path, redis_cluster: int
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    led = await until(lambda: leaders(nodes))
    ports = {name: handle.redis_port or 0 for name, handle in nodes.items()}
    port = ports["a"]
    await until(lambda: all(p.redis_url for p in nodes["a"].node.routes.redis_peers()))  # type: ignore[union-attr]
    ids = {node_id(name): name for name in NAMES}

    # SLOTS: each group's range, its leader first, then its other voters, by Redis address.
    slots = await reply_of(port, "CLUSTER", "SLOTS")
    assert isinstance(slots, list)
    layout = nodes["a"].node.keys.layout  # type: ignore[union-attr]
    covered = 0
    for first, last, *entries in slots:
        assert first == covered
        covered = last + 1
        groups = [g for g in layout.groups if first <= g.first and g.end - 1 <= last]
        assert (groups[0].first, groups[-1].end - 1) == (first, last)
        assert all(led[g.name] == ids[entries[0][2].decode()] for g in groups)
        assert sorted(ids[e[2].decode()] for e in entries) == sorted(NAMES)
        for ip, port_of, ident, _ in entries:
            assert (ip, port_of) == (b"127.0.0.1", ports[ids[ident.decode()]])
    assert covered == SLOTS
    for protocol in (2, 3):
        theirs = await reply_of(redis_cluster, "CLUSTER", "SLOTS", protocol=protocol)
        ours = await reply_of(port, "CLUSTER", "SLOTS", protocol=protocol)
        assert isinstance(theirs, list)
        assert isinstance(ours, list)
        expected = shape(theirs[0])  # (start, end, then each node alike)
        assert isinstance(expected, list)
        for row in ours:
            got = shape(row)
            assert isinstance(got, list)
            assert got[:2] == expected[:2]
            assert all(entry == expected[2] for entry in got[2:])

    # SHARDS: one per group, with every voter's details as a cluster node gives them.
    for protocol in (2, 3):
        theirs = await reply_of(redis_cluster, "CLUSTER", "SHARDS", protocol=protocol)
        ours = await reply_of(port, "CLUSTER", "SHARDS", protocol=protocol)
        assert isinstance(theirs, list)
        assert isinstance(ours, list)
        assert len(ours) == len(layout.groups)
        for shard in ours:
            assert _keys(shard) == _keys(theirs[0])
            assert shape(_field(shard, b"slots")) == shape(_field(theirs[0], b"slots"))
        master_of_theirs = _nodes_of(theirs[0])[0]
        for shard in ours:
            roles: list[bytes] = []
            for node in _nodes_of(shard):
                assert _keys(node) == _keys(master_of_theirs)
                role = _field(node, b"role")
                assert isinstance(role, bytes)
                roles.append(role)
            assert sorted(roles) == [b"master", b"replica", b"replica"]

    # NODES: one line per member, a leader as a master of the ranges it leads.
    theirs_text = await reply_of(redis_cluster, "CLUSTER", "NODES")
    text = await reply_of(port, "CLUSTER", "NODES")
    assert isinstance(text, bytes)
    assert isinstance(theirs_text, bytes)
    for line in [*theirs_text.decode().splitlines(True), *text.decode().splitlines(True)]:
        assert NODE_LINE.fullmatch(line), line
    lines = text.decode().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(ids)
    assert sum("myself" in line for line in lines) == 1
    assert node_id("a") in next(line for line in lines if "myself" in line)

    # INFO: the same fields; every slot served.
    theirs_info = await reply_of(redis_cluster, "CLUSTER", "INFO")
    info = await reply_of(port, "CLUSTER", "INFO")
    assert isinstance(theirs_info, bytes)
    assert isinstance(info, bytes)
    fields = dict(line.split(":") for line in info.decode().split("\r\n") if line)
    named = list(fields)
    theirs_named = [
        line.split(":")[0]
        for line in theirs_info.decode().split("\r\n")
        if line and not re.fullmatch(r"cluster_stats_messages_\w+_(sent|received):\d+", line)
    ]
    assert named == theirs_named
    assert fields["cluster_state"] == "ok"
    assert fields["cluster_slots_ok"] == str(SLOTS)

    assert await reply_of(port, "CLUSTER", "KEYSLOT", "{user1}.a") == hash_slot(b"user1")
    assert await reply_of(port, "CLUSTER", "KEYSLOT", "{user1}.a") == await reply_of(
        redis_cluster, "CLUSTER", "KEYSLOT", "{user1}.a"
    )
    assert await reply_of(port, "CLUSTER", "MYID") == node_id("a").encode()

    # COUNTKEYSINSLOT, GETKEYSINSLOT: this node's keys, and a cluster node's errors.
    for args in [
        ("COUNTKEYSINSLOT", "x"), ("COUNTKEYSINSLOT", "16384"), ("COUNTKEYSINSLOT", "-1"),
        ("GETKEYSINSLOT", "0", "-1"), ("GETKEYSINSLOT", "x", "1"), ("GETKEYSINSLOT", "1", "x"),
        ("GETKEYSINSLOT", "16384", "1"), ("COUNTKEYSINSLOT", "0"), ("GETKEYSINSLOT", "0", "5"),
    ]:  # fmt: skip
        assert await outcome(port, "CLUSTER", *args) == await outcome(redis_cluster, "CLUSTER", *args)
    slot = hash_slot(b"t")
    assert await reply_of(port, "MSET", "{t}a", "1", "{t}b", "2") == b"OK"
    assert await reply_of(port, "CLUSTER", "COUNTKEYSINSLOT", slot) == 2
    one = await reply_of(port, "CLUSTER", "GETKEYSINSLOT", slot, 1)
    assert isinstance(one, list)
    assert len(one) == 1
    found = await reply_of(port, "CLUSTER", "GETKEYSINSLOT", slot, 10)
    assert isinstance(found, list)
    assert sorted(found) == [b"{t}a", b"{t}b"]


def _nodes_of(shard: object) -> list[object]:
    nodes = _field(shard, b"nodes")
    assert isinstance(nodes, list)
    return nodes


def _field(mapping: object, key: bytes) -> object:
    """A field of a map as RESP2 (a flat list) or RESP3 (a dict) brings it."""
    if isinstance(mapping, dict):
        return mapping[key]
    assert isinstance(mapping, list)
    return mapping[mapping.index(key) + 1]


def _keys(mapping: object) -> list[object]:
    if isinstance(mapping, dict):
        return list(mapping)
    assert isinstance(mapping, list)
    return mapping[::2]


async def test_redis_pys_cluster_client_finds_every_node_from_one(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    await until(lambda: leaders(nodes))
    handle: NodeHandle = nodes["b"]
    await until(lambda: all(p.redis_url for p in handle.node.routes.redis_peers()))  # type: ignore[union-attr]

    def use() -> tuple[int, object, object, int]:
        client = redis.cluster.RedisCluster(host="127.0.0.1", port=handle.redis_port or 0)
        try:
            found = len(client.get_nodes())
            for n in range(20):
                client.set(f"k{n}", n)
            got = client.get("k7")
            added = client.xadd("orders", {"n": "1"})
            return found, got, added, client.xlen("orders")
        finally:
            client.close()

    found, got, added, length = await trio.to_thread.run_sync(use)
    assert found == len(NAMES)
    assert got == b"7"
    assert isinstance(added, bytes)
    assert length == 1


async def test_a_node_that_went_away_is_shown_disconnected_and_serves_no_slots(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    led = await until(lambda: leaders(nodes))
    # (a node that leads no group, if the elections left one; else its groups elect again)
    gone = next((name for name in NAMES if name not in led.values()), NAMES[0])
    asked = next(name for name in NAMES if name != gone)
    routes = nodes[asked].node.routes
    assert routes is not None
    await until(lambda: all(p.redis_url for p in routes.redis_peers()))
    await stop(nodes[gone])
    await until(lambda: not next(p for p in routes.redis_peers() if p.name == gone).connected)
    live = {name: handle for name, handle in nodes.items() if name != gone}
    await until(lambda: (now := leaders(live)) is not None and gone not in now.values())
    port = nodes[asked].redis_port or 0

    text = await reply_of(port, "CLUSTER", "NODES")
    assert isinstance(text, bytes)
    line = next(line for line in text.decode().splitlines() if line.startswith(node_id(gone)))
    assert " slave,fail? " in line
    assert line.endswith(" disconnected")
    slots = await reply_of(port, "CLUSTER", "SLOTS")
    assert isinstance(slots, list)
    assert all(entry[2] != node_id(gone).encode() for row in slots for entry in row[2:])
    shards = await reply_of(port, "CLUSTER", "SHARDS")
    assert isinstance(shards, list)
    health = {
        _field(node, b"id"): _field(node, b"health") for shard in shards for node in _nodes_of(shard)
    }
    assert health[node_id(gone).encode()] == b"fail"


async def test_cluster_failover_makes_a_node_lead_the_groups_it_follows(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """CLUSTER FAILOVER on a node: it campaigns for every group it holds a follower replica of
    (Raft elects it, its log being complete), and answers as a master would once it leads all."""
    nodes = await start_nodes(nursery, tmp_path)
    led = await until(lambda: leaders(nodes))
    # (the node leading fewest groups, so that some change hands)
    taker = min(NAMES, key=lambda name: sum(leader == name for leader in led.values()))
    port = nodes[taker].redis_port or 0
    assert await reply_of(port, "SET", "before", "1") == b"OK"
    for option in ("NOW", "FORCE TAKEOVER"):
        with pytest.raises(redis.ResponseError, match="syntax error"):
            await reply_of(port, "CLUSTER", "FAILOVER", *option.split())

    assert await reply_of(port, "CLUSTER", "FAILOVER") == b"OK"
    await until(lambda: (now := leaders(nodes)) is not None and set(now.values()) == {taker})
    with pytest.raises(redis.ResponseError, match="You should send CLUSTER FAILOVER to a replica"):
        await reply_of(port, "CLUSTER", "FAILOVER", "TAKEOVER")
    assert await reply_of(port, "GET", "before") == b"1"  # (nothing committed was lost)
    assert await reply_of(port, "SET", "after", "2") == b"OK"
