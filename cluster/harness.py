"""A whole cluster in one trio run, over a network you can break: for testing NATS applications.

``open_cluster`` starts nodes that are real pubmesh nodes (the same broker, client server and route
manager a process runs), linked over an in-memory network. Between any two of them you can cut the
connections, black-hole them (a partition: connections stay open, nothing gets through), slow them
down, and heal them; you can kill a node and start another in its place. ``wait_converged`` then
waits until the cluster agrees again: every pair of live nodes fully connected, and every node's
picture of every other node's interest exactly what that node holds, nothing stale, nothing missing.

Run it under trio's ``MockClock(autojump_threshold=0)`` (pytest-trio's ``autojump_clock``) and
heartbeat timeouts, backoffs and partitions play out in virtual time, instantly and repeatably.

Example::

    async with open_cluster(3) as cluster:
        a, b, c = cluster.nodes
        seen = c.subscribe("orders.*")
        with trio.fail_after(10):
            await cluster.wait_converged()
        a.publish("orders.new", b"1")
        with trio.fail_after(10):
            await seen.wait_for(1)
        cluster.blackhole(a, c)  # a partition: heartbeats notice, a and c drop each other
        cluster.heal_all()  # redialed, snapshots exchanged: back to normal
        with trio.fail_after(30):
            await cluster.wait_converged()

This module is the one place that assembles a node and its cluster links outside a process; the
cluster package itself never imports the node.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import trio
import trio.testing

from cluster.config import ClusterConfig
from cluster.network import MemoryNetwork
from cluster.routes import RouteManager
from node.broker import Broker
from node.config import Config
from node.server import Server
from routing import Subscription

__all__ = ["Cluster", "HarnessNode", "Inbox", "open_cluster"]

ROUTE_PORT = 6222
CLIENT_PORT = 4222


class Inbox:
    """A subscription inside a node (not a client) and what it received."""

    def __init__(self, subject: str, queue: str | None = None) -> None:
        self.subscription = Subscription(subject, queue, owner=self)
        self.messages: list[tuple[bytes, bytes]] = []
        self._arrived = trio.Event()

    def deliver(
        self,
        sub: Subscription,
        subject: bytes,
        reply: bytes | None,
        headers: bytes | None,
        payload: bytes,
    ) -> bool:
        self.messages.append((subject, payload))
        self._arrived.set()
        return True

    async def wait_for(self, count: int) -> list[tuple[bytes, bytes]]:
        """Wait until at least ``count`` messages arrived (bound it with ``trio.fail_after``)."""
        while len(self.messages) < count:
            self._arrived = trio.Event()
            await self._arrived.wait()
        return self.messages

    @property
    def payloads(self) -> list[bytes]:
        return [payload for _, payload in self.messages]


@attrs.define(eq=False)
class HarnessNode:
    """One node of a harness cluster."""

    name: str
    server: Server
    routes: RouteManager
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    stopped: trio.Event = attrs.Factory(trio.Event)

    @property
    def alive(self) -> bool:
        return not self.stopped.is_set()

    @property
    def broker(self) -> Broker:
        return self.server.broker

    @property
    def server_id(self) -> str:
        return self.broker.server_id

    def subscribe(self, subject: str, queue: str | None = None, *, account: str = "$G") -> Inbox:
        """Subscribe inside the node; the returned inbox collects deliveries."""
        inbox = Inbox(subject, queue)
        self.broker.subscribe(self.broker.account(account), inbox.subscription)
        return inbox

    def unsubscribe(self, inbox: Inbox, *, account: str = "$G") -> None:
        self.broker.unsubscribe(self.broker.account(account), [inbox.subscription])

    def publish(
        self, subject: str, payload: bytes = b"", *, account: str = "$G", reply: str | None = None
    ) -> bool:
        """Publish as a local client would; whether anyone (local or remote) took it."""
        return self.broker.publish(
            self.broker.account(account),
            subject.encode(),
            reply.encode() if reply else None,
            None,
            payload,
        )

    def local_interest(self) -> set[tuple[str, str, str | None, int]]:
        return {(c.account, c.subject, c.queue, c.weight) for c in self.broker.local_interest()}

    def __repr__(self) -> str:
        return f"HarnessNode({self.name!r})"


class Cluster:
    """Nodes on an in-memory network, and the faults between them."""

    def __init__(self, nursery: trio.Nursery, config: ClusterConfig, node_config: Config) -> None:
        self.network = MemoryNetwork()
        self._nursery = nursery
        self._config = config
        self._node_config = node_config
        self._by_name: dict[str, HarnessNode] = {}
        self._seed = 0

    @property
    def nodes(self) -> list[HarnessNode]:
        """Live nodes, in the order they were started."""
        return [node for node in self._by_name.values() if node.alive]

    def __getitem__(self, name: str) -> HarnessNode:
        return self._by_name[name]

    async def start_node(self, name: str | None = None, *, seeds: tuple[str, ...] = ()) -> HarnessNode:
        """Start a node (default seed: the first live node), replacing a dead one of that name."""
        name = name or f"n{len(self._by_name) + 1}"
        if not seeds and self.nodes:
            seeds = (f"nats://{self.nodes[0].name}:{ROUTE_PORT}",)
        cluster = attrs.evolve(
            self._config,
            host=name,
            port=ROUTE_PORT,
            seeds=seeds,
            advertise=f"nats://{name}:{ROUTE_PORT}",
        )
        config = self._node_config.evolve(server_name=name, cluster=cluster, port=CLIENT_PORT)
        self._seed += 1
        server = Server(config, broker=Broker(config, rng=random.Random(self._seed)))
        routes = RouteManager(
            server.broker,
            cluster,
            server.flusher,
            dial=self.network.dialer(name),
            rng=random.Random(self._seed),
        )
        server.broker.routes = routes
        node = HarnessNode(name, server, routes)
        self._by_name[name] = node
        await self._nursery.start(self._run, node)
        return node

    async def _run(self, node: HarnessNode, *, task_status: trio.TaskStatus[None]) -> None:
        client_listener = self.network.listen(node.name, (node.name, CLIENT_PORT))
        route_listener = self.network.listen(node.name, (node.name, ROUTE_PORT))
        try:
            with node.scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(node.server.serve, [client_listener])
                    await nursery.start(node.routes.run, [route_listener])
                    task_status.started()
        finally:
            node.stopped.set()

    async def kill(self, node: HarnessNode) -> None:
        """Stop a node abruptly: its connections end, as when its process dies."""
        node.scope.cancel()
        await node.stopped.wait()

    async def connect_client(self, node: HarnessNode) -> trio.abc.Stream:
        """A NATS client connection to ``node`` (speak the protocol over it)."""
        return await self.network.dialer("client")(node.name, CLIENT_PORT)

    def cut(self, a: HarnessNode, b: HarnessNode) -> None:
        self.network.cut(a.name, b.name)

    def blackhole(self, a: HarnessNode, b: HarnessNode) -> None:
        self.network.blackhole(a.name, b.name)

    def delay(self, a: HarnessNode, b: HarnessNode, seconds: float) -> None:
        self.network.delay(a.name, b.name, seconds)

    def heal(self, a: HarnessNode, b: HarnessNode) -> None:
        self.network.heal(a.name, b.name)

    def heal_all(self) -> None:
        self.network.heal_all()

    def disagreements(self) -> list[str]:
        """What keeps the cluster from having converged (empty once it has).

        Converged means: every pair of live nodes connected on every pooled slot, and every node's
        route interest from each peer exactly that peer's local interest, with nothing left from
        peers that are gone.
        """
        problems = []
        live = self.nodes
        for x in live:
            peers = set()
            for y in live:
                if y is x:
                    continue
                peer = x.routes.peers.get(y.server_id)
                if peer is None or set(peer.slots) != set(peer.all_slots()):
                    problems.append(f"{x.name} is not fully connected to {y.name}")
                    continue
                back = y.routes.peers.get(x.server_id)
                for slot, link in peer.slots.items():
                    other = back.slots.get(slot) if back is not None else None
                    if other is None or other.connection != link.connection:
                        problems.append(f"{x.name} and {y.name} use different connections, slot {slot}")
                peers.add(peer)
                got = {
                    (e.account, e.subject, e.queue, e.weight)
                    for e in x.broker.route_interest.entries(peer)
                }
                want = y.local_interest()
                if got != want:
                    problems.append(
                        f"{x.name} sees {y.name}'s interest as {sorted(got, key=str)}, "
                        f"not {sorted(want, key=str)}"
                    )
            ghosts = [link for link in x.broker.route_interest.links() if link not in peers]
            if ghosts:
                problems.append(f"{x.name} still holds interest from {ghosts}")
        return problems

    async def wait_converged(self, step: float = 0.01) -> None:
        """Wait until ``disagreements()`` is empty (bound it with ``trio.fail_after``).

        Every look comes after all the nodes' tasks have caught up, so a fault that has happened
        but has not been noticed yet (a cut connection nobody has read from) is not mistaken for
        calm.
        """
        while True:
            await trio.testing.wait_all_tasks_blocked()
            if not self.disagreements():
                return
            await trio.sleep(step)


@asynccontextmanager
async def open_cluster(
    size: int = 3,
    *,
    config: ClusterConfig | None = None,
    node_config: Config | None = None,
) -> AsyncIterator[Cluster]:
    """Start ``size`` nodes (each seeded with the first) and stop them all on exit.

    Args:
        config: route settings for every node (name, pool size, heartbeats, backoff); the
            addresses are the harness's own.
        node_config: everything else about each node (limits, accounts, users).
    """
    config = config or ClusterConfig(name="harness", ping_interval=0.5, ping_max=3)
    async with trio.open_nursery() as nursery:
        cluster = Cluster(nursery, config, node_config or Config())
        for _ in range(size):
            await cluster.start_node()
        yield cluster
        nursery.cancel_scope.cancel()
