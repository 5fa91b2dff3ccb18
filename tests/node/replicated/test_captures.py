"""Streams that capture subjects, on replicated keys: three nodes list the same stream, each message
is captured once (by the leader of the stream key's group), acknowledged once its group committed
it, and every replica holds the same entries, through the death of the leader."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats.errors
import pytest
import trio

from node.config.options import StreamConfig
from node.data.streams import parse_id
from tests.node.replicated.test_path import NAMES, entries, leaders, start_nodes, stop
from tests.support import connect, in_asyncio, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

ORDERS = StreamConfig(name="orders", subjects=("orders.>",))


async def publish(urls: list[str], first: int, count: int) -> tuple[list[bytes], int]:
    """Publish ``count`` messages as requests, each through the next URL, retrying one until it is
    acknowledged with an ID (within 20 s); the IDs, and how many attempts went unanswered."""

    async def scenario() -> tuple[list[bytes], int]:
        clients = [await connect(url) for url in urls]
        acked: list[bytes] = []
        unanswered = 0
        async with asyncio.timeout(20):
            for n in range(first, first + count):
                while True:
                    client = clients[n % len(clients)]
                    try:
                        msg = await client.request("orders.new", b"%d" % n, timeout=1)
                    except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                        unanswered += 1
                        await asyncio.sleep(0.05)
                        continue
                    answer = json.loads(msg.data)
                    if "id" in answer:
                        acked.append(answer["id"].encode())
                        break
                    assert answer["error"].startswith("CLUSTERDOWN"), answer
                    await asyncio.sleep(0.05)
        for client in clients:
            await client.close()
        return acked, unanswered

    return await in_asyncio(scenario)


async def test_a_replicated_stream_captures_each_message_once_and_survives_its_leader(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path, streams=(ORDERS,))
    led = await until(lambda: leaders(nodes))
    layout = nodes["a"].node.keys.layout  # type: ignore[union-attr]
    leader = led[layout.group_of(b"orders").name]
    captures = [h.node.captures for h in nodes.values()]
    await until(lambda: [c.streams[0].subscribed for c in captures if c] == [n == leader for n in NAMES])

    acked, _ = await publish([h.url for h in nodes.values()], 0, 30)
    ids = [parse_id(i) for i in acked]
    assert len(set(ids)) == 30
    for handle in nodes.values():  # (each message once, on every replica, in order)
        await until(lambda handle=handle: entries(handle, b"orders") == sorted(ids))  # type: ignore[misc]

    await stop(nodes[leader])
    live = {name: h for name, h in nodes.items() if name != leader}
    more, unanswered = await publish([h.url for h in live.values()], 30, 10)
    everything = ids + [parse_id(i) for i in more]
    assert len(set(everything)) == 40  # (no ID given twice, none reused after the failover)
    for handle in live.values():
        await until(lambda handle=handle: set(everything) <= set(entries(handle, b"orders")))  # type: ignore[misc]
    held = [entries(h, b"orders") for h in live.values()]
    assert held[0] == held[1]  # (the replicas agree)
    assert held[0] == sorted(held[0])
    assert len(held[0]) <= 40 + unanswered  # (only a retried message may be captured twice)
