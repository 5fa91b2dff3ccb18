"""Clusters over real sockets on 127.0.0.1, driven by the official nats-py client.

Nodes run in the test's trio nursery (so their state can be inspected), except where a process must
die with SIGKILL. Interest travels asynchronously, as in nats-server, so tests wait (bounded) for it
to reach the publishing node before publishing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable

import nats
import pytest
import trio
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from cluster.config import ClusterConfig
from node.config.options import AccountConfig, Config, UserConfig
from node.run.launch import NodeHandle
from pipeline.local import free_port
from tests.support import Box, W, connect, eventually, in_asyncio, settled, start_node, until

pytestmark = pytest.mark.timeout(60)

ROUTES = ClusterConfig(name="real", host="127.0.0.1", port=0, ping_interval=0.5, ping_max=3)


async def start_cluster(
    nursery: trio.Nursery, size: int, node_config: Config | None = None
) -> list[NodeHandle]:
    base = node_config or Config()
    first = await start_node(nursery, base.evolve(server_name="n1", cluster=ROUTES))
    seed = (f"nats://127.0.0.1:{first.cluster_port}",)
    nodes = [first]
    for i in range(2, size + 1):
        config = base.evolve(server_name=f"n{i}", cluster=ROUTES.evolve(seeds=seed))
        nodes.append(await start_node(nursery, config))
    await until(lambda: all(meshed(node, size) for node in nodes))
    return nodes


def meshed(node: NodeHandle, size: int) -> bool:
    routes = node.routes
    assert routes is not None
    peers = [p for p in routes.peers.values() if p.slots]
    return len(peers) == size - 1 and all(len(p.slots) == ROUTES.pool_size for p in peers)


def knows(node: NodeHandle, subject: str, account: str = "$G", links: int = 1) -> Callable[[], bool]:
    """Whether ``node`` has heard of interest in ``subject`` from ``links`` peers."""

    def check() -> bool:
        match = node.server.broker.route_interest.match_remote(account, subject)
        return len(match.links) + sum(len(q) for q in match.queues.values()) >= links

    return check


async def test_messages_cross_routes_once_each_with_wildcards(nursery: trio.Nursery) -> None:
    n1, n2, n3 = await start_cluster(nursery, 3)

    async def scenario() -> dict[str, list[bytes]]:
        boxes = {
            "n2 orders.*": Box(),
            "n3 orders.>": Box(),
            "n3 orders.eu": Box(),
            "n1 orders.eu": Box(),
        }
        clients = {name: await connect(node) for name, node in (("n1", n1), ("n2", n2), ("n3", n3))}
        for key, box in boxes.items():
            name, subject = key.split()
            await clients[name].subscribe(subject, cb=box.take)
            await clients[name].flush()
        await eventually(knows(n1, "orders.eu", links=2))
        await eventually(knows(n1, "orders.us.sub"))
        for i in range(200):
            await clients["n1"].publish("orders.eu", b"%d" % i)
            await clients["n1"].publish("orders.us.sub", b"deep %d" % i)
        await clients["n1"].flush()
        await boxes["n3 orders.>"].wait_for(400)
        for client in clients.values():
            await client.flush()  # anything more would have arrived before these PONGs
            await client.close()
        return {key: box.data for key, box in boxes.items()}

    got = await in_asyncio(scenario)
    numbers = [b"%d" % i for i in range(200)]
    assert got["n2 orders.*"] == numbers  # in order, once each
    assert got["n3 orders.eu"] == numbers
    assert got["n1 orders.eu"] == numbers
    assert Counter(got["n3 orders.>"]) == Counter(numbers + [b"deep %d" % i for i in range(200)])


async def test_a_queue_group_spread_over_nodes_gets_each_message_once(nursery: trio.Nursery) -> None:
    nodes = await start_cluster(nursery, 3)
    total = 3000

    async def scenario() -> list[tuple[str, list[bytes]]]:
        members = []
        clients = []
        for node, count in zip(nodes, (1, 2, 3), strict=True):
            for _ in range(count):
                box, client = Box(), await connect(node)
                await client.subscribe("work", queue="pool", cb=box.take, pending_msgs_limit=total * 2)
                await client.flush()
                members.append((node.server.broker.server_name, box))
                clients.append(client)
        for node in nodes:
            await eventually(knows(node, "work", links=2))
        publisher = await connect(nodes[0])
        for i in range(total):
            await publisher.publish("work", b"%d" % i)
        await publisher.flush()
        await settled(lambda: sum(len(box.data) for _, box in members) >= total)
        for client in [*clients, publisher]:
            await client.flush()
            await client.close()
        return [(name, box.data) for name, box in members]

    members = await in_asyncio(scenario)
    everything = [d for _, data in members for d in data]
    assert sorted(everything, key=int) == [b"%d" % i for i in range(total)]  # each exactly once
    per_node = Counter(name for name, data in members for _ in data)
    assert all(per_node[name] > 0 for name in ("n1", "n2", "n3"))


async def test_accounts_stay_apart_across_the_cluster(nursery: trio.Nursery) -> None:
    users = tuple(
        UserConfig(user=u, password="pw", account=a) for u, a in (("a1", "A"), ("a2", "A"), ("b", "B"))
    )
    n1, n2, n3 = await start_cluster(
        nursery, 3, Config(users=users, accounts=(AccountConfig("A"), AccountConfig("B")))
    )

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        in_a, in_b = Box(), Box()
        sub_a = await connect(n2, user="a2", password="pw")
        sub_b = await connect(n3, user="b", password="pw")
        await sub_a.subscribe("shared", cb=in_a.take)
        await sub_b.subscribe("shared", cb=in_b.take)
        await sub_a.flush()
        await sub_b.flush()
        await eventually(knows(n1, "shared", account="A"))
        await eventually(knows(n1, "shared", account="B"))
        publisher = await connect(n1, user="a1", password="pw")
        await publisher.publish("shared", b"only for A")
        await publisher.flush()
        await in_a.wait_for(1)
        for client in (sub_a, sub_b, publisher):
            await client.flush()
            await client.close()
        return in_a.data, in_b.data

    assert await in_asyncio(scenario) == ([b"only for A"], [])


async def test_requests_are_answered_across_nodes(nursery: trio.Nursery) -> None:
    n1, n2, _ = await start_cluster(nursery, 3)

    async def scenario() -> tuple[list[bytes], str]:
        responder = await connect(n2)

        async def answer(msg: Msg) -> None:
            await msg.respond(b"from n2: " + msg.data)

        await responder.subscribe("help", cb=answer)
        await responder.flush()
        await eventually(knows(n1, "help"))
        requester = await connect(n1)
        replies = [(await requester.request("help", b"%d" % i, timeout=W)).data for i in range(50)]
        try:
            await requester.request("nobody.anywhere", b"?", timeout=W)
            outcome = "answered"
        except NoRespondersError:
            outcome = "no responders"  # the cluster knows nobody wants it, and says so at once
        await requester.close()
        await responder.close()
        return replies, outcome

    replies, outcome = await in_asyncio(scenario)
    assert replies == [b"from n2: %d" % i for i in range(50)]
    assert outcome == "no responders"


def spawn_node(
    name: str, route_port: int, client_port: int, seed: int | None
) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "node.run.cli", "serve", "-a", "127.0.0.1", "-p", str(client_port),
        "-n", name, "--cluster", f"nats://127.0.0.1:{route_port}", "--cluster_name", "real",
    ]  # fmt: skip
    if seed is not None:
        args += ["--routes", f"nats://127.0.0.1:{seed}"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_killed_node_vanishes_from_its_peers_and_rejoins(nursery: trio.Nursery) -> None:
    survivor = await start_node(nursery, Config(server_name="survivor", cluster=ROUTES))
    assert survivor.cluster_port is not None
    assert survivor.routes is not None
    client_port = free_port()

    async def subscriber() -> None:
        """Subscribe at the victim, and stay until it dies under us."""
        client = await asyncio.wait_for(
            nats.connect(f"nats://127.0.0.1:{client_port}", allow_reconnect=False), W
        )
        await client.subscribe("victim.things", cb=Box().take)
        await client.flush()
        await eventually(knows(survivor, "victim.things"))
        with contextlib.suppress(Exception):  # the node goes away under it
            await client.close()

    victim = spawn_node("victim", free_port(), client_port, survivor.cluster_port)
    try:
        await until(lambda: meshed(survivor, 2))
        await in_asyncio(subscriber)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(W)
        start = trio.current_time()
        await until(lambda: not knows(survivor, "victim.things")())
        assert trio.current_time() - start < ROUTES.ping_interval * ROUTES.ping_max + 1
        routes = survivor.routes
        await until(lambda: not any(p.slots for p in routes.peers.values()))

        victim = spawn_node("victim", free_port(), client_port, survivor.cluster_port)
        await until(lambda: meshed(survivor, 2))
        await in_asyncio(subscriber)  # a new node, a new subscription, known to the survivor
    finally:
        victim.kill()
        victim.wait(W)
