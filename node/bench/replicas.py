"""Clusters whose data lives on replica groups, for the replicated-keys benchmarks: a 3-node pubmesh
cluster placing its Redis keys on Raft groups, and a 3-node nats-server cluster with JetStream.

Every node is a cluster member of a ``Servers`` group (``node.bench.servers``), named ``n1``..``n3``,
with a store directory of its own under the cluster's temporary directory and every port left to it
to pick and read back from its log. A pubmesh node also gets a configuration file with
``[replication] members`` (the three names) and ``[redis] replicas``, its Redis listener and its
monitoring port; its Raft state is read from ``/raftz``. A node can be killed (SIGKILL), stopped
(SIGTERM) and started again on the same name and store directory (on new ports, dialling the others'
routes). A pubmesh cluster is ready once every live node runs all the groups, all agree on each
group's leader and none is recovering (``cluster.raft.recovery``: a node that started on an empty
store, as every node of a new cluster does, votes for no one until its leader has caught it up and a
few election timeouts have passed, so a group is not yet fault tolerant before then); a JetStream
cluster once it answers a JetStream API request without an error.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import attrs

from cluster.placement import Layout, layout
from node.bench.servers import CLUSTER_NAME, PUBMESH, Flavor, ServerProcess, Servers, free_port
from node.bench.wire import BenchError, Endpoint

__all__ = ["NAMES", "ReplicaNode", "ReplicatedCluster", "hash_tag", "jetstream_cluster"]

NAMES = ("n1", "n2", "n3")
REDIS_LISTENING = re.compile(rb"Listening for Redis connections on [\d.]+:(\d+)")
MONITOR_LISTENING = re.compile(rb"Starting http monitor on [\d.]+:(\d+)")
READY_TIMEOUT = 60.0
POLL = 0.02
HTTP_TIMEOUT = 5.0


@attrs.define
class ReplicaNode:
    """One started pubmesh node of a replicated cluster."""

    name: str
    store_dir: Path
    server: ServerProcess
    redis: Endpoint
    monitor: int
    """Its monitoring port (``/raftz``)."""

    @property
    def alive(self) -> bool:
        return self.server.proc.poll() is None

    def raftz(self) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.monitor}/raftz"
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as reply:
            found: dict[str, Any] = json.load(reply)
        return found

    def group(self, name: str) -> dict[str, Any] | None:
        """The group's entry in ``/raftz``; None when the node does not run it (yet)."""
        return next((g for g in self.raftz()["groups"] if g["name"] == name), None)


def hash_tag(placement: Layout, group: str) -> str:
    """A hash tag (``{...}``) whose keys all fall in ``group``'s slots."""
    for i in range(100_000):
        tag = f"{{g{i}}}"
        if placement.group_of(tag.encode()).name == group:
            return tag
    raise BenchError(f"no hash tag found for {group}")


@attrs.define
class ReplicatedCluster:
    """Three pubmesh nodes holding each Redis key on ``replicas`` of them."""

    servers: Servers
    replicas: int
    directory: Path
    config: Path
    placement: Layout
    nodes: list[ReplicaNode] = attrs.Factory(list)

    @classmethod
    def start(cls, servers: Servers, replicas: int) -> ReplicatedCluster:
        """The cluster, ready (``await_ready``): nodes started one after another, each dialling
        the routes of those before it."""
        directory = servers.directory(f"bench-replicas-{replicas}-")
        config = directory / f"replicas-{replicas}.toml"
        members = ", ".join(f'"{name}"' for name in NAMES)
        config.write_text(f"[replication]\nmembers = [{members}]\n\n[redis]\nreplicas = {replicas}\n")
        cluster = cls(servers, replicas, directory, config, layout(NAMES, replicas))
        for name in NAMES:
            store = directory / f"replicas-{replicas}-{name}"
            store.mkdir()
            cluster.nodes.append(cluster._launch(name, store))
        cluster.await_ready()
        return cluster

    def _launch(self, name: str, store: Path) -> ReplicaNode:
        seeds = [n.server.route_url for n in self.nodes if n.name != name and n.alive]
        routes = ",".join(url for url in seeds if url)
        argv = PUBMESH.argv(name, routes or None)
        argv += ["-c", str(self.config), "--redis_port", "0", "-m", "0", "--store_dir", str(store)]
        server = self.servers.launch(PUBMESH, argv)
        log = server.log()
        redis, monitor = REDIS_LISTENING.search(log), MONITOR_LISTENING.search(log)
        if redis is None or monitor is None:
            raise BenchError(f"{name} logged no Redis or monitoring port: {server.tail()}")
        endpoint = Endpoint("127.0.0.1", int(redis[1]), scheme="redis")
        return ReplicaNode(name, store, server, endpoint, int(monitor[1]))

    @property
    def groups(self) -> list[str]:
        return [group.name for group in self.placement.groups]

    def voters(self, group: str) -> tuple[str, ...]:
        return next(g.voters for g in self.placement.groups if g.name == group)

    def node(self, name: str) -> ReplicaNode:
        return next(n for n in self.nodes if n.name == name)

    def leader(self, group: str, timeout: float = READY_TIMEOUT) -> ReplicaNode:
        """The group's leader, once every live voter of it names the same one and none of them is
        recovering."""
        deadline = time.monotonic() + timeout
        while True:
            named = {self._leader_seen(self.node(v), group) for v in self.voters(group)}
            named.discard(None)
            if len(named) == 1 and "" not in named:
                leader = self.node(str(named.pop()))
                if leader.alive:
                    return leader
            if time.monotonic() > deadline:
                raise BenchError(f"{group} had no agreed, settled leader within {timeout:g} s: {named}")
            time.sleep(POLL)

    @staticmethod
    def _leader_seen(node: ReplicaNode, group: str) -> str | None:
        """Who ``node`` names as the group's leader ("" when none, or while ``node`` recovers);
        None when it is down."""
        if not node.alive:
            return None
        try:
            found = node.group(group)
        except OSError:
            return ""
        return found["leader"] if found and not found["recovering"] else ""

    def await_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        for group in self.groups:
            self.leader(group, max(0.0, deadline - time.monotonic()))

    def kill(self, node: ReplicaNode) -> None:
        node.server.proc.kill()
        node.server.proc.wait()

    def stop(self, node: ReplicaNode) -> None:
        node.server.proc.terminate()
        try:
            node.server.proc.wait(10.0)
        except subprocess.TimeoutExpired:
            self.kill(node)

    def restart(self, node: ReplicaNode) -> ReplicaNode:
        """``node`` started again (it must be down) on its name and store directory, once it
        listens; it takes ``node``'s place in ``nodes``."""
        again = self._launch(node.name, node.store_dir)
        self.nodes[self.nodes.index(node)] = again
        return again


def jetstream_cluster(servers: Servers, flavor: Flavor) -> list[ServerProcess]:
    """Three nats-server nodes with JetStream (``-js``), each with a store directory of its own
    (removed when ``servers`` stops). A JetStream cluster needs its routes configured from its first
    node on, so (unlike everything else here) their route ports are chosen here, free ones, and
    every node is given all three."""
    directory = servers.directory("bench-js-")
    urls = [f"nats://127.0.0.1:{free_port()}" for _ in NAMES]
    nodes: list[ServerProcess] = []
    for name, url in zip(NAMES, urls, strict=True):
        argv = [*flavor.command, "-n", name, "--cluster_name", CLUSTER_NAME, "--cluster", url]
        argv += ["--routes", ",".join(urls), "-js", "-sd", str(directory / name)]
        nodes.append(servers.launch(flavor, argv))
    return nodes
