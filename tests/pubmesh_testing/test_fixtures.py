"""The pytest plugin's fixtures and the embedding API, used as another project would: from plain
tests running asyncio (nats-py, redis-py), and from trio tests."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request

import nats
import pytest
import redis
import trio
from nats.aio.client import Client

from node.config.options import Config, UserConfig
from pubmesh_testing import (
    RunningCluster,
    RunningNode,
    RunningSuperCluster,
    running_cluster,
    running_node,
)

pytestmark = pytest.mark.timeout(60)
W = 10.0


def test_the_plugin_is_registered_by_its_entry_point(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.has_plugin("pubmesh")


async def round_trip(subscribe_at: str, publish_at: str, subject: str = "greetings") -> bytes:
    """Subscribe at one URL, publish at another, and return what arrived."""
    sub_client = await nats.connect(subscribe_at, allow_reconnect=False)
    pub_client = await nats.connect(publish_at, allow_reconnect=False)
    try:
        sub = await sub_client.subscribe(subject)
        await sub_client.flush()
        # Interest reaches other nodes a moment after the SUB; keep publishing until it has.
        async with asyncio.timeout(W):
            while True:
                await pub_client.publish(subject, b"hello")
                try:
                    return (await sub.next_msg(timeout=0.1)).data
                except nats.errors.TimeoutError:
                    continue
    finally:
        await sub_client.close()
        await pub_client.close()


def test_a_node_from_asyncio(pubmesh_node: RunningNode) -> None:
    assert pubmesh_node.client_url.startswith("nats://127.0.0.1:")
    assert asyncio.run(round_trip(pubmesh_node.client_url, pubmesh_node.client_url)) == b"hello"


def test_its_redis_and_monitoring_ports(pubmesh_node: RunningNode) -> None:
    assert pubmesh_node.redis_url is not None
    assert pubmesh_node.monitoring_url is not None
    with redis.Redis.from_url(pubmesh_node.redis_url, socket_timeout=W) as client:
        assert client.xadd("events", {"n": "1"})
        assert client.xlen("events") == 1
    with urllib.request.urlopen(pubmesh_node.monitoring_url + "/varz", timeout=W) as reply:
        varz = json.load(reply)
    assert varz["port"] == pubmesh_node.port
    assert varz["server_name"] == pubmesh_node.name
    # Its state, looked at from its own loop.
    assert pubmesh_node.call(lambda: len(pubmesh_node.handle.server.broker.clients)) == 0


async def test_a_node_from_trio(pubmesh_node: RunningNode) -> None:
    with trio.fail_after(W):
        stream = await trio.open_tcp_stream("127.0.0.1", pubmesh_node.port)
        await stream.send_all(b'CONNECT {"verbose":false}\r\nSUB t 1\r\nPUB t 2\r\nhi\r\nPING\r\n')
        got = b""
        while not got.endswith(b"PONG\r\n"):
            got += await stream.receive_some(65536)
        await stream.aclose()
    assert got.startswith(b"INFO ")
    assert got.endswith(b"MSG t 1 2\r\nhi\r\nPONG\r\n")


def test_a_cluster(pubmesh_cluster: RunningCluster) -> None:
    assert len(pubmesh_cluster) == 3
    assert len(set(pubmesh_cluster.client_urls)) == 3
    first, _, last = pubmesh_cluster
    assert asyncio.run(round_trip(first.client_url, last.client_url)) == b"hello"


def test_a_cluster_waits_for_interest(pubmesh_cluster: RunningCluster) -> None:
    async def scenario() -> bytes:
        sub_client = await nats.connect(pubmesh_cluster[0].client_url, allow_reconnect=False)
        pub_client = await nats.connect(pubmesh_cluster[2].client_url, allow_reconnect=False)
        sub = await sub_client.subscribe("orders")
        await sub_client.flush()
        await asyncio.to_thread(pubmesh_cluster.wait_for_interest, "orders")
        await pub_client.publish("orders", b"once")  # once is enough now
        data = (await sub.next_msg(timeout=W)).data
        await sub_client.close()
        await pub_client.close()
        return data

    assert asyncio.run(scenario()) == b"once"


def test_a_supercluster(pubmesh_supercluster: RunningSuperCluster) -> None:
    east, west = pubmesh_supercluster["east"], pubmesh_supercluster["west"]
    assert (len(east), len(west)) == (2, 1)
    assert asyncio.run(round_trip(west[0].client_url, east[1].client_url)) == b"hello"
    assert asyncio.run(round_trip(east[0].client_url, west[0].client_url)) == b"hello"


async def test_a_supercluster_from_trio(pubmesh_supercluster: RunningSuperCluster) -> None:
    west = pubmesh_supercluster["west"][0]
    east = pubmesh_supercluster["east"][0]
    with trio.fail_after(W):
        sub = await trio.open_tcp_stream("127.0.0.1", west.port)
        await sub.send_all(b'CONNECT {"verbose":false}\r\nSUB far 1\r\nPING\r\n')
        got = b""
        while b"PONG\r\n" not in got:
            got += await sub.receive_some(65536)
        await trio.to_thread.run_sync(pubmesh_supercluster.wait_for_interest, "far")
        pub = await trio.open_tcp_stream("127.0.0.1", east.port)
        await pub.send_all(b'CONNECT {"verbose":false}\r\nPUB far 5\r\nhello\r\nPING\r\n')
        got = b""
        while b"hello\r\n" not in got:
            got += await sub.receive_some(65536)
        for stream in (sub, pub):
            await stream.aclose()
    assert got.endswith(b"MSG far 1 5\r\nhello\r\n")


class TestWithUsers:
    """``pubmesh_config`` overridden: every fixture's nodes take it."""

    @pytest.fixture
    def pubmesh_config(self) -> Config:
        return Config(users=(UserConfig(user="app", password="secret"),))

    def test_credentials_are_required(self, pubmesh_node: RunningNode) -> None:
        async def scenario() -> str:
            client = Client()
            try:
                await client.connect(
                    pubmesh_node.client_url, allow_reconnect=False, max_reconnect_attempts=0
                )
                outcome = "in"
            except Exception as exc:  # nats-py reports a refusal with several error types
                outcome = f"refused: {exc}"
            await client.close()
            good = await nats.connect(
                pubmesh_node.client_url.replace("nats://", "nats://app:secret@"),
                allow_reconnect=False,
            )
            await good.close()
            return outcome

        assert "authorization violation" in asyncio.run(scenario()).lower()


def test_embedding_without_pytest_fixtures() -> None:
    with running_node(redis=False, monitoring=False) as node:
        assert (node.redis_url, node.monitoring_url) == (None, None)
        assert asyncio.run(round_trip(node.client_url, node.client_url)) == b"hello"
        port = node.port
    # Stopped: its port is free again.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))
    with running_cluster(2, redis=False, monitoring=False) as cluster:
        assert asyncio.run(round_trip(cluster[0].client_url, cluster[1].client_url)) == b"hello"
