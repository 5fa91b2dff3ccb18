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

Nodes are built by ``node.run.assembly``, as the launcher builds them; only the network differs.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import attrs
import trio
import trio.testing

from cluster.config import ClusterConfig, GatewayConfig
from cluster.gateways import GatewayManager
from cluster.network import MemoryNetwork
from cluster.routes import RouteManager
from node.accounts.account import Account
from node.broker import Broker
from node.config.options import Config
from node.run.assembly import assemble
from node.run.node import Listeners, Node
from node.server import Server
from routing import Message, Subscription

__all__ = ["Cluster", "HarnessNode", "Inbox", "SuperCluster", "open_cluster", "open_supercluster"]

ROUTE_PORT = 6222
CLIENT_PORT = 4222
GATEWAY_PORT = 7222


class Inbox:
    """A subscription inside a node (not a client) and what it received."""

    def __init__(self, subject: str, queue: str | None = None) -> None:
        self.subscription = Subscription(subject, queue, owner=self)
        self.messages: list[tuple[bytes, bytes]] = []
        self.replies: list[bytes | None] = []
        """The reply subject of each message, in the same order."""
        self._arrived = trio.Event()

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        self.messages.append((msg.subject, msg.payload))
        self.replies.append(msg.reply)
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


class PatternInbox:
    """A Redis pattern subscription inside a node (as PSUBSCRIBE makes one) and what it received."""

    def __init__(self, pattern: bytes) -> None:
        self.pattern = pattern
        self.messages: list[tuple[bytes, bytes]] = []
        """(channel, payload) of each message."""

    def deliver_pattern(self, pattern: bytes, channel: bytes, msg: Message) -> bool:
        self.messages.append((channel, msg.payload))
        return True

    @property
    def payloads(self) -> list[bytes]:
        return [payload for _, payload in self.messages]


@attrs.define(eq=False)
class HarnessNode:
    """One node of a harness cluster."""

    name: str
    node: Node
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    stopped: trio.Event = attrs.Factory(trio.Event)

    @property
    def alive(self) -> bool:
        return not self.stopped.is_set()

    @property
    def server(self) -> Server:
        return self.node.server

    @property
    def routes(self) -> RouteManager[Account]:
        assert self.node.routes is not None
        return self.node.routes

    @property
    def gateways(self) -> GatewayManager[Account] | None:
        return self.node.gateways

    @property
    def broker(self) -> Broker:
        return self.node.broker

    @property
    def server_id(self) -> str:
        return self.broker.server_id

    def subscribe(self, subject: str, queue: str | None = None, *, account: str = "$G") -> Inbox:
        """Subscribe inside the node; the returned inbox collects deliveries."""
        inbox = Inbox(subject, queue)
        self.broker.subscribe(self.broker.account(account), inbox.subscription)
        return inbox

    def psubscribe(self, pattern: bytes, *, account: str = "$G") -> PatternInbox:
        """Subscribe to a Redis glob pattern inside the node."""
        inbox = PatternInbox(pattern)
        self.broker.subscribe_pattern(self.broker.account(account), pattern, inbox)
        return inbox

    def unsubscribe(self, inbox: Inbox | PatternInbox, *, account: str = "$G") -> None:
        if isinstance(inbox, PatternInbox):
            self.broker.unsubscribe_pattern(self.broker.account(account), inbox.pattern, inbox)
        else:
            self.broker.unsubscribe(self.broker.account(account), [inbox.subscription])

    def publish(
        self, subject: str, payload: bytes = b"", *, account: str = "$G", reply: str | None = None
    ) -> bool:
        """Publish as a local client would; whether anyone (local or remote) took it."""
        msg = Message(subject.encode(), reply.encode() if reply else None, None, payload)
        return self.broker.publish(self.broker.account(account), msg)

    def local_interest(self) -> set[tuple[str, str, str | None, int]]:
        return {(c.account, c.subject, c.queue, c.weight) for c in self.broker.local_interest()}

    def __repr__(self) -> str:
        return f"HarnessNode({self.name!r})"


class _Faults:
    """Faults between named nodes of a memory network."""

    network: MemoryNetwork

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

    async def kill(self, node: HarnessNode) -> None:
        """Stop a node abruptly: its connections end, as when its process dies."""
        node.scope.cancel()
        await node.stopped.wait()

    def disagreements(self) -> list[str]:
        raise NotImplementedError

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


class Cluster(_Faults):
    """Nodes on an in-memory network, and the faults between them.

    Args:
        gateway: gateway settings when the cluster is part of a super-cluster (its ``name`` is the
            cluster's; the addresses are the harness's own).
        network: the network, shared by the clusters of a super-cluster.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        config: ClusterConfig,
        node_config: Config,
        *,
        gateway: GatewayConfig | None = None,
        network: MemoryNetwork | None = None,
    ) -> None:
        self.network = network or MemoryNetwork()
        self._nursery = nursery
        self._config = config
        self._node_config = node_config
        self._gateway = gateway
        self._by_name: dict[str, HarnessNode] = {}
        self._seed = 0

    @property
    def name(self) -> str:
        return self._gateway.name if self._gateway is not None else self._config.name

    @property
    def nodes(self) -> list[HarnessNode]:
        """Live nodes, in the order they were started."""
        return [node for node in self._by_name.values() if node.alive]

    def __getitem__(self, name: str) -> HarnessNode:
        return self._by_name[name]

    def has(self, name: str) -> bool:
        """Whether a node of this name was ever started here."""
        return name in self._by_name

    async def start_node(self, name: str | None = None, *, seeds: tuple[str, ...] = ()) -> HarnessNode:
        """Start a node (default seed: the first live node), replacing a dead one of that name."""
        prefix = self._gateway.name if self._gateway is not None else "n"
        name = name or f"{prefix}{len(self._by_name) + 1}"
        if not seeds and self.nodes:
            seeds = (f"nats://{self.nodes[0].name}:{ROUTE_PORT}",)
        cluster = attrs.evolve(
            self._config,
            host=name,
            port=ROUTE_PORT,
            seeds=seeds,
            advertise=f"nats://{name}:{ROUTE_PORT}",
        )
        gateway = self._gateway
        if gateway is not None:
            gateway = gateway.evolve(
                host=name, port=GATEWAY_PORT, advertise=f"nats://{name}:{GATEWAY_PORT}"
            )
        config = self._node_config.evolve(
            server_name=name, cluster=cluster, gateway=gateway, port=CLIENT_PORT
        )
        self._seed += 1
        # (Clusters of a super-cluster count from 1 each; their names keep their nodes apart.)
        seed = zlib.crc32(f"{name}/{self._seed}".encode()) if gateway is not None else self._seed
        node = HarnessNode(name, assemble(config, dial=self.network.dialer(name), seed=seed))
        self._by_name[name] = node
        await self._nursery.start(self._run, node)
        return node

    async def _run(self, node: HarnessNode, *, task_status: trio.TaskStatus[None]) -> None:
        listen = partial(self.network.listen, node.name)
        listeners = Listeners(
            [listen((node.name, CLIENT_PORT))],
            routes=[listen((node.name, ROUTE_PORT))],
            gateways=[listen((node.name, GATEWAY_PORT))] if node.gateways is not None else [],
        )
        try:
            with node.scope:
                await node.node.run(listeners, task_status=task_status)
        finally:
            node.stopped.set()

    def interest(self) -> set[tuple[str, str, str | None]]:
        """The cluster's interest as other clusters must see it: every live node's, merged."""
        return {(a, s, q) for node in self.nodes for a, s, q, _ in node.local_interest()}

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
                if (
                    peer is None
                    or set(peer.slots) != set(peer.all_slots())
                    or any(link.closing for link in peer.slots.values())
                ):  # (a link that is closing still holds its slot while it winds down)
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


class SuperCluster(_Faults):
    """Clusters joined by gateways on one in-memory network.

    Each node names itself after its cluster (``east1``, ``east2``...); faults work between any
    two nodes, in one cluster or across.
    """

    def __init__(
        self, nursery: trio.Nursery, config: ClusterConfig, gateway: GatewayConfig, node_config: Config
    ) -> None:
        self.network = MemoryNetwork()
        self.clusters: list[Cluster] = []
        self._nursery = nursery
        self._config = config
        self._gateway = gateway
        self._node_config = node_config

    def add_cluster(self, name: str, remotes: dict[str, list[str]] | None = None) -> Cluster:
        """A new cluster (start its nodes with ``start_node``), configured with ``remotes``:
        gateway URLs by cluster name (default: the first node of every cluster added before)."""
        if remotes is None:
            remotes = {c.name: [f"nats://{c.name}1:{GATEWAY_PORT}"] for c in self.clusters}
        gateway = self._gateway.evolve(
            name=name, gateways=tuple((other, tuple(urls)) for other, urls in remotes.items())
        )
        cluster = Cluster(
            self._nursery,
            attrs.evolve(self._config, name=name),
            self._node_config,
            gateway=gateway,
            network=self.network,
        )
        self.clusters.append(cluster)
        return cluster

    def __getitem__(self, name: str) -> Cluster:
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise KeyError(name)

    def cluster_of(self, node: str) -> Cluster:
        """The cluster a node (by name, alive or not) belongs to."""
        for cluster in self.clusters:
            if cluster.has(node):
                return cluster
        raise KeyError(node)

    def node(self, name: str) -> HarnessNode:
        return self.cluster_of(name)[name]

    @property
    def nodes(self) -> list[HarnessNode]:
        return [node for cluster in self.clusters for node in cluster.nodes]

    def disagreements(self) -> list[str]:
        """Each cluster converged on its own, and across gateways: every node with an outbound link
        to every other cluster, seeing exactly that cluster's interest, and announcing exactly its
        own cluster's."""
        problems = [problem for cluster in self.clusters for problem in cluster.disagreements()]
        for cluster in self.clusters:
            own = cluster.interest()
            for node in cluster.nodes:
                assert node.gateways is not None
                announced = {(c.account, c.subject, c.queue) for c in node.gateways.interest.snapshot()}
                if announced != own:
                    problems.append(
                        f"{node.name} speaks for its cluster as {sorted(announced, key=str)}, "
                        f"not {sorted(own, key=str)}"
                    )
                up = set()
                for other in self.clusters:
                    if other is cluster or not other.nodes:
                        continue
                    gateway = node.gateways.remotes.get(other.name)
                    if gateway is None or gateway.outbound is None or gateway.outbound.closing:
                        problems.append(f"{node.name} has no gateway to {other.name}")
                        continue
                    up.add(gateway)
                    got = {
                        (e.account, e.subject, e.queue)
                        for e in node.broker.gateway_interest.entries(gateway)
                    }
                    want = other.interest()
                    if got != want:
                        problems.append(
                            f"{node.name} sees {other.name}'s interest as {sorted(got, key=str)}, "
                            f"not {sorted(want, key=str)}"
                        )
                ghosts = [g for g in node.broker.gateway_interest.links() if g not in up]
                if ghosts:
                    problems.append(f"{node.name} still holds interest from {ghosts}")
        return problems


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


@asynccontextmanager
async def open_supercluster(
    sizes: dict[str, int],
    *,
    config: ClusterConfig | None = None,
    gateway: GatewayConfig | None = None,
    node_config: Config | None = None,
    remotes: dict[str, dict[str, list[str]]] | None = None,
) -> AsyncIterator[SuperCluster]:
    """Start clusters of the given sizes (by name), joined by gateways; stop them all on exit.

    Args:
        config: route settings for every node (the cluster name is replaced by each cluster's).
        gateway: gateway settings for every node (name, addresses and remotes are the harness's).
        node_config: everything else about each node.
        remotes: the gateway URLs each cluster is configured with, by cluster name (default: the
            first node of every other cluster); the rest is learned over the links.
    """
    config = config or ClusterConfig(ping_interval=0.5, ping_max=3)
    gateway = gateway or GatewayConfig(name="", ping_interval=0.5, ping_max=3)
    async with trio.open_nursery() as nursery:
        supercluster = SuperCluster(nursery, config, gateway, node_config or Config())
        for name in sizes:
            default = {o: [f"nats://{o}1:{GATEWAY_PORT}"] for o in sizes if o != name}
            supercluster.add_cluster(name, (remotes or {}).get(name, default))
        for cluster, size in zip(supercluster.clusters, sizes.values(), strict=True):
            for _ in range(size):
                await cluster.start_node()
        yield supercluster
        nursery.cancel_scope.cancel()
