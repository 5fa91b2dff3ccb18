"""Super-clusters over real sockets on 127.0.0.1, driven by the official nats-py client.

Cluster "east" has two nodes joined by routes; cluster "west" one node, which knows only one east
node's gateway URL and learns the rest. As with routes, interest crosses gateways asynchronously, so
tests wait (bounded) for it before publishing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable

import pytest
import trio
from nats.aio.msg import Msg

from cluster.config import ClusterConfig, GatewayConfig
from node.config.options import AccountConfig, Config, UserConfig
from node.run.launch import NodeHandle
from pipeline.local import free_port
from tests.support import Box, W, connect, eventually, in_asyncio, start_node, until

pytestmark = pytest.mark.timeout(60)

ROUTES = ClusterConfig(name="east", host="127.0.0.1", port=0, ping_interval=0.5, ping_max=3)
GATEWAYS = GatewayConfig(name="east", host="127.0.0.1", port=0, ping_interval=0.5, ping_max=3)


def url(port: int | None) -> str:
    return f"nats://127.0.0.1:{port}"


async def start_supercluster(
    nursery: trio.Nursery, node_config: Config | None = None, *, e1_config: Config | None = None
) -> tuple[NodeHandle, NodeHandle, NodeHandle]:
    """Nodes e1 and e2 (cluster east) and w1 (cluster west), once every gateway link is up; e1 may
    have a configuration of its own (``e1_config``), the others have ``node_config``."""
    base = node_config or Config()
    first = e1_config or base
    e1 = await start_node(nursery, first.evolve(server_name="e1", cluster=ROUTES, gateway=GATEWAYS))
    e2 = await start_node(
        nursery,
        base.evolve(
            server_name="e2", cluster=ROUTES.evolve(seeds=(url(e1.cluster_port),)), gateway=GATEWAYS
        ),
    )
    west = GATEWAYS.evolve(name="west", gateways=(("east", (url(e1.gateway_port),)),))
    w1 = await start_node(nursery, base.evolve(server_name="w1", gateway=west))
    await until(lambda: linked(e1, "west") and linked(e2, "west") and linked(w1, "east", inbound=2))
    return e1, e2, w1


def linked(node: NodeHandle, cluster: str, *, inbound: int = 0) -> bool:
    """Whether ``node`` has its outbound link to ``cluster``, and at least ``inbound`` from it
    (each node of a cluster dials one node of another: links in are uneven)."""
    assert node.gateways is not None
    gateway = node.gateways.remotes.get(cluster)
    return gateway is not None and gateway.outbound is not None and len(gateway.inbound) >= inbound


def knows(node: NodeHandle, subject: str, account: str = "$G") -> Callable[[], bool]:
    """Whether another cluster has told ``node`` it wants ``subject``."""

    def check() -> bool:
        match = node.server.broker.gateway_interest.match_remote(account, subject)
        return bool(match.links or match.queues)

    return check


async def test_messages_and_requests_cross_between_clusters(nursery: trio.Nursery) -> None:
    e1, e2, w1 = await start_supercluster(nursery)

    async def scenario() -> tuple[list[bytes], list[bytes], list[bytes]]:
        far, near = Box(), Box()
        at_w1, at_e2, at_e1 = await connect(w1), await connect(e2), await connect(e1)
        await at_w1.subscribe("orders.>", cb=far.take)
        await at_e2.subscribe("orders.eu", cb=near.take)

        async def answer(msg: Msg) -> None:
            await msg.respond(b"west says " + msg.data)

        await at_w1.subscribe("help", cb=answer)
        await at_w1.flush()
        await at_e2.flush()
        await eventually(knows(e1, "orders.eu"))
        await eventually(knows(e2, "help"))
        for i in range(200):
            await at_e1.publish("orders.eu", b"%d" % i)
        await at_e1.flush()
        await far.wait_for(200)
        await near.wait_for(200)
        replies = [(await at_e2.request("help", b"%d" % i, timeout=W)).data for i in range(50)]
        for client in (at_w1, at_e2, at_e1):
            await client.flush()  # anything more (a duplicate) would have arrived before the PONG
            await client.close()
        return far.data, near.data, replies

    far, near, replies = await in_asyncio(scenario)
    numbers = [b"%d" % i for i in range(200)]
    assert far == numbers  # once each, in order, across the gateway
    assert near == numbers
    assert replies == [b"west says %d" % i for i in range(50)]


async def test_accounts_stay_apart_across_gateways(nursery: trio.Nursery) -> None:
    users = tuple(UserConfig(user=u, password="pw", account=a) for u, a in (("a", "A"), ("b", "B")))
    accounts = Config(users=users, accounts=(AccountConfig("A"), AccountConfig("B")))
    e1, _, w1 = await start_supercluster(nursery, accounts)

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        in_a, in_b = Box(), Box()
        sub_a = await connect(w1, user="a", password="pw")
        sub_b = await connect(w1, user="b", password="pw")
        await sub_a.subscribe("shared", cb=in_a.take)
        await sub_b.subscribe("shared", cb=in_b.take)
        await sub_a.flush()
        await sub_b.flush()
        await eventually(knows(e1, "shared", account="A"))
        await eventually(knows(e1, "shared", account="B"))
        publisher = await connect(e1, user="a", password="pw")
        await publisher.publish("shared", b"only for A")
        await publisher.flush()
        await in_a.wait_for(1)
        for client in (sub_a, sub_b, publisher):
            await client.flush()
            await client.close()
        return in_a.data, in_b.data

    assert await in_asyncio(scenario) == ([b"only for A"], [])


def spawn_west(client_port: int, gateway_port: int, east: str) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "node.run.cli", "serve", "-a", "127.0.0.1", "-p", str(client_port),
        "-n", "w1", "--gateway_name", "west", "--gateway_listen", url(gateway_port),
        "--gateways", f"east={east}",
    ]  # fmt: skip
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_killed_cluster_is_forgotten_and_traffic_resumes_when_it_returns(
    nursery: trio.Nursery,
) -> None:
    e1 = await start_node(nursery, Config(server_name="e1", gateway=GATEWAYS))
    assert e1.gateways is not None
    client_port = free_port()

    async def round_trip() -> list[bytes]:
        """Subscribe in west, publish in east once west's interest has arrived."""
        box = Box()
        subscriber = await connect(url(client_port))
        await subscriber.subscribe("west.things", cb=box.take)
        await subscriber.flush()
        await eventually(knows(e1, "west.things"))
        publisher = await connect(e1)
        await publisher.publish("west.things", b"over the gateway")
        await publisher.flush()
        await box.wait_for(1)
        await publisher.close()
        with contextlib.suppress(Exception):  # the node may go away under it
            await subscriber.close()
        return box.data

    west = spawn_west(client_port, free_port(), url(e1.gateway_port))
    try:
        await until(lambda: linked(e1, "west"))
        assert await in_asyncio(round_trip) == [b"over the gateway"]
        os.kill(west.pid, signal.SIGKILL)
        west.wait(W)
        start = trio.current_time()
        await until(lambda: e1.gateways is not None and e1.gateways.remotes["west"].outbound is None)
        assert trio.current_time() - start < GATEWAYS.ping_interval * GATEWAYS.ping_max + 1
        assert not knows(e1, "west.things")()  # west's slice went with its link

        west = spawn_west(client_port, free_port(), url(e1.gateway_port))
        await until(lambda: linked(e1, "west"))
        assert await in_asyncio(round_trip) == [b"over the gateway"]
    finally:
        west.kill()
        west.wait(W)
