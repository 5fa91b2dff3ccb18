"""Real Redis clients (redis-py sync and asyncio, RESP2 and RESP3, redis-cli) against a real node,
meeting NATS clients (nats-py) on the same subjects, on one node and across a 2-node cluster."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from typing import Any

import nats
import pytest
import redis
import redis.asyncio
import trio

from cluster.config import ClusterConfig
from node.config.options import Config, Permissions, SubjectRule, UserConfig
from node.run.launch import NodeHandle
from tests.support import in_asyncio, start_redis_node

pytestmark = pytest.mark.timeout(60)

W = 5.0  # every wait in a scenario is bounded by this


@pytest.fixture
async def node(nursery: trio.Nursery) -> NodeHandle:
    return await start_redis_node(nursery)


def sync_client(handle: NodeHandle, **options: Any) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=handle.redis_port or 0, socket_timeout=W, **options)


def next_message(pubsub: Any) -> dict[str, Any]:
    """The next delivery (not an acknowledgement), within the bound."""
    deadline = time.monotonic() + W
    while time.monotonic() < deadline:
        msg = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if msg is not None:
            return dict(msg)
    raise AssertionError("no message")


@pytest.mark.parametrize("protocol", [2, 3])
async def test_redis_py_sync_pubsub_with_patterns(node: NodeHandle, protocol: int) -> None:
    def scenario() -> None:
        sub, pub = sync_client(node, protocol=protocol), sync_client(node, protocol=protocol)
        assert pub.ping() is True
        assert pub.echo("x") == b"x"
        ps = sub.pubsub()
        ps.subscribe("news", "hello world")
        ps.psubscribe("n*")
        for _ in range(3):
            assert ps.get_message(timeout=W) is not None  # the three acknowledgements
        assert pub.publish("news", "a") == 2
        assert next_message(ps) == {"type": "message", "pattern": None, "channel": b"news", "data": b"a"}
        assert next_message(ps) == {
            "type": "pmessage",
            "pattern": b"n*",
            "channel": b"news",
            "data": b"a",
        }
        assert pub.publish("hello world", "b") == 1
        assert next_message(ps)["channel"] == b"hello world"
        assert sorted(pub.pubsub_channels()) == [b"hello world", b"news"]
        assert pub.pubsub_numsub("news", "nope") == [(b"news", 1), (b"nope", 0)]
        assert pub.pubsub_numpat() == 1
        ps.close()
        sub.close()
        pub.close()

    await trio.to_thread.run_sync(scenario)


async def test_redis_py_asyncio_resp3(node: NodeHandle) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=node.redis_port or 0, protocol=3)
        ps = client.pubsub()
        await ps.subscribe("a.b")
        assert (await ps.get_message(timeout=W))["type"] == "subscribe"
        publisher = redis.asyncio.Redis(host="127.0.0.1", port=node.redis_port or 0, protocol=3)
        assert await publisher.publish("a.b", "hi") == 1
        msg = await ps.get_message(ignore_subscribe_messages=True, timeout=W)
        assert msg is not None
        assert msg["data"] == b"hi"
        info = await publisher.info("server")
        assert info["redis_version"]
        await ps.aclose()
        await client.aclose()
        await publisher.aclose()

    await in_asyncio(scenario)


async def test_cross_protocol_both_ways(node: NodeHandle) -> None:
    async def scenario() -> None:
        nc = await asyncio.wait_for(nats.connect(f"nats://127.0.0.1:{node.port}"), W)
        from_redis: asyncio.Queue[Any] = asyncio.Queue()

        async def take(msg: Any) -> None:
            await from_redis.put(msg)

        await nc.subscribe("orders.*", cb=take)
        await nc.flush(5)
        r = redis.asyncio.Redis(host="127.0.0.1", port=node.redis_port or 0)
        ps = r.pubsub()
        await ps.subscribe("orders.eu")
        await ps.psubscribe("ord*")
        for _ in range(2):
            await ps.get_message(timeout=W)
        publisher = redis.asyncio.Redis(host="127.0.0.1", port=node.redis_port or 0)
        assert await publisher.publish("orders.eu", "from redis") == 3
        msg = await asyncio.wait_for(from_redis.get(), W)
        assert (msg.subject, msg.data) == ("orders.eu", b"from redis")
        for _ in range(2):  # the redis subscriber's own copies of it
            await ps.get_message(ignore_subscribe_messages=True, timeout=W)
        await nc.publish("orders.eu", b"from nats", reply="ignored")
        await nc.flush(5)
        got = [await ps.get_message(ignore_subscribe_messages=True, timeout=W) for _ in range(2)]
        assert [(m["type"], m["channel"], m["data"]) for m in got if m] == [
            ("message", b"orders.eu", b"from nats"),
            ("pmessage", b"orders.eu", b"from nats"),
        ]
        await ps.aclose()
        await r.aclose()
        await publisher.aclose()
        await nc.close()

    await in_asyncio(scenario)


async def test_nats_wildcards_never_see_redis_only_channels(node: NodeHandle) -> None:
    async def scenario() -> None:
        nc = await asyncio.wait_for(nats.connect(f"nats://127.0.0.1:{node.port}"), W)
        seen: list[str] = []
        two = asyncio.Event()

        async def take(msg: Any) -> None:
            seen.append(msg.subject)
            if len(seen) == 2:
                two.set()

        for subject in (">", "*.*", "*"):
            await nc.subscribe(subject, cb=take)
        await nc.flush(5)
        publisher = redis.asyncio.Redis(host="127.0.0.1", port=node.redis_port or 0)
        assert await publisher.publish("hello world", "x") == 0  # travels as $R.<hex>
        assert await publisher.publish("", "x") == 0
        assert await publisher.publish("hello.world", "x") == 2  # a subject: > and *.*
        await nc.flush(5)
        await asyncio.wait_for(two.wait(), W)
        await asyncio.sleep(0.1)  # (room for a copy that should not come)
        assert seen == ["hello.world", "hello.world"]
        await publisher.aclose()
        await nc.close()

    await in_asyncio(scenario)


async def test_channel_subscriptions_cross_a_cluster(nursery: trio.Nursery) -> None:
    cluster = ClusterConfig(name="mesh", host="127.0.0.1", port=0)
    a = await start_redis_node(nursery, Config(server_name="a", cluster=cluster))
    seeds = (f"nats://127.0.0.1:{a.cluster_port}",)
    b = await start_redis_node(nursery, Config(server_name="b", cluster=cluster.evolve(seeds=seeds)))

    def scenario() -> None:
        sub, pub = sync_client(b), sync_client(a)
        ps = sub.pubsub()
        ps.subscribe("hello world", "plain.subject")
        ps.get_message(timeout=W)
        ps.get_message(timeout=W)
        deadline = time.monotonic() + 10
        while True:  # until b's interest has reached a
            pub.publish("plain.subject", "ping")
            msg = ps.get_message(ignore_subscribe_messages=True, timeout=0.2)
            if msg is not None:
                break
            assert time.monotonic() < deadline, "interest never crossed the route"
        assert pub.publish("hello world", "x") == 0  # no receivers on a itself
        while True:  # (past any later copies of "ping")
            msg = next_message(ps)
            if msg["channel"] == b"hello world":
                break
        assert msg == {"type": "message", "pattern": None, "channel": b"hello world", "data": b"x"}
        ps.close()

    await trio.to_thread.run_sync(scenario)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="needs redis-cli")
async def test_redis_cli(node: NodeHandle) -> None:
    def scenario() -> None:
        port = str(node.redis_port)
        cli = ["redis-cli", "-h", "127.0.0.1", "-p", port]
        assert subprocess.run([*cli, "PING"], capture_output=True, timeout=W).stdout == b"PONG\n"
        listener = subprocess.Popen([*cli, "SUBSCRIBE", "cli"], stdout=subprocess.PIPE)
        try:
            deadline = time.monotonic() + W
            while True:
                out = subprocess.run([*cli, "PUBLISH", "cli", "hi"], capture_output=True, timeout=W)
                if out.stdout == b"1\n":
                    break
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            time.sleep(0.2)
            listener.terminate()
            stdout, _ = listener.communicate(timeout=W)
        assert stdout.split(b"\n")[:6] == [b"subscribe", b"cli", b"1", b"message", b"cli", b"hi"]

    await trio.to_thread.run_sync(scenario)


@pytest.mark.slow
async def test_auth_and_permissions_with_redis_py(nursery: trio.Nursery) -> None:
    rules = Permissions(publish=SubjectRule(deny=("secret",)))
    users = (UserConfig(user="alice", password="pw", permissions=rules),)
    node = await start_redis_node(nursery, Config(users=users))

    def scenario() -> None:
        with pytest.raises(redis.AuthenticationError):
            sync_client(node).ping()
        with pytest.raises(redis.AuthenticationError):
            sync_client(node, username="alice", password="wrong").ping()
        alice = sync_client(node, username="alice", password="pw")
        assert alice.ping() is True
        with pytest.raises(redis.ResponseError, match=r"NOPERM|No permissions"):
            alice.publish("secret", "x")
        assert alice.publish("open", "x") == 0

    await trio.to_thread.run_sync(scenario)


async def test_connz_lists_redis_clients(nursery: trio.Nursery) -> None:
    node = await start_redis_node(nursery, Config(http_port=0))

    def scenario() -> list[dict[str, Any]]:
        import json
        import urllib.request

        client = sync_client(node, protocol=2)
        client.client_setname("lister")
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/connz", timeout=W) as r:
            return list(json.load(r)["connections"])

    conns = await trio.to_thread.run_sync(scenario)
    assert [(c["name"], c["type"], c["resp_version"]) for c in conns] == [("lister", "resp", 2)]


async def test_connection_limit_counts_redis_clients(nursery: trio.Nursery) -> None:
    node = await start_redis_node(nursery, Config(max_connections=1))

    def scenario() -> bytes:
        import socket

        with socket.create_connection(("127.0.0.1", node.redis_port or 0), timeout=W) as first:
            first.sendall(b"PING\r\n")
            assert first.recv(100) == b"+PONG\r\n"
            with socket.create_connection(("127.0.0.1", node.redis_port or 0), timeout=W) as second:
                return second.recv(100)

    assert await trio.to_thread.run_sync(scenario) == b"-ERR max number of clients reached\r\n"
    stats = node.node.broker.redis_stats  # (INFO's rejected_connections: counted once it is closed)
    while stats.rejected_connections != 1:  # noqa: ASYNC110 (nothing announces it)
        await trio.sleep(0.01)
