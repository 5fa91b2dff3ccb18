"""Structured Streaming writes into pubmesh exactly once: a micro-batch Spark replays adds nothing, the
entries of a batch and its commit marker land together, and a real driver process killed with SIGKILL
at random points and restarted from its checkpoint leaves every source entry in the sink once."""

from __future__ import annotations

import gc
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest
import redis

from pipeline.options import Endpoints, OptionError, stream_write_options
from pipeline.streams import BatchCommits
from tests.live import LiveNode
from tests.pipeline.conftest import MISSING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <socket\.socket:pytest.PytestUnraisableExceptionWarning"
)

REPO = Path(__file__).resolve().parents[2]


def client(node: LiveNode) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=node.redis_port or 0, socket_timeout=20)


def url(node: LiveNode) -> str:
    return f"redis://127.0.0.1:{node.redis_port}"


def fill(r: redis.Redis, stream: str, values: range) -> None:
    with r.pipeline(transaction=False) as pipe:
        for i in values:
            pipe.xadd(stream, {"u": str(i)})
        pipe.execute()


def field(r: redis.Redis, stream: str, name: bytes) -> list[bytes]:
    entries = cast(list[tuple[bytes, dict[bytes, bytes]]], r.xrange(stream))
    return [fields[name] for _, fields in entries]


def staging_keys(r: redis.Redis) -> list[bytes]:
    return list(r.scan_iter(match="*:pubmesh-write:*"))


def drop_commit(checkpoint: Path, batch: int) -> None:
    """As if the driver died after the sink's commit but before Spark recorded the batch."""
    for name in (str(batch), f".{batch}.crc"):
        (checkpoint / "commits" / name).unlink()


@pytest.mark.slow
@pytest.mark.timeout(20)
def test_a_batch_commits_once_with_its_marker(node: LiveNode) -> None:
    r = client(node)
    commits = BatchCommits(Endpoints.parse(url(node)), "direct", "/ckpt/q1")
    staged = commits.staged(7)
    keys = [
        staged.stage(p, 0, iter([[(b"u", f"{p}-{i}".encode())] for i in range(300)]))[0] for p in (1, 0)
    ]
    assert r.exists("direct") == 0  # nothing visible before the commit
    assert commits.commit(7, sorted(keys)) is True
    want = [f"{p}-{i}".encode() for p in (0, 1) for i in range(300)]
    assert field(r, "direct", b"u") == want
    assert field(r, commits.marker, b"batch") == [b"7"]

    again = [staged.stage(0, 1, iter([[(b"u", b"dup")]]))[0]]
    assert commits.commit(7, again) is False  # a replay of batch 7
    assert commits.commit(3, again) is False  # an older batch
    assert field(r, "direct", b"u") == want
    assert staging_keys(r) == []

    other = BatchCommits(commits.nodes, "direct", "/ckpt/q2")  # another query, its own marker
    assert other.commit(0, [other.staged(0).stage(0, 0, iter([[(b"u", b"q2")]]))[0]]) is True
    assert field(r, "direct", b"u") == [*want, b"q2"]


@pytest.mark.slow
@pytest.mark.timeout(20)
def test_a_batch_committed_under_the_earlier_marker_name_is_not_committed_again(
    node: LiveNode,
) -> None:
    """(A query restarted across the upgrade that moved the marker beside its target's slot.)"""
    r = client(node)
    commits = BatchCommits(Endpoints.parse(url(node)), "upgraded", "/ckpt/q")
    assert commits.earlier_marker == f"upgraded:pubmesh-commits:{commits.query}" != commits.marker
    r.xadd(commits.earlier_marker, {"batch": "4", "key": "/ckpt/q"})
    staged = [commits.staged(4).stage(0, 0, iter([[(b"u", b"again")]]))[0]]
    assert commits.commit(4, staged) is False
    assert r.exists("upgraded") == 0
    assert commits.commit(5, [commits.staged(5).stage(0, 0, iter([[(b"u", b"new")]]))[0]]) is True
    assert field(r, "upgraded", b"u") == [b"new"]
    assert field(r, commits.marker, b"batch") == [b"5"]


def test_the_commit_key_comes_from_the_checkpoint_unless_given() -> None:
    base = {"url": "redis://127.0.0.1:1", "stream": "out"}
    ckpt = {"checkpointlocation": "/data/ckpt", "queryname": "q"}
    assert stream_write_options(base | ckpt).commit_key == "/data/ckpt"
    assert stream_write_options(base | ckpt | {"commitkey": "orders-v2"}).commit_key == "orders-v2"
    assert stream_write_options(base | {"queryname": "q"}).commit_key == "q"
    with pytest.raises(OptionError, match="'checkpointLocation': a streaming write needs a key"):
        stream_write_options(base)
    with pytest.raises(OptionError, match="'commitKey': is empty"):
        stream_write_options(base | ckpt | {"commitkey": " "})
    with pytest.raises(OptionError, match="'maxRecordsPerTrigger': is a streaming read option"):
        stream_write_options(base | ckpt | {"maxrecordspertrigger": "5"})


def stream_copy(spark: SparkSession, node: LiveNode, source: str, sink: str, checkpoint: Path) -> None:
    rows = (
        spark.readStream.format("pubmesh")
        .options(url=url(node), stream=source, maxRecordsPerTrigger="20")
        .load()
    )
    query = (
        rows.writeStream.format("pubmesh")
        .options(url=url(node), stream=sink, checkpointLocation=str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(90)
    finally:
        query.stop()
    gc.collect()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_replayed_micro_batch_adds_nothing(
    spark: SparkSession, node: LiveNode, tmp_path: Path
) -> None:
    r = client(node)
    fill(r, "w-src", range(50))
    stream_copy(spark, node, "w-src", "w-sink", tmp_path)
    assert field(r, "w-sink", b"u") == [str(i).encode() for i in range(50)]
    marker = BatchCommits(Endpoints.parse(url(node)), "w-sink", str(tmp_path)).marker
    assert marker.startswith("{w-sink}:")  # (the target's slot)
    assert field(r, marker, b"batch") == [b"0", b"1", b"2"]

    drop_commit(tmp_path, 2)
    fill(r, "w-src", range(50, 55))
    stream_copy(spark, node, "w-src", "w-sink", tmp_path)  # runs batch 2 again, then batch 3
    assert field(r, "w-sink", b"u") == [str(i).encode() for i in range(55)]
    assert field(r, marker, b"batch") == [b"0", b"1", b"2", b"3"]
    assert staging_keys(r) == []


def start_job(node: LiveNode, checkpoint: Path, log: Path) -> subprocess.Popen[bytes]:
    args = [
        sys.executable,
        "-m",
        "tests.pipeline.stream_job",
        url(node),
        "k-src",
        "k-sink",
        str(checkpoint),
    ]
    with log.open("ab") as out:
        # A session of its own, so that the kill takes the JVM and the Python workers too.
        return subprocess.Popen(args, cwd=REPO, stdout=out, stderr=out, start_new_session=True)


@pytest.mark.slow
@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
@pytest.mark.timeout(400)
def test_exactly_once_when_the_driver_is_killed(node: LiveNode, tmp_path: Path) -> None:
    seed = int(os.environ.get("PUBMESH_KILL_SEED", time.time_ns() % 10**6))
    rng = random.Random(seed)
    r = client(node)
    # 12 micro-batches of 100. A round moves the sink at most about three batches on (the goal, the
    # batch that crosses it, one more while the kill waits), so three rounds always leave work undone.
    total = 1200
    fill(r, "k-src", range(total))
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "job.log"
    kills = []
    for _ in range(3):
        job = start_job(node, checkpoint, log)
        try:
            # Entries reach the sink as a micro-batch commits. The kill lands at once (between the
            # sink's commit and Spark's record of it) or within the next batch: the wait is a random
            # part of the time the last batch took, so it scales with the machine's speed.
            start = r.xlen("k-sink")
            goal = start + rng.randint(1, 100)
            deadline = time.monotonic() + 120
            seen, changed, interval = start, time.monotonic(), 0.5
            while seen < goal and job.poll() is None:
                assert time.monotonic() < deadline, (
                    f"no progress (seed {seed}): {log.read_text()[-3000:]}"
                )
                time.sleep(0.02)
                now, count = time.monotonic(), r.xlen("k-sink")
                if count != seen:
                    if seen != start:
                        interval = now - changed
                    seen, changed = count, now
            time.sleep(rng.choice([0, rng.uniform(0, interval)]))
            assert job.poll() is None, f"the job ended before its kill (seed {seed})"
            kills.append(r.xlen("k-sink"))
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)

    job = start_job(node, checkpoint, log)
    try:
        assert job.wait(240) == 0, log.read_text()[-3000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)

    got = field(r, "k-sink", b"u")
    assert Counter(got) == Counter(str(i).encode() for i in range(total)), (seed, kills)
    assert len(got) == total
    assert staging_keys(r) == []
