"""The pipeline against three ``pubmesh serve`` processes whose keys are replicated (replicas = 3):
``url`` names every node, partitions read from their own node's replica (READONLY) once it holds
their slice, and the exactly-once sink commits through any node (its marker and staging streams
share the target's slot, and its WATCH is kept by the marker's leader)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from cluster.placement import layout
from pipeline.options import Endpoints, StreamId
from pipeline.replicas import on_replica
from pipeline.streams import BatchCommits
from tests.cluster.replication.jepsen import Node, leaders, wait
from tests.pipeline.conftest import needs_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings(
        r"ignore:Exception ignored in. <socket\.socket:pytest.PytestUnraisableExceptionWarning"
    ),
]

NAMES = ("a", "b", "c")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Node]]:
    root = tmp_path_factory.mktemp("replicated")
    running = [Node(name, root) for name in NAMES]
    for node in running:
        node.configure(NAMES, [n.route_port for n in running], "50ms")
        node.start()
    try:
        wait(lambda: leaders(running, len(NAMES)), "every group's leader")
        yield running
    finally:
        for node in running:
            if node.alive:
                node.kill()


def url(nodes: list[Node]) -> str:
    return ",".join(f"redis://127.0.0.1:{node.redis_port}" for node in nodes)


def leader_of(nodes: list[Node], key: str) -> Node:
    led = wait(lambda: leaders(nodes, len(NAMES)), "every group's leader")
    name = led[layout(NAMES, 3).group_of(key.encode()).name]
    return next(node for node in nodes if node.name == name)


def readonly_calls(node: Node) -> int:
    with node.redis() as r:
        stats = cast(dict[str, dict[str, int]], r.info("commandstats"))
    return stats.get("cmdstat_readonly", {}).get("calls", 0)


def test_a_replica_is_read_once_it_holds_the_slice(nodes: list[Node]) -> None:
    key = "fenced"
    leader = leader_of(nodes, key)
    follower = next(node for node in nodes if node is not leader)
    with leader.redis() as r:
        last = cast(bytes, r.xadd(key, {"n": "1"}))
    fence = StreamId.parse(last.decode())
    with Endpoints.parse(f"redis://127.0.0.1:{follower.redis_port}").connect() as client:
        assert on_replica(client, key, fence) is True  # (it has it, or gets it within the wait)
        assert client.call("XLEN", key) == 1
    ahead = StreamId(fence.ms + 60_000, 0)  # (an ID no replica has generated)
    with Endpoints.parse(f"redis://127.0.0.1:{follower.redis_port}").connect() as client:
        assert on_replica(client, key, ahead, wait=0.2) is False
        assert client.call("XLEN", key) == 1  # (READWRITE again: the leader's answer)


@needs_spark
def test_partitions_read_every_replica_and_equal_xrange(spark: SparkSession, nodes: list[Node]) -> None:
    stream = "spread"
    with nodes[0].redis() as r:
        with r.pipeline(transaction=False) as pipe:
            for i in range(3000):  # (one millisecond each: the plan cuts six slices)
                pipe.xadd(stream, {"i": str(i)}, id=f"{1_700_000_000_000 + i}-0")
            pipe.execute()
        want = [(i.decode(), f[b"i"].decode()) for i, f in r.xrange(stream)]
    before = [readonly_calls(node) for node in nodes]
    df = spark.read.format("pubmesh").options(url=url(nodes), stream=stream, partitions="6").load()
    got = sorted((row.id, row.fields["i"]) for row in df.select("id", "fields").collect())
    gc.collect()
    assert got == sorted(want)
    after = [readonly_calls(node) for node in nodes]
    assert all(a > b for a, b in zip(after, before, strict=True))  # (every node served a part)


def test_the_sink_commits_once_through_a_node_that_does_not_lead_its_target(
    nodes: list[Node],
) -> None:
    target = "exactly"
    leader = leader_of(nodes, target)
    others = [node for node in nodes if node is not leader]
    commits = BatchCommits(Endpoints.parse(url(others)), target, "/ckpt/replicated")
    assert leader_of(nodes, commits.marker) is leader  # (the marker keeps to the target's slot)
    rows = iter([[(b"u", b"%d" % i)] for i in range(600)])
    staged = [commits.staged(0).stage(0, 0, rows)[0]]
    assert commits.commit(0, staged) is True
    again = [commits.staged(0).stage(0, 1, iter([[(b"u", b"dup")]]))[0]]
    assert commits.commit(0, again) is False  # (a replay: nothing added)
    with leader.redis() as r:
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]], r.xrange(target))
        assert [f[b"u"] for _, f in entries] == [b"%d" % i for i in range(600)]
        assert list(r.scan_iter(match="*pubmesh-write*")) == []


@needs_spark
def test_a_streaming_copy_across_the_cluster_is_exactly_once(
    spark: SparkSession, nodes: list[Node], tmp_path: Path
) -> None:
    source, sink = "copy-src", "copy-sink"
    with nodes[1].redis() as r:
        for i in range(120):
            r.xadd(source, {"u": str(i)})
    rows = (
        spark.readStream.format("pubmesh")
        .options(url=url(nodes), stream=source, maxRecordsPerTrigger="40", partitions="3")
        .load()
    )
    query = (
        rows.writeStream.format("pubmesh")
        .options(url=url(nodes[::-1]), stream=sink, checkpointLocation=str(tmp_path))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    gc.collect()
    for node in nodes:  # (every replica holds the copy once)
        with node.redis() as r:
            r.execute_command("READONLY")
            entries = cast(list[tuple[bytes, dict[bytes, bytes]]], r.xrange(sink))
            assert [f[b"u"] for _, f in entries] == [b"%d" % i for i in range(120)], node.name
