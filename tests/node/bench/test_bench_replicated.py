"""The replicated-keys measurements (``pubmesh bench resp-replicated``): against 3-node pubmesh
clusters started as processes, every write is answered and lands in the key's group, a failover
ends with a new leader and the killed node back, a catch-up ends with the follower applied up to
the leader's commit; against nats-server's JetStream, every publish is acked. Counts and states are
asserted, never timings."""

from __future__ import annotations

import pytest
import redis as redispy

from cluster.placement import layout
from node.bench import cli, jetstream
from node.bench.compare import Block, Outcome, render
from node.bench.progress import ProgressBar
from node.bench.replicas import NAMES, ReplicatedCluster, hash_tag, jetstream_cluster
from node.bench.replicated import WARMUP, CatchUp, Failover, Writes, catch_up, failover
from node.bench.replicated_cases import (
    CASES,
    FAULT_CASES,
    JETSTREAM_CASES,
    LOAD_CASES,
    OneAtATimeCase,
    ReplicatedCase,
    XaddCase,
)
from node.bench.scenarios import Latency, Result, Spec
from node.bench.servers import Servers, nats_server
from node.bench.target import Target
from node.bench.wire import Endpoint

pytestmark = pytest.mark.timeout(60)

REDIS = Endpoint("127.0.0.1", 6379, scheme="redis")
NATS_SERVER = nats_server()


def test_a_hash_tag_keeps_keys_in_the_chosen_group() -> None:
    for replicas in (1, 3):
        placement = layout(NAMES, replicas)
        for group in placement.groups:
            tag = hash_tag(placement, group.name)
            for key in (tag, f"{tag}.stream.1", f"{tag}.one.abc"):
                assert placement.group_of(key.encode()).name == group.name


def test_every_replicated_case_is_chosen_by_its_word() -> None:
    assert all("replicated" in case.label for case in CASES)
    assert len({case.label for case in CASES}) == len(CASES)


def test_an_unknown_case_is_a_usage_error() -> None:
    assert cli.main(["resp-replicated", "--only", "no such case"]) == 2


def made_up(case: ReplicatedCase, seconds: float) -> Outcome:
    """A passed run of ``case``, its figures derived from ``seconds``."""
    latency = Latency(seconds * 1000, seconds * 2000, seconds * 1000)
    if isinstance(case, XaddCase):
        spec = Spec("resp-xadd", REDIS, 10, 16, 0, subject="{g0}")
        return Result(spec, expected=10, received=10, seconds=seconds, per_worker=(10,))
    if isinstance(case, OneAtATimeCase) or case in JETSTREAM_CASES:
        return Writes(10, 10, seconds, latency)
    if case == FAULT_CASES[0]:
        return Failover(seconds, 3, killed="n1", via="n2", new_leader="n2")
    return CatchUp(10, seconds, seconds / 2, commit=12, follower="n3")


def test_tables_show_replicas_3_beside_1_and_their_ratio() -> None:
    versions = {"replicas = 3": "0.1.0", "replicas = 1": "0.1.0"}
    results = {(case.label, "replicas = 3"): [made_up(case, 2.0)] for case in LOAD_CASES}
    results |= {(case.label, "replicas = 1"): [made_up(case, 1.0)] for case in LOAD_CASES}
    results |= {(case.label, "replicas = 3"): [made_up(case, 4.0)] for case in FAULT_CASES}
    blocks = [
        Block("Replicated keys", LOAD_CASES, versions, ()),
        Block("Failover", FAULT_CASES, {"replicas = 3": "0.1.0"}, ()),
    ]
    table = render(results, blocks, 1, 1.0, 1.0)
    pipelined = LOAD_CASES[0].label
    assert f"| {pipelined}, 2,000 entries: entries added/s | 5 | 10 | 0.50 |" in table
    one = LOAD_CASES[2].label
    assert f"| {one}, 300 XADDs: p50 (ms) | 2.00 | 1.00 | 2.00 |" in table
    assert f"| {FAULT_CASES[0].label}, one leader killed: s from SIGKILL" in table
    assert "entries/s applied once listening | 5 |" in table  # (10 entries in 4 - 2 s)
    assert "failed" not in table


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_replicated_cluster_measurements() -> None:
    with Servers() as servers:
        cluster = ReplicatedCluster.start(servers, 3)
        group = cluster.groups[0]
        leader = cluster.leader(group)
        assert {cluster.leader(g).name for g in cluster.groups} <= set(NAMES)
        target = Target("replicas = 3", "", None, leader.redis, replicated=cluster, replicas=3)
        for case in LOAD_CASES:
            outcome = case.measure(target, 0.01, ProgressBar(case.label, None))
            assert outcome.ok, outcome.failure()
        with redispy.Redis(host="127.0.0.1", port=cluster.nodes[1].redis.port) as client:
            keys: list[bytes] = client.keys("*")
            assert len(keys) == len(LOAD_CASES)  # (a fresh stream per run)
            assert {cluster.placement.group_of(key).name for key in keys} == {group}
            lengths = sorted(client.xlen(key) for key in keys)
            assert lengths == [3, 3, 20, 20]  # (300 and 2,000 scaled by 0.01)

        done = failover(cluster)
        assert done.ok, done.failure()
        assert done.new_leader != done.killed
        assert bool(done.first_error) == (done.failed_writes > 0)
        assert all(node.alive for node in cluster.nodes)
        with redispy.Redis(host="127.0.0.1", port=cluster.leader(group).redis.port) as client:
            key = next(k for k in client.keys("*.failover.*"))
            # (a write answered with an error may still have been committed)
            assert WARMUP + 1 <= client.xlen(key) <= WARMUP + 1 + done.failed_writes

        caught = catch_up(cluster, 50)
        assert caught.ok, caught.failure()
        follower = cluster.node(caught.follower)
        status = follower.group(group)
        assert status is not None
        assert status["applied"] >= caught.commit
        assert 0 < caught.starting <= caught.seconds


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not on PATH")
def test_jetstream_publishes_are_all_acked() -> None:
    assert NATS_SERVER is not None
    with Servers() as servers:
        nodes = jetstream_cluster(servers, NATS_SERVER)
        jetstream.create_stream(nodes[0].endpoint, "R3", "bench.r3", 3)
        jetstream.create_stream(nodes[0].endpoint, "R3", "bench.r3", 3)  # (already there: fine)
        piped = jetstream.publish(nodes[1].endpoint, "bench.r3", 500, 16)
        assert piped.ok, piped.failure()
        assert piped.done == 500
        one = jetstream.publish_one_at_a_time(nodes[2].endpoint, "bench.r3", 20, 16)
        assert one.ok, one.failure()
        assert one.done == 20
        assert one.latency.p50 > 0
