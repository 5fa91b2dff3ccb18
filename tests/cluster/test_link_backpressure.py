"""Routes and gateways to a peer that stops reading: the node's memory stays bounded, the link is
cut as a slow consumer and counted, and other clients notice nothing.

Real sockets on 127.0.0.1: a node runs in the test's nursery (its memory traced while a client
floods it), and the peer is either a fake that completes the handshake, announces interest and keeps
sending heartbeats but never reads, or a real node in another process frozen with SIGSTOP. Then the
same faults in the harness, in virtual time: a black-holed path, and a write that never ends.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
from trio.testing import MockClock

from cluster.config import ClusterConfig, GatewayConfig
from cluster.frames import Ping, SubAdd, encode
from cluster.link import SLOW_DEADLINE, SLOW_PENDING, Link
from node.accounts.account import Account
from node.broker import Broker
from node.config.load import from_mapping
from node.config.options import Config
from node.monitoring.links import GatewayzOptions, RoutezOptions, gatewayz, routez
from node.monitoring.pacing import Pacer
from node.nats.protocol import writer as w
from node.run.launch import NodeHandle
from node.run.node import Node as Assembled
from pipeline.local import free_port
from pubmesh_testing.harness import open_cluster
from routing import RemoteEntry
from tests.cluster.impostor import Impostor, gateway_hello, route_hello
from tests.node.monitoring.test_monitor import Node, RawClient
from tests.support import start_node, until

pytestmark = pytest.mark.timeout(60)

MAX_PENDING = 2 * 1024 * 1024
"""The links' limit in these tests: small, so a flood passes it many times over in little time."""
PAYLOAD = b"x" * 16384
FLOOD_MAX = 64 * MAX_PENDING
"""The most a flood sends (it stops earlier once the link is cut and the node has taken more)."""
AFTER_CUT = 4 * MAX_PENDING
"""What a flood still sends once the link is cut: the node must stay bounded after it, too."""
MEMORY_BOUND = 3 * MAX_PENDING
"""The node's traced memory may grow by this much at most while flooded: the link's limit, what
its writer holds, and the publisher's input in flight."""
W = 20.0
"""The bound on every wait."""

SUBJECT = "flood"
FAKE_ID = "Z" * 56
"""The fake peer's server id: above any real one, so the node never dials it back."""


# -- the fake peer's handshake (the one place that knows what a peer says first) ----------------


def route_peer(stream: trio.abc.Stream, cluster: str) -> tuple[Impostor, bytes]:
    """A route peer dialing the node's slot 0, and its HELLO."""
    hello = route_hello(FAKE_ID, cluster, name="fake", pool_size=1, connection="f" * 16)
    return Impostor(stream, "route"), hello


def gateway_peer(stream: trio.abc.Stream, name: str) -> tuple[Impostor, bytes]:
    """A gateway peer the node dialed, and its HELLO."""
    hello = gateway_hello(name, id=FAKE_ID, name="fake", url="", urls=())
    return Impostor(stream, "gateway", listener=True), hello


async def never_read(peer: tuple[Impostor, bytes]) -> None:
    """Be a peer that says everything a live one says (handshake, interest in ``SUBJECT``,
    heartbeats) and, once the handshake is done, reads nothing, until cancelled or cut off."""
    impostor, hello = peer
    stream = impostor.stream
    try:
        assert await impostor.authenticate(hello) is not None
        await stream.send_all(encode(SubAdd("$G", SUBJECT, None, 1)))
        while True:
            await trio.sleep(0.1)
            await stream.send_all(encode(Ping()))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


# -- the node under attack ----------------------------------------------------------------------


@attrs.define
class Flooded:
    """A node in the test's nursery, its monitoring, and a canary client of it."""

    handle: NodeHandle
    view: Node
    canary: RawClient

    @property
    def broker(self) -> Broker:
        return self.handle.server.broker


Start = Callable[..., Awaitable[Flooded]]


@pytest.fixture
async def start(nursery: trio.Nursery) -> AsyncIterator[Start]:
    """Starts nodes in the test's nursery, their links as given; closes their test clients."""
    views: list[Node] = []

    async def make(**links: Any) -> Flooded:
        # (no system account: the interest and traffic these tests count are their clients' alone)
        config = Config(http_port=0, ping_interval=30.0, no_system_account=True, **links)
        handle = await start_node(nursery, config)
        assert handle.http_port is not None
        views.append(Node(handle.server, handle.port, handle.http_port))
        return Flooded(handle, views[-1], await views[-1].client())

    yield make
    for view in views:
        for client in view.clients:
            await trio.aclose_forcefully(client.stream)


@attrs.define
class Flood:
    """What a flood saw: the link's largest backlog, the node's memory growth, the bytes sent."""

    peak_pending: int = 0
    memory_growth: int = 0
    sent: int = 0
    reported: tuple[int, int] = (0, 0)
    """(the link's backlog, what monitoring said it was) once the link was congested."""


UNPACED = Pacer(math.inf)
"""Monitoring pages built without giving the loop back, so they agree with what was just read."""


async def flood(
    node: Flooded, link: Link[Account], pending: Callable[[Assembled], Awaitable[int]]
) -> Flood:
    """Publish to ``SUBJECT`` through a client of ``node`` until the link is cut (and a little
    more), tracing the node's memory; ``pending`` finds the link's backlog in a monitoring page.

    The page is made in the node's own task, as its backlog is looked at, in one step (``UNPACED``):
    asked over HTTP, it would come back after the publisher's input still in flight had cut the link.
    """
    result = Flood()
    publisher = await node.view.client()
    chunk = w.pub(SUBJECT.encode(), PAYLOAD) * 8
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        cut_at = 0
        with trio.fail_after(W):
            while result.sent < FLOOD_MAX and (not cut_at or result.sent < cut_at + AFTER_CUT):
                await publisher.send(chunk)
                result.sent += len(chunk)
                result.peak_pending = max(result.peak_pending, link.pending_bytes)
                if not result.reported[0] and link.pending_bytes > link.stall_at:
                    result.reported = link.pending_bytes, await pending(node.handle.node)
                if link.closing is not None and not cut_at:
                    cut_at = result.sent
        result.memory_growth = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return result


async def check(node: Flooded, link: Link[Account], flooded: Flood, kind: str) -> None:
    """What every attack must come to: bounded, cut, counted, and nobody else disturbed."""
    assert link.closing == SLOW_PENDING
    assert link.stall_at < flooded.peak_pending <= MAX_PENDING + 2 * len(PAYLOAD)
    assert flooded.reported[0] == flooded.reported[1] > link.stall_at
    assert flooded.memory_growth < MEMORY_BOUND, (flooded.memory_growth, flooded.sent)
    assert flooded.sent > 4 * MAX_PENDING  # (the flood went well past the limit)
    varz = await node.view.json("/varz")
    counts = {"clients": 0, "routes": 0, "gateways": 0, "leafs": 0, kind: 1}
    assert (varz["slow_consumers"], varz["slow_consumer_stats"]) == (1, counts)
    await node.canary.flush()  # a PONG: the node serves its clients as ever


# -- real sockets --------------------------------------------------------------------------------


@pytest.mark.timeout(90)
async def test_a_route_peer_that_never_reads_costs_at_most_max_pending(
    nursery: trio.Nursery, start: Start
) -> None:
    cluster = ClusterConfig(name="c", host="127.0.0.1", port=0, pool_size=1, max_pending=MAX_PENDING)
    node = await start(cluster=cluster)
    assert node.handle.cluster_port is not None
    assert node.handle.routes is not None
    routes = node.handle.routes
    peer = await trio.open_tcp_stream("127.0.0.1", node.handle.cluster_port)
    nursery.start_soon(never_read, route_peer(peer, "c"))
    link: Link[Account] = await until(
        lambda: next((ln for ln in routes.links if ln.registered and "$G" in ln.accounts), None)
    )
    doc = await node.view.json("/routez")
    assert [(r["remote_id"], r["subscriptions"], r["pending_size"]) for r in doc["routes"]] == [
        (FAKE_ID, 1, 0)
    ]

    async def pending(n: Assembled) -> int:
        return int((await routez(n, RoutezOptions(), UNPACED))["routes"][0]["pending_size"])

    flooded = await flood(node, link, pending)

    await check(node, link, flooded, "routes")
    await until(lambda: not routes.links)  # its session stopped at once, though the peer is alive
    assert (await node.view.json("/routez"))["num_routes"] == 0
    assert list(node.broker.route_interest.entries()) == []  # what came over it is forgotten
    await trio.aclose_forcefully(peer)


@pytest.mark.timeout(90)
async def test_a_gateway_peer_that_never_reads_costs_at_most_max_pending(
    nursery: trio.Nursery, start: Start
) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    url = f"nats://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    peers: list[trio.SocketStream] = []

    async def accept() -> None:
        peers.append(await listeners[0].accept())
        await never_read(gateway_peer(peers[0], "far"))

    nursery.start_soon(accept)
    gateway = GatewayConfig(
        name="near", host="127.0.0.1", port=0, gateways=(("far", (url,)),), max_pending=MAX_PENDING
    )
    node = await start(gateway=gateway)
    gateways = node.handle.gateways
    assert gateways is not None
    link: Link[Account] = await until(
        lambda: (out := gateways.remotes["far"].outbound) is not None and "$G" in out.accounts and out
    )

    async def pending(n: Assembled) -> int:
        doc = await gatewayz(n, GatewayzOptions(), UNPACED)
        return int(doc["outbound_gateways"]["far"]["connection"]["pending_bytes"])

    flooded = await flood(node, link, pending)

    await check(node, link, flooded, "gateways")
    await until(lambda: gateways.remotes["far"].outbound is not link)
    assert list(node.broker.gateway_interest.entries()) == []
    for stream in peers:
        await trio.aclose_forcefully(stream)
    await listeners[0].aclose()


@asynccontextmanager
async def frozen_node(seed: int) -> AsyncIterator[tuple[trio.Process, int]]:
    """A real node in its own process, joined to the route port ``seed``: (process, client port).
    Stopped with SIGKILL whatever happens (after SIGCONT, should the test have frozen it)."""
    port = free_port()
    command = [sys.executable, "-m", "node.run.cli", "serve", "-a", "127.0.0.1", "-p", str(port)]
    command += ["--cluster", "nats://127.0.0.1:0", "--cluster_name", "c"]
    command += ["--routes", f"nats://127.0.0.1:{seed}"]
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield process, port
    finally:
        process.send_signal(signal.SIGCONT)
        process.kill()
        with trio.move_on_after(W):
            await process.wait()


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_frozen_route_peer_costs_at_most_max_pending(start: Start) -> None:
    # Heartbeats would cut the frozen peer too, after ping_max silent intervals: slowed down here,
    # so that the pending limit is what cuts it.
    cluster = ClusterConfig(
        name="c", host="127.0.0.1", port=0, max_pending=MAX_PENDING, ping_interval=10.0
    )
    node = await start(cluster=cluster)
    assert node.handle.cluster_port is not None
    assert node.handle.routes is not None
    routes = node.handle.routes
    async with frozen_node(node.handle.cluster_port) as (process, port):
        with trio.fail_after(W):
            while True:
                try:
                    subscriber = RawClient(await trio.open_tcp_stream("127.0.0.1", port))
                    break
                except OSError:
                    await trio.sleep(0.05)
        await subscriber.handshake({})
        await subscriber.send(w.sub(SUBJECT.encode(), b"1"))
        await subscriber.flush()
        link: Link[Account] = await until(
            lambda: next((ln for ln in routes.links if ln.registered and "$G" in ln.accounts), None)
        )
        os.kill(process.pid, signal.SIGSTOP)

        async def pending(n: Assembled) -> int:
            doc = await routez(n, RoutezOptions(), UNPACED)
            return max(int(r["pending_size"]) for r in doc["routes"])

        flooded = await flood(node, link, pending)

        await check(node, link, flooded, "routes")
        await until(lambda: link not in routes.links)
        assert carried(node.broker, "$G") == []
        await trio.aclose_forcefully(subscriber.stream)


def carried(broker: Broker, account: str) -> list[RemoteEntry[Any]]:
    """The route interest of one account (the system account's rides a pooled link of its own)."""
    return [entry for entry in broker.route_interest.entries() if entry.account == account]


# -- the harness, in virtual time ----------------------------------------------------------------

HARNESS = ClusterConfig(name="h", ping_interval=0.5, ping_max=3, max_pending=MAX_PENDING)


async def test_a_black_holed_route_is_cut_at_max_pending_then_heals(autojump_clock: MockClock) -> None:
    async with open_cluster(2, config=HARNESS) as cluster:
        a, b = cluster.nodes
        inbox = b.subscribe(SUBJECT)
        with trio.fail_after(10):
            await cluster.wait_converged()
        cluster.blackhole(a, b)
        links = list(a.routes.peers[b.server_id].slots.values())
        for _ in range(4 * MAX_PENDING // len(PAYLOAD)):
            a.publish(SUBJECT, PAYLOAD)
            assert all(link.pending_bytes <= MAX_PENDING + 2 * len(PAYLOAD) for link in links)
        assert [link.closing for link in links if link.closing] == [SLOW_PENDING]
        assert a.broker.slow_links["Route"] == 1
        # The cut link's session stops at once, though the path is still black-holed: what came
        # over it goes with it.
        await until(lambda: not carried(a.broker, "$G"))
        assert not a.publish(SUBJECT, PAYLOAD)
        cluster.heal(a, b)
        with trio.fail_after(10):
            await cluster.wait_converged()
        assert a.publish(SUBJECT, b"after")
        assert (await inbox.wait_for(1))[-1][1] == b"after"


async def test_a_write_past_the_deadline_cuts_the_link(autojump_clock: MockClock) -> None:
    config = HARNESS.evolve(write_deadline=0.5, ping_interval=2.0)
    async with open_cluster(2, config=config) as cluster:
        a, b = cluster.nodes
        b.subscribe(SUBJECT)
        with trio.fail_after(10):
            await cluster.wait_converged()
        cluster.blackhole(a, b)
        links = list(a.routes.peers[b.server_id].slots.values())
        a.publish(SUBJECT, PAYLOAD)  # well below max_pending, but its write never completes
        with trio.fail_after(1.0):  # (before any heartbeat could notice the silence)
            await until(lambda: any(link.closing for link in links))
        assert [link.closing for link in links if link.closing] == [SLOW_DEADLINE]
        assert a.broker.slow_links["Route"] == 1


# -- configuration -------------------------------------------------------------------------------


def test_links_limits_come_from_the_cluster_and_gateway_blocks() -> None:
    config = from_mapping(
        {
            "cluster": {"max_pending": 1 << 20, "write_deadline": 2.5},
            "gateway": {"name": "east", "max_pending": 1 << 21, "write_deadline": 3},
        }
    )
    assert config.cluster is not None
    assert config.gateway is not None
    assert (config.cluster.max_pending, config.cluster.write_deadline) == (1 << 20, 2.5)
    assert (config.gateway.max_pending, config.gateway.write_deadline) == (1 << 21, 3.0)
    defaults = ClusterConfig(), GatewayConfig(name="east")
    assert {(d.max_pending, d.write_deadline) for d in defaults} == {(32 * 1024 * 1024, 10.0)}
