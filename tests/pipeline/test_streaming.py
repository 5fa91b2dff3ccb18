"""Structured Streaming reads from pubmesh (and redis-server): micro-batches capped by
``maxRecordsPerTrigger``, restarts from a checkpoint that replay or continue exactly, starting
positions, and data loss that fails the query unless ``failOnDataLoss=false``."""

from __future__ import annotations

import gc
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest
import redis

from pipeline.local import redis_server as redis_server_process
from pipeline.options import OptionError, StreamId, stream_read_options
from tests.live import LiveNode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:Exception ignored in. <socket\.socket:pytest.PytestUnraisableExceptionWarning"
    ),
]

Entry = tuple[str, str, str]
"""(stream, id, the entry's ``n`` field)."""


def client(port: int | None) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port or 0, socket_timeout=20)


def url(node: LiveNode) -> str:
    return f"redis://127.0.0.1:{node.redis_port}"


def fill(r: redis.Redis, stream: str, count: int, first: int = 0) -> list[Entry]:
    return [
        (stream, cast(bytes, r.xadd(stream, {"n": str(i)})).decode(), str(i))
        for i in range(first, first + count)
    ]


def run(spark: SparkSession, checkpoint: Path, **options: str) -> list[tuple[int, list[Entry]]]:
    return run_until_read(spark, checkpoint, options, available_now=True)


def run_until_read(
    spark: SparkSession, checkpoint: Path, options: dict[str, str], available_now: bool
) -> list[tuple[int, list[Entry]]]:
    """One run of a streaming read until it has read everything (Trigger.AvailableNow, or the
    default trigger until processAllAvailable returns): every micro-batch's (id, entries)."""
    batches: list[tuple[int, list[Entry]]] = []

    def collect(df: DataFrame, batch_id: int) -> None:
        rows = df.collect()
        gc.collect()
        batches.append((batch_id, [(r.stream, r.id, r.fields["n"]) for r in rows]))

    stream = spark.readStream.format("pubmesh").options(**options).load()
    writer = stream.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
    query = (writer.trigger(availableNow=True) if available_now else writer).start()
    try:
        if available_now:
            query.awaitTermination(90)
        else:
            query.processAllAvailable()
    finally:
        query.stop()
    return batches


def entries(batches: list[tuple[int, list[Entry]]]) -> list[Entry]:
    return sorted(e for _, batch in batches for e in batch)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_batches_are_capped_and_a_restart_continues(
    spark: SparkSession, node: LiveNode, tmp_path: Path
) -> None:
    r = client(node.redis_port)
    data = fill(r, "s1-a", 25) + fill(r, "s1-b", 6)
    options = {"url": url(node), "stream": "s1-a,s1-b", "maxRecordsPerTrigger": "8", "partitions": "2"}

    batches = run(spark, tmp_path, **options)
    assert [len(batch) for _, batch in batches] == [8, 8, 8, 7]
    first = batches[0][1]
    assert sum(s == "s1-b" for s, _, _ in first) == 4  # the budget is shared between the streams
    assert entries(batches) == sorted(data)  # every entry once
    for stream in ("s1-a", "s1-b"):  # each stream read in order across the micro-batches
        ids = [StreamId.parse(i) for _, batch in batches for s, i, _ in batch if s == stream]
        assert ids == sorted(ids)

    more = fill(r, "s1-a", 3, 100)
    again = run(spark, tmp_path, **options)
    assert [b for b, _ in again] == [4]
    assert entries(again) == sorted(more)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_replayed_micro_batch_reads_the_same_rows(
    spark: SparkSession, node: LiveNode, tmp_path: Path
) -> None:
    """The last micro-batch is planned and run again after a restart when its commit was not
    recorded, with the offsets already logged: it must read the very same rows, though the stream
    has grown since."""
    r = client(node.redis_port)
    fill(r, "s2", 12)
    options = {"url": url(node), "stream": "s2", "maxRecordsPerTrigger": "5"}
    batches = run(spark, tmp_path, **options)
    assert [b for b, _ in batches] == [0, 1, 2]
    for name in ("2", ".2.crc"):  # as if the driver died before recording batch 2
        (tmp_path / "commits" / name).unlink()
    added = fill(r, "s2", 4, 50)
    again = run(spark, tmp_path, **options)
    assert again[0] == batches[2]
    assert entries(again[1:]) == sorted(added)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_starting_offsets(spark: SparkSession, node: LiveNode, tmp_path: Path) -> None:
    r = client(node.redis_port)
    old_a, old_b = fill(r, "s3-a", 4), fill(r, "s3-b", 4)
    options = {"url": url(node), "stream": "s3-a,s3-b"}
    # A latest query needs a first run to fix its position, as Kafka's does.
    assert entries(run(spark, tmp_path / "latest", startingOffsets="latest", **options)) == []
    new = fill(r, "s3-a", 2, 10)
    assert entries(run(spark, tmp_path / "latest", startingOffsets="latest", **options)) == new

    starting = f'{{"s3-a": "{old_a[1][1]}", "s3-b": "earliest"}}'
    got = run(spark, tmp_path / "map", startingOffsets=starting, **options)
    assert entries(got) == sorted(old_a[2:] + new + old_b)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_trimmed_entries_fail_the_query_unless_told_otherwise(
    spark: SparkSession, node: LiveNode, tmp_path: Path
) -> None:
    r = client(node.redis_port)
    data = fill(r, "s4", 10)
    options = {"url": url(node), "stream": "s4"}
    assert entries(run(spark, tmp_path, **options)) == data
    data += fill(r, "s4", 20, 10)
    r.xtrim("s4", maxlen=5, approximate=False)  # entries 10..24 are gone before the query read them
    with pytest.raises(Exception, match=r"'s4' lost 15 entries after the offset.*failOnDataLoss=false"):
        run(spark, tmp_path, **options)
    assert entries(run(spark, tmp_path, failOnDataLoss="false", **options)) == sorted(data[25:])

    r.xdel("s4", data[27][1])  # a deletion behind the first entry is no loss
    fresh = run(spark, tmp_path / "fresh", **options)
    assert entries(fresh) == [e for e in sorted(data[25:]) if e != data[27]]


BAD = [
    ({"startingOffsets": "newest"}, r"'startingOffsets': expected earliest, latest or"),
    ({"startingOffsets": '{"other": "1-0"}'}, r"'startingOffsets': names other streams .*other"),
    ({"startingOffsets": '{"s5": "x-1"}'}, r"'startingOffsets': malformed stream ID 'x-1'"),
    ({"startingOffsets": '{"s5": 7}'}, r"'startingOffsets': the position of 's5' is not a string"),
    ({"maxRecordsPerTrigger": "0"}, r"'maxRecordsPerTrigger': expected a positive integer"),
    ({"failOnDataLoss": "maybe"}, r"'failOnDataLoss': expected true or false"),
    ({"start": "0"}, r"'start': is a batch read option; a streaming read takes"),
    ({"commitKey": "0"}, r"'commitKey': is a streaming write option; a streaming read takes"),
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("options", "error"), BAD)
def test_bad_streaming_options_name_the_option(options: dict[str, str], error: str) -> None:
    given = {"url": "redis://127.0.0.1:1", "stream": "s5"} | options
    with pytest.raises(OptionError, match="pubmesh option " + error):
        stream_read_options({k.lower(): v for k, v in given.items()})


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_query_with_a_bad_option_fails_naming_it(
    spark: SparkSession, node: LiveNode, tmp_path: Path
) -> None:
    client(node.redis_port).xadd("s5", {"n": "1"})
    with pytest.raises(Exception, match=r"pubmesh option 'stream': no stream 'missing'"):
        run(spark, tmp_path, url=url(node), stream="s5,missing")
    with pytest.raises(Exception, match=r"pubmesh option 'maxRecordsPerTrigger': expected a positive"):
        run(spark, tmp_path, url=url(node), stream="s5", maxRecordsPerTrigger="-3")


@pytest.fixture(scope="module")
def redis_server() -> Iterator[int]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    with redis_server_process() as port:
        yield port


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_streaming_read_from_redis_server(
    spark: SparkSession, redis_server: int, tmp_path: Path
) -> None:
    r = client(redis_server)
    data = fill(r, "rs", 20)
    options = {"url": f"redis://127.0.0.1:{redis_server}", "stream": "rs"}
    batches = run_until_read(spark, tmp_path, options | {"maxRecordsPerTrigger": "6"}, False)
    assert [len(b) for _, b in batches] == [6, 6, 6, 2]
    assert entries(batches) == sorted(data)
    r.xtrim("rs", maxlen=2, approximate=False)
    more = fill(r, "rs", 3, 50)
    assert entries(run(spark, tmp_path, **options)) == sorted(more)  # trimmed after reading: no loss
    fill(r, "rs", 2, 60)
    r.xtrim("rs", maxlen=1, approximate=False)  # the first new entry goes unread
    with pytest.raises(Exception, match=r"failOnDataLoss"):
        run(spark, tmp_path, **options)
