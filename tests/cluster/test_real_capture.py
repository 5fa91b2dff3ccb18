"""A stream on one node of a super-cluster captures what NATS and Redis clients publish anywhere.

East (e1 and e2, joined by a route) and west (w1, across a gateway), over real sockets, every node
with a Redis port. Only e1 holds the stream ``events``; the others learn its interest as they learn
any subscriber's. A redis-py ``XREAD BLOCK`` waiting on e1 wakes when a capture adds, and a NATS
request from the far cluster gets the JSON acknowledgement.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis.asyncio
import trio

from node.config.options import Config, RedisConfig, StreamConfig
from node.run.launch import NodeHandle
from tests.cluster.test_real_gateways import knows, start_supercluster
from tests.support import W, connect, eventually, in_asyncio, until

pytestmark = pytest.mark.timeout(60)

BASE = Config(redis=RedisConfig(host="127.0.0.1", port=0))
EVENTS = StreamConfig("events", ("orders.>", "$R.>"))


def client(node: NodeHandle) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(host="127.0.0.1", port=node.redis_port or 0, socket_timeout=W)


async def start(nursery: trio.Nursery) -> tuple[NodeHandle, NodeHandle, NodeHandle]:
    """e1 (holding the stream), e2 and w1, once every link is up and west knows the interest."""
    e1, e2, w1 = await start_supercluster(nursery, BASE, e1_config=BASE.evolve(streams=(EVENTS,)))
    await until(lambda: bool(e2.server.broker.route_interest.match_remote("$G", "orders.x").links))
    await until(knows(w1, "orders.x"))
    await until(knows(w1, "$R.00"))
    return e1, e2, w1


async def test_captures_nats_and_redis_publishes_from_every_node(nursery: trio.Nursery) -> None:
    e1, e2, w1 = await start(nursery)

    async def scenario() -> list[tuple[bytes, dict[bytes, bytes]]]:
        reader, writer_e2, writer_w1 = client(e1), client(e2), client(w1)
        nats_e2, nats_w1 = await connect(e2), await connect(w1)
        blocked = asyncio.ensure_future(reader.xread({"events": "$"}, block=int(W * 1000)))
        await eventually(lambda: bool(e1.server.broker.keyspaces.database("$G", 0)._blocked))

        await nats_e2.publish("orders.1", b"one", headers={"Trace": "t1", "X-Kind": "new"})
        woken: Any = await asyncio.wait_for(blocked, W)  # over the route, and the blocked read woke
        [[name, [(first_id, first)]]] = woken
        assert name == b"events"
        assert first == {
            b"subject": b"orders.1",
            b"data": b"one",
            b"header:Trace": b"t1",
            b"header:X-Kind": b"new",
        }

        ack = await nats_w1.request("orders.2", b"two", timeout=W)  # across the gateway
        answer = json.loads(ack.data)
        assert answer["stream"] == "events"
        assert await writer_w1.publish("orders.3", b"three") == 0  # (nobody on w1 itself)
        assert await writer_e2.publish("hello world", b"four") == 0  # a channel that is no subject
        await nats_e2.publish("elsewhere", b"not captured")
        await eventually(lambda: _length(e1) == 4)
        entries: Any = await reader.xrange("events")
        assert entries[0][0] == first_id
        assert entries[1][0] == answer["id"].encode()  # acknowledged with the ID it got
        for each in (reader, writer_e2, writer_w1):
            await each.aclose()
        await nats_e2.close()
        await nats_w1.close()
        return [(entry_id, fields) for entry_id, fields in entries]

    entries = await in_asyncio(scenario)
    assert [fields for _, fields in entries[1:]] == [
        {b"subject": b"orders.2", b"data": b"two"},
        {b"subject": b"orders.3", b"data": b"three"},
        {b"subject": b"hello world", b"data": b"four"},
    ]
    ids = [entry_id for entry_id, _ in entries]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split(b"-"))))


def _length(node: NodeHandle) -> int:
    stream = node.server.broker.keyspaces.database("$G", 0).stream(b"events", 0)
    return 0 if stream is None else stream.length
