"""``pubmesh bench compare --replicated`` (and ``pubmesh bench resp-replicated``): replicated Redis
keys, and nats-server's replicated JetStream streams beside them.

Three tables. The first sets two 3-node pubmesh clusters side by side, identical but for ``[redis]
replicas``: 3 (every key on all three nodes, a write acknowledged once two of them logged it) and 1
(the baseline: each key on one node, still behind a Raft group of one), so its ratio column is
replicated ÷ single-replica. Every row works one key of the clusters' first replica group,
written through the node leading that group or through another (which forwards it). The second
table is the replicated cluster alone: a failover and a follower's catch-up (``node.bench.replicated``),
each run disturbing the cluster and leaving it whole again. The third, when nats-server is on PATH
and starts a JetStream cluster, is the same writes to a stream of 3 replicas and of 1 on a 3-node
nats-server cluster (``node.bench.jetstream``); a note says why it is missing otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import attrs

from node.bench import jetstream
from node.bench.progress import ProgressBar
from node.bench.replicas import ReplicaNode, ReplicatedCluster, hash_tag, jetstream_cluster
from node.bench.replicated import (
    SIZE,
    CatchUp,
    Failover,
    Writes,
    catch_up,
    failover,
    stream_key,
    xadd_one_at_a_time,
)
from node.bench.scenarios import Result, Spec, run
from node.bench.servers import PUBMESH, Servers, nats_server
from node.bench.target import Metric, Target, scaled
from node.bench.wire import BenchError

__all__ = ["CASES", "Plan", "ReplicatedCase", "plans"]

RUN_TIMEOUT = 300.0
Via = Literal["leader", "forwarded"]


def _cluster(target: Target) -> ReplicatedCluster:
    if target.replicated is None:
        raise BenchError(f"{target.name} is not a replicated cluster")
    return target.replicated


def _node(cluster: ReplicatedCluster, via: Via) -> ReplicaNode:
    """The leader of the cluster's first group, or (``forwarded``) a node that does not lead it."""
    leader = cluster.leader(cluster.groups[0])
    return leader if via == "leader" else next(n for n in cluster.nodes if n is not leader)


def _latency_metrics(unit: str) -> list[Metric]:
    return [
        ("p50 (ms)", ",.2f", lambda w: w.latency.p50 / 1000),
        ("p99 (ms)", ",.2f", lambda w: w.latency.p99 / 1000),
        (unit, ",.0f", lambda w: w.rate),
    ]


@attrs.frozen
class XaddCase:
    """Pipelined XADDs (the ``resp-xadd`` scenario) to a stream of the first group."""

    label: str
    msgs: int
    via: Via
    scenario: str = "resp-xadd"

    def amount(self, scale: float) -> str:
        return f"{scaled(self.msgs, scale):,} entries"

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> Result:
        cluster = _cluster(target)
        tag = hash_tag(cluster.placement, cluster.groups[0])
        endpoint = _node(cluster, self.via).redis
        spec = Spec("resp-xadd", endpoint, scaled(self.msgs, scale), SIZE, 0, subject=tag)
        return run(attrs.evolve(spec, timeout=RUN_TIMEOUT), bar)

    def metrics(self) -> list[Metric]:
        return [("entries added/s", ",.0f", lambda r: r.rate)]


@attrs.frozen
class OneAtATimeCase:
    """XADDs one at a time, each after the last one's reply."""

    label: str
    count: int
    via: Via
    scenario: str = "resp-replicated-latency"

    def amount(self, scale: float) -> str:
        return f"{scaled(self.count, scale):,} XADDs"

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> Writes:
        cluster = _cluster(target)
        endpoint = _node(cluster, self.via).redis
        return xadd_one_at_a_time(endpoint, stream_key(cluster, "one"), scaled(self.count, scale))

    def metrics(self) -> list[Metric]:
        return _latency_metrics("XADD/s")


@attrs.frozen
class FailoverCase:
    label: str
    scenario: str = "resp-replicated-failover"

    def amount(self, scale: float) -> str:
        return "one leader killed"

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> Failover:
        return failover(_cluster(target))

    def metrics(self) -> list[Metric]:
        return [("s from SIGKILL to the first write that succeeds", ",.2f", lambda f: f.seconds)]


@attrs.frozen
class CatchUpCase:
    label: str
    entries: int
    scenario: str = "resp-replicated-catch-up"

    def amount(self, scale: float) -> str:
        return f"{scaled(self.entries, scale):,} entries missed"

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> CatchUp:
        return catch_up(_cluster(target), scaled(self.entries, scale))

    def metrics(self) -> list[Metric]:
        return [
            ("s from its start until applied = leader's commit", ",.2f", lambda c: c.seconds),
            ("… of which s until it listened (process start)", ",.2f", lambda c: c.starting),
            ("entries/s applied once listening", ",.0f", lambda c: c.rate),
        ]


@attrs.frozen
class JetStreamCase:
    """Publishes to the target's stream (``bench.r<replicas>``), pipelined or one at a time."""

    label: str
    msgs: int
    one_at_a_time: bool
    scenario: str = "jetstream-publish"

    def amount(self, scale: float) -> str:
        return f"{scaled(self.msgs, scale):,} msgs"

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> Writes:
        send = jetstream.publish_one_at_a_time if self.one_at_a_time else jetstream.publish
        return send(target.node, _subject(target.replicas), scaled(self.msgs, scale), SIZE)

    def metrics(self) -> list[Metric]:
        if self.one_at_a_time:
            return _latency_metrics("acked publishes/s")
        return [("acked publishes/s", ",.0f", lambda w: w.rate)]


def _subject(replicas: int) -> str:
    return f"bench.r{replicas}"


ReplicatedCase = XaddCase | OneAtATimeCase | FailoverCase | CatchUpCase | JetStreamCase

LOAD_CASES: tuple[ReplicatedCase, ...] = (
    XaddCase("replicated XADD, pipelined, through the key's leader", 2_000, "leader"),
    XaddCase("replicated XADD, pipelined, forwarded by another node", 2_000, "forwarded"),
    OneAtATimeCase("replicated XADD, one at a time, through the key's leader", 300, "leader"),
    OneAtATimeCase("replicated XADD, one at a time, forwarded by another node", 300, "forwarded"),
)
"""Sized for a pure-Python node on a busy 2-core machine: a replicas = 3 run takes 10 to 30 s."""
FAULT_CASES: tuple[ReplicatedCase, ...] = (
    FailoverCase("replicated failover: SIGKILL the key's leader, writing through another node"),
    CatchUpCase("replicated catch-up of a follower stopped while entries were written", 3_000),
)
JETSTREAM_CASES: tuple[ReplicatedCase, ...] = (
    JetStreamCase("JetStream replicated stream, publish with ack, pipelined", 20_000, False),
    JetStreamCase("JetStream replicated stream, publish with ack, one at a time", 1_000, True),
)
CASES = LOAD_CASES + FAULT_CASES + JETSTREAM_CASES

NOTE = (
    "Two 3-node pubmesh clusters ([replication] members = the three nodes, Raft's default clock),"
    " [redis] replicas = 3 and = 1; every node has a store directory, and a write is acknowledged"
    " once its group committed it (for replicas = 3, logged and fsynced by two of three nodes)."
    " Each run writes a fresh stream of the first replica group, through the node that leads"
    " the group or through one that forwards to it. The ratio column is replicas = 3 ÷ replicas = 1"
    " (target for pipelined XADD: ≥ 0.5)."
)
FAULT_NOTE = (
    "Failover: one XADD at a time through a node that does not lead the key's group; the leader"
    " is killed between two writes; a write answered with an error is retried 10 ms later; the"
    " killed node is started again (untimed) before the next run. Catch-up: a follower of the"
    " group is stopped (SIGTERM), the entries are written through the leader, and the follower is"
    " started again on its store directory; the time runs from its start until its /raftz shows"
    " the group applied up to the leader's commit index."
)
JETSTREAM_NOTE = (
    "nats-server with -js, a 3-node cluster; streams of file storage with num_replicas 3 and 1;"
    " publishes through the first node, acks counted on an inbox. nats-server does not fsync each"
    " message (it syncs its files every 2 minutes by default) where pubmesh fsyncs its Raft log"
    " before acknowledging."
)

Plan = tuple[str, tuple[ReplicatedCase, ...], list[Target], tuple[str, ...]]
"""A table: its title, cases, servers (columns) and notes."""


def plans(
    servers: Servers, chosen: Callable[[tuple[ReplicatedCase, ...]], tuple[ReplicatedCase, ...]]
) -> list[Plan]:
    """The tables whose ``chosen`` cases are not none, with their servers started."""
    loads, faults, streams = chosen(LOAD_CASES), chosen(FAULT_CASES), chosen(JETSTREAM_CASES)
    out: list[Plan] = []
    if loads or faults:
        targets = []
        for replicas in (3, 1) if loads else (3,):
            cluster = ReplicatedCluster.start(servers, replicas)
            version = cluster.nodes[0].server.version
            node = cluster.nodes[0].redis
            name = f"replicas = {replicas}"
            targets.append(Target(name, version, PUBMESH, node, replicated=cluster, replicas=replicas))
        if loads:
            out.append(("Replicated keys, 3-node pubmesh clusters", loads, targets, (NOTE,)))
        if faults:
            out.append(("Replicated keys: failover and catch-up", faults, targets[:1], (FAULT_NOTE,)))
    if streams:
        out.append(_jetstream(servers, streams))
    return out


def _jetstream(servers: Servers, cases: tuple[ReplicatedCase, ...]) -> Plan:
    title = "JetStream, 3-node nats-server cluster"
    flavor = nats_server()
    if flavor is None:
        return title, (), [], ("nats-server was not found on PATH: no JetStream rows.",)
    try:
        nodes = jetstream_cluster(servers, flavor)
        targets = []
        for replicas in (3, 1):
            name = f"R{replicas}"
            jetstream.create_stream(nodes[0].endpoint, name, _subject(replicas), replicas)
            endpoints = tuple(n.endpoint for n in nodes)
            targets.append(
                Target(name, nodes[0].version, flavor, nodes[0].endpoint, endpoints, replicas=replicas)
            )
    except BenchError as exc:
        return title, (), [], (f"nats-server could not run a JetStream cluster here: {exc}",)
    return title, cases, targets, (JETSTREAM_NOTE,)
