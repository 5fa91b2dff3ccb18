"""Redis channel and pattern interest across routes and gateways, with real redis-py and nats-py clients.

A super-cluster over real sockets (east: e1 and e2 joined by a route; west: w1, across a gateway),
every node with a Redis port and a monitoring port. The monitoring counters of e1's links show what
crossed them: a publish nobody on the far side wants crosses nothing, a wanted one crosses each
link once, and every subscription (channel, pattern, NATS) gets it exactly once.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio
import trio

from node.config.options import Config, RedisConfig
from node.run.launch import NodeHandle
from routing import channel_subject
from tests.cluster.test_real_cluster import start_cluster
from tests.cluster.test_real_gateways import start_supercluster
from tests.support import Box, W, connect, eventually, in_asyncio

pytestmark = pytest.mark.timeout(60)

NODES = Config(redis=RedisConfig(host="127.0.0.1", port=0), http_port=0)


def client(node: NodeHandle) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(host="127.0.0.1", port=node.redis_port or 0, socket_timeout=W)


def crossed(node: NodeHandle) -> tuple[int, int]:
    """Messages ``node`` has sent over its routes and over its outbound gateways, from monitoring."""

    def get(path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}{path}", timeout=W) as reply:
            return json.load(reply)

    routes = sum(route["out_msgs"] for route in get("/routez")["routes"])
    outbound = get("/gatewayz")["outbound_gateways"].values()
    return routes, sum(gateway["connection"]["out_msgs"] for gateway in outbound)


def wants(node: NodeHandle, channel: bytes, *, routes: int, gateways: int) -> Callable[[], bool]:
    """Whether ``node`` has heard from that many links that something wants ``channel``."""
    subject = channel_subject(channel).decode()

    def check() -> bool:
        broker = node.server.broker
        by_route = broker.route_interest.match_remote("$G", subject).links
        by_gateway = broker.gateway_interest.match_remote("$G", subject).links
        return len(by_route) == routes and len(by_gateway) == gateways

    return check


Seen = tuple[str, bytes | None, bytes, bytes]
"""A message as a subscriber saw it: kind, pattern, channel, data."""


async def drain(pubsub: Any, count: int) -> list[Seen]:
    """The next ``count`` messages, sorted, then proof that nothing follows."""
    got: list[Seen] = []
    async with asyncio.timeout(W):
        while len(got) < count:
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
            if msg is not None:
                got.append((msg["type"], msg["pattern"], msg["channel"], msg["data"]))
    assert await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.3) is None
    return sorted(got, key=repr)


async def test_patterns_cross_links_only_where_wanted(nursery: trio.Nursery) -> None:
    e1, e2, w1 = await start_supercluster(nursery, NODES)

    async def scenario() -> None:
        at_w1, at_e2, publisher = client(w1).pubsub(), client(e2).pubsub(), client(e1)
        await at_w1.psubscribe("ord*", "h?llo *")
        await at_e2.psubscribe("ord*")
        await at_e2.subscribe("orders.eu")
        nats_at_w1, nats_box = await connect(w1), Box()
        await nats_at_w1.subscribe("orders.>", cb=nats_box.take)
        await eventually(wants(e1, b"orders.eu", routes=1, gateways=1))
        await eventually(wants(e1, b"hello world", routes=0, gateways=1))

        async def publish(channel: str) -> int:
            return int(await publisher.publish(channel, f"to {channel}"))

        before = crossed(e1)
        for channel in ("zzz", "or", "hello", "x y"):  # nobody anywhere wants these
            assert await publish(channel) == 0
        assert crossed(e1) == before

        assert await publish("orders.eu") == 0  # (no receivers on e1 itself)
        after = crossed(e1)
        assert after == (before[0] + 1, before[1] + 1)  # one copy over the route, one over the gateway
        assert await drain(at_e2, 2) == [
            ("message", None, b"orders.eu", b"to orders.eu"),
            ("pmessage", b"ord*", b"orders.eu", b"to orders.eu"),
        ]
        assert await drain(at_w1, 1) == [("pmessage", b"ord*", b"orders.eu", b"to orders.eu")]
        await nats_box.wait_for(1)

        assert await publish("hello world") == 0  # only west wants it
        assert crossed(e1) == (after[0], after[1] + 1)
        assert await drain(at_w1, 1) == [("pmessage", b"h?llo *", b"hello world", b"to hello world")]
        assert await drain(at_e2, 0) == []
        assert nats_box.data == [b"to orders.eu"]

        await at_w1.punsubscribe()
        await eventually(wants(e1, b"hello world", routes=0, gateways=0))
        settled = crossed(e1)
        assert await publish("order") == 0
        assert crossed(e1) == (settled[0] + 1, settled[1])
        assert await drain(at_e2, 1) == [("pmessage", b"ord*", b"order", b"to order")]
        for each in (at_w1, at_e2):
            await each.aclose()
        await publisher.aclose()
        await nats_at_w1.close()

    await in_asyncio(scenario)


async def test_every_subscription_once_from_every_node_of_a_cluster(nursery: trio.Nursery) -> None:
    nodes = await start_cluster(nursery, 3, NODES)

    async def scenario() -> None:
        subs = [client(node).pubsub() for node in nodes]
        await subs[0].psubscribe("orders.*", "*")
        await subs[1].subscribe("orders.eu", "a b")
        await subs[1].psubscribe("a?b")
        await subs[2].psubscribe("[ab]*")
        box = Box()
        nats_clients = [await connect(node) for node in nodes]
        await nats_clients[2].subscribe("orders.>", cb=box.take)
        for node in nodes:  # each node hears of the others' interest
            others = len(nodes) - 1
            await eventually(wants(node, b"orders.eu", routes=others, gateways=0))
        await eventually(wants(nodes[0], b"a b", routes=2, gateways=0))
        publishers = [client(node) for node in nodes]
        for i, publisher in enumerate(publishers):
            await publisher.publish("orders.eu", f"redis {i}")
            await publisher.publish("a b", f"redis {i}")
            await nats_clients[i].publish("orders.eu", f"nats {i}".encode())
            await nats_clients[i].flush()
        sources = [f"{kind} {i}".encode() for i in range(3) for kind in ("redis", "nats")]
        redis_only = [f"redis {i}".encode() for i in range(3)]
        expected: dict[int, list[Seen]] = {
            0: [*(("pmessage", p, b"orders.eu", s) for p in (b"orders.*", b"*") for s in sources),
                *(("pmessage", b"*", b"a b", s) for s in redis_only)],
            1: [*(("message", None, b"orders.eu", s) for s in sources),
                *((kind, p, b"a b", s) for kind, p in (("message", None), ("pmessage", b"a?b"))
                  for s in redis_only)],
            2: [("pmessage", b"[ab]*", b"a b", s) for s in redis_only],
        }  # fmt: skip
        for i, pubsub in enumerate(subs):
            assert await drain(pubsub, len(expected[i])) == sorted(expected[i], key=repr), i
        await box.wait_for(len(sources))
        await asyncio.sleep(0.2)
        assert sorted(box.data) == sorted(sources)
        for pubsub in subs:
            await pubsub.aclose()
        for publisher in publishers:
            await publisher.aclose()
        for nc in nats_clients:
            await nc.close()

    await in_asyncio(scenario)
