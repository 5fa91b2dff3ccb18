"""The monitoring endpoints watching the Redis front door: a real node with a Redis port and a
monitoring port, real redis-py clients (and a NATS client on the same subjects), and /varz, /subsz,
/connz and /metrics read over HTTP after each step, always as valid JSON (or Prometheus text)."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from typing import Any

import pytest
import redis
import trio

from node.config.options import AccountConfig, Config, UserConfig
from node.run.launch import NodeHandle
from tests.node.monitoring.test_monitor import parse_metrics
from tests.support import start_node, start_redis_node

pytestmark = pytest.mark.timeout(60)

W = 5.0  # every wait in a scenario is bounded by this
HELLO_WORLD = "$R." + b"hello world".hex()
"""The subject of the channel "hello world", which is not a subject itself."""


async def start_monitored_node(nursery: trio.Nursery, config: Config | None = None) -> NodeHandle:
    """A node with a Redis port and a monitoring port; no system account, so the subscriptions
    these tests count are their clients' alone."""
    config = (config or Config()).evolve(http_port=0, no_system_account=True)
    return await start_redis_node(nursery, config)


def get(node: NodeHandle, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}{path}", timeout=W) as reply:
        assert reply.status == 200
        text: str = reply.read().decode()
        return text


def get_json(node: NodeHandle, path: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(get(node, path))
    return doc


def metrics(node: NodeHandle) -> dict[str, float]:
    return {key: value for key, (_, _, value) in parse_metrics(get(node, "/metrics")).items()}


def client(node: NodeHandle, **options: Any) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=node.redis_port or 0, socket_timeout=W, **options)


def acknowledged(pubsub: Any, count: int) -> None:
    """Read ``count`` subscribe acknowledgements: the node has acted on the commands before them."""
    for _ in range(count):
        assert pubsub.get_message(timeout=W) is not None


def nats_subscriber(node: NodeHandle, subject: str) -> socket.socket:
    """A NATS client subscribed to ``subject`` (PING/PONG: the subscription is in place)."""
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=W)
    sock.sendall(f"CONNECT {{}}\r\nSUB {subject} 1\r\nPING\r\n".encode())
    seen = b""
    while b"PONG\r\n" not in seen:
        data = sock.recv(4096)
        assert data, "the node closed the connection"
        seen += data
    return sock


async def test_varz_subsz_connz_and_metrics_follow_redis_clients(nursery: trio.Nursery) -> None:
    node = await start_monitored_node(nursery)

    def scenario() -> None:
        redis_block = get_json(node, "/varz")["redis"]
        assert redis_block == {
            "host": "127.0.0.1",
            "port": node.redis_port,
            "hard_limit": 32 * 1024 * 1024,
            "soft_limit": 8 * 1024 * 1024,
            "soft_seconds": 60.0,
            "connections": 0,
            "total_connections": 0,
            "subscriptions": 0,
            "channels": 0,
            "pattern_subscriptions": 0,
            "patterns": 0,
            "in_msgs": 0,
            "in_bytes": 0,
            "out_msgs": 0,
            "out_bytes": 0,
            "maxmemory": 0,
            "used_memory": node.node.broker.keyspaces.overhead,  # (the fixed part only)
        }
        nats_sub = nats_subscriber(node, "news")
        a, b = client(node, protocol=3, client_name="a"), client(node, client_name="b")
        publisher = client(node, client_name="pub")
        pa, pb = a.pubsub(), b.pubsub()
        pa.subscribe("news", "hello world")
        pa.psubscribe("n*", "h?llo*")
        acknowledged(pa, 4)
        pb.subscribe("news")
        pb.psubscribe("n*")
        acknowledged(pb, 2)
        # a and b, each by channel and pattern, and the NATS subscriber.
        assert publisher.publish("news", "12345") == 5
        assert publisher.publish("hello world", "xy") == 2

        varz = get_json(node, "/varz")
        assert (varz["connections"], varz["total_connections"], varz["subscriptions"]) == (4, 4, 4)
        redis_block = varz["redis"]
        assert {key: redis_block[key] for key in list(redis_block)[5:]} == {
            "connections": 3,
            "total_connections": 3,
            "subscriptions": 3,
            "channels": 2,
            "pattern_subscriptions": 3,
            "patterns": 2,
            "in_msgs": 2,
            "in_bytes": 7,
            "out_msgs": 6,
            "out_bytes": 4 * 5 + 2 * 2,
            "maxmemory": 0,
            "used_memory": node.node.broker.keyspaces.overhead,  # (the fixed part only)
        }
        assert varz["in_msgs"] == 2
        assert varz["out_msgs"] == 7  # the NATS subscriber's copy too

        subsz = get_json(node, "/subsz?subs=1")
        assert (subsz["num_subscriptions"], subsz["num_patterns"], subsz["total"]) == (4, 2, 4)
        subs = subsz["subscriptions_list"]
        listed = sorted((s["subject"], s.get("channel", ""), s["cid"]) for s in subs)
        cids = {c.get("name", ""): c["cid"] for c in get_json(node, "/connz")["connections"]}
        a_cid, b_cid, nats_cid = cids["a"], cids["b"], cids[""]
        assert listed == sorted(
            [
                (HELLO_WORLD, "hello world", a_cid),
                ("news", "news", a_cid),
                ("news", "news", b_cid),
                ("news", "", nats_cid),
            ]
        )
        assert subsz["patterns_total"] == 3
        assert subsz["patterns_list"] == [
            {"account": "$G", "pattern": "h?llo*", "subject": "$R.P.683f6c6c6f2a", "cid": a_cid},
            {"account": "$G", "pattern": "n*", "subject": "$R.P.6e2a", "cid": a_cid},
            {"account": "$G", "pattern": "n*", "subject": "$R.P.6e2a", "cid": b_cid},
        ]
        paged = get_json(node, "/subsz?subs=1&offset=1&limit=1")
        assert (paged["patterns_total"], paged["patterns_list"]) == (3, [subsz["patterns_list"][1]])
        # test: the channel subscriptions on that subject, and the patterns its channel matches.
        news = get_json(node, "/subsz?subs=1&test=news")
        assert (news["total"], news["patterns_total"]) == (3, 2)
        assert {p["pattern"] for p in news["patterns_list"]} == {"n*"}
        hello = get_json(node, f"/subsz?subs=1&test={HELLO_WORLD}")
        assert (hello["total"], hello["patterns_list"]) == (1, [subsz["patterns_list"][0]])
        assert "patterns_list" not in get_json(node, "/subsz")

        connz = get_json(node, f"/connz?subs=detail&cid={a_cid}")
        (conn,) = connz["connections"]
        assert (conn["type"], conn["resp_version"], conn["subscriptions"]) == ("resp", 3, 2)
        details = sorted((d["subject"], d["channel"]) for d in conn["subscriptions_list_detail"])
        assert details == [(HELLO_WORLD, "hello world"), ("news", "news")]

        series = metrics(node)
        assert series["pubmesh_redis_port"] == node.redis_port
        assert series["pubmesh_redis_connections"] == 3
        assert series["pubmesh_redis_total_connections"] == 3
        assert series["pubmesh_redis_subscriptions"] == 3
        assert series["pubmesh_redis_channels"] == 2
        assert series["pubmesh_redis_pattern_subscriptions"] == 3
        assert series["pubmesh_redis_patterns"] == 2
        assert series["pubmesh_redis_out_bytes"] == 24
        assert series["gnatsd_subsz_num_patterns"] == 2
        assert series["gnatsd_subsz_num_subscriptions"] == 4

        pa.punsubscribe("h?llo*")
        acknowledged(pa, 1)
        pb.close()
        b.close()
        publisher.close()  # (its connection was the one redis-py kept for publishing)
        deadline = time.monotonic() + W
        while (redis_block := get_json(node, "/varz")["redis"])["connections"] != 1:
            assert time.monotonic() < deadline, "closed Redis connections still counted"
            time.sleep(0.02)
        assert redis_block["total_connections"] == 3
        assert redis_block["subscriptions"] == 2
        assert redis_block["channels"] == 2
        assert (redis_block["pattern_subscriptions"], redis_block["patterns"]) == (1, 1)
        # Traffic of closed connections stays in the totals.
        assert (redis_block["in_msgs"], redis_block["out_msgs"], redis_block["out_bytes"]) == (2, 6, 24)
        assert get_json(node, "/subsz")["num_patterns"] == 1
        assert metrics(node)["pubmesh_redis_patterns"] == 1
        pa.close()
        a.close()
        nats_sub.close()

    await trio.to_thread.run_sync(scenario)


async def test_patterns_and_channels_are_counted_per_account(nursery: trio.Nursery) -> None:
    users = (UserConfig("ann", "pw", account="A"), UserConfig("bob", "pw", account="B"))
    config = Config(users=users, accounts=(AccountConfig("A"), AccountConfig("B")))
    node = await start_monitored_node(nursery, config)

    def scenario() -> None:
        ann, ann2, bob = (client(node, username=n, password="pw") for n in ("ann", "ann", "bob"))
        subscribers = [c.pubsub() for c in (ann, ann2, bob)]
        for pubsub in subscribers:
            pubsub.subscribe("ch")
            pubsub.psubscribe("x*")
            acknowledged(pubsub, 2)
        subscribers[2].ssubscribe("ch")  # a shard subscription of the same channel
        acknowledged(subscribers[2], 1)
        redis_block = get_json(node, "/varz")["redis"]
        # One channel and one pattern in each account; three clients subscribe to each.
        assert (redis_block["subscriptions"], redis_block["channels"]) == (4, 2)
        assert (redis_block["pattern_subscriptions"], redis_block["patterns"]) == (3, 2)
        assert get_json(node, "/subsz")["num_patterns"] == 2
        assert get_json(node, "/subsz?acc=A")["num_patterns"] == 1
        assert get_json(node, "/subsz?acc=B&subs=1")["total"] == 2
        (bob_conn,) = get_json(node, "/connz?subs=1&acc=B")["connections"]
        assert (bob_conn["subscriptions"], bob_conn["subscriptions_list"]) == (2, ["ch", "ch"])
        for pubsub in subscribers:
            pubsub.close()
        for c in (ann, ann2, bob):
            c.close()

    await trio.to_thread.run_sync(scenario)


async def test_without_a_redis_port_the_block_is_empty(nursery: trio.Nursery) -> None:
    node = await start_node(nursery, Config(http_port=0))

    def scenario() -> None:
        assert get_json(node, "/varz")["redis"] == {}
        assert get_json(node, "/subsz")["num_patterns"] == 0
        assert not any(name.startswith("pubmesh_redis") for name in metrics(node))

    await trio.to_thread.run_sync(scenario)
