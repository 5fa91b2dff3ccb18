"""The ``pubmesh`` Spark data source against a live node (and redis-server): reads equal XRANGE, writes
show up in XRANGE exactly once even when a task is retried, bad input fails naming the option."""

from __future__ import annotations

import gc
import shutil
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

import pytest
import redis

from pipeline.local import free_port
from pipeline.local import redis_server as redis_server_process
from pipeline.options import Endpoints, StreamId
from pipeline.streams import StagedWrite
from tests.live import LiveNode
from tests.pipeline.conftest import needs_spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BASE = 1_700_000_000_000

# PySpark's collect() leaves its result socket for the garbage collector to close (see rows_of).
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <socket\.socket:pytest.PytestUnraisableExceptionWarning"
)


def client(port: int | None, **options: Any) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port or 0, socket_timeout=20, **options)


def url(node: LiveNode) -> str:
    return f"redis://127.0.0.1:{node.redis_port}"


def read(spark: SparkSession, **options: str) -> DataFrame:
    return spark.read.format("pubmesh").options(**options).load()


def rows_of(df: DataFrame) -> list[tuple[str, str, int, dict[str, bytes | str]]]:
    from pyspark.sql import functions as F

    got = df.select("stream", "id", F.unix_millis("timestamp").alias("ms"), "fields").collect()
    gc.collect()  # closes collect()'s socket here, inside this test, where its warning is ignored
    return sorted(
        (
            r.stream,
            r.id,
            r.ms,
            {k: bytes(v) if isinstance(v, bytearray) else v for k, v in r.fields.items()},
        )
        for r in got
    )


def expected(
    r: redis.Redis, *streams: str, low: str = "-", high: str = "+", binary: bool = True
) -> list[tuple[str, str, int, dict[str, bytes | str]]]:
    out = []
    for stream in streams:
        for entry_id, fields in xrange(r, stream, low, high):
            text = entry_id.decode()
            values = {k.decode(): v if binary else v.decode(errors="replace") for k, v in fields.items()}
            out.append((stream, text, StreamId.parse(text).ms, values))
    return sorted(out)


def xrange(
    r: redis.Redis, stream: str, low: str = "-", high: str = "+"
) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return cast(list[tuple[bytes, dict[bytes, bytes]]], r.xrange(stream, low, high))


def staging_keys(r: redis.Redis) -> list[bytes]:
    return list(r.scan_iter(match="*:pubmesh-write:*"))


@pytest.mark.slow
@needs_spark
@pytest.mark.timeout(240)
def test_partitioned_read_equals_xrange(spark: SparkSession, node: LiveNode) -> None:
    r = client(node.redis_port)
    for i in range(900):  # three entries per millisecond, values that are not UTF-8
        r.xadd("orders", {"n": str(i), "raw": bytes([i % 256, 0, 255])}, id=f"{BASE + i // 3}-{i % 3}")
    r.xdel("orders", *(f"{BASE + i // 3}-{i % 3}" for i in range(0, 900, 10)))
    for i in range(40):
        r.xadd("payments", {"amount": str(i * 3), "currency": "EUR"})
    r.xadd("emptied", {"x": "1"}, id="5-0")
    r.xdel("emptied", "5-0")

    # Small pages, so each partition pages through its slice.
    whole = read(
        spark,
        url=url(node),
        stream="orders, payments,emptied",
        partitions="3",
        binary="true",
        pageSize="7",
    )
    assert whole.rdd.getNumPartitions() >= 4
    assert str(whole.schema["fields"].dataType) == "MapType(StringType(), BinaryType(), False)"
    assert rows_of(whole) == expected(r, "orders", "payments", "emptied")

    low, high = f"{BASE + 10}", f"{BASE + 50}-1"
    sliced = read(spark, url=url(node), stream="orders", start=low, end=high, partitions="2")
    assert rows_of(sliced) == expected(r, "orders", low=f"{low}-0", high=high, binary=False)


def flaky(rows: Iterable[Any]) -> Iterator[Any]:
    """Fails partition 0's first attempt after 700 rows, past the first staged batch."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None
    for i, row in enumerate(rows):
        if context.partitionId() == 0 and context.attemptNumber() == 0 and i == 700:
            raise RuntimeError("injected task failure")
        yield row


@pytest.mark.slow
@needs_spark
@pytest.mark.timeout(240)
def test_write_lands_once_despite_a_retried_task(spark: SparkSession, node: LiveNode) -> None:
    r = client(node.redis_port)
    data = [
        (i, f"item-{i}" if i % 5 else None, {"region": f"r{i % 4}"}, bytes([i % 256, 0]))
        for i in range(2000)
    ]
    schema = "n int, name string, fields map<string,string>, blob binary"
    df = spark.createDataFrame(spark.sparkContext.parallelize(data, 2).mapPartitions(flaky), schema)
    df.write.format("pubmesh").mode("append").option("url", url(node)).option("stream", "sink").save()

    got = [fields for _, fields in xrange(r, "sink")]
    want = [
        {
            b"n": str(n).encode(),
            **({b"name": name.encode()} if name is not None else {}),
            b"region": fields["region"].encode(),
            b"blob": blob,
        }
        for n, name, fields, blob in data
    ]
    assert got == want  # every row once, partitions in order
    assert staging_keys(r) == []


@pytest.mark.slow
def test_a_failed_attempts_staged_rows_are_never_committed(node: LiveNode) -> None:
    """What Spark's retry relies on, without Spark: a partial first attempt, a full second one."""
    r = client(node.redis_port)
    job = StagedWrite(Endpoints.parse(url(node)), "direct", "job1")
    rows = [[(b"i", str(i).encode())] for i in range(1200)]
    job.stage(0, 0, iter(rows[:700]))  # the attempt that failed midway
    second, count = job.stage(0, 1, iter(rows))
    assert count == 1200
    assert r.exists("direct") == 0  # nothing reaches the target before the commit
    job.commit([second])
    assert [fields[b"i"] for _, fields in xrange(r, "direct")] == [str(i).encode() for i in range(1200)]
    assert staging_keys(r) == []


@pytest.fixture(scope="module")
def redis_server() -> Iterator[int]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    with redis_server_process("--requirepass", "sesame") as port:
        yield port


@pytest.mark.slow
@needs_spark
@pytest.mark.timeout(180)
def test_reads_redis_server_with_login_and_database(spark: SparkSession, redis_server: int) -> None:
    r = client(redis_server, password="sesame", db=2)
    for i in range(300):
        r.xadd("events", {"i": str(i), "kind": "click" if i % 2 else "view"}, id=f"{BASE + i}-0")
    r.xdel("events", f"{BASE + 7}-0")
    df = read(
        spark, url=f"redis://default:sesame@127.0.0.1:{redis_server}/2", stream="events", partitions="2"
    )
    assert rows_of(df) == expected(r, "events", binary=False)

    with pytest.raises(Exception, match=r"pubmesh option 'url': .* refused the login: WRONGPASS"):
        read(spark, url=f"redis://default:wrong@127.0.0.1:{redis_server}/2", stream="events").collect()


BAD_READS = [
    ({"url": "redis://127.0.0.1:{closed}"}, r"'url': cannot connect to 127\.0\.0\.1"),
    ({"url": "http://127.0.0.1:{port}"}, r"'url': .* is not redis://"),
    ({"url": "redis://127.0.0.1:{port}/x"}, r"'url': database 'x' is not a number"),
    ({"stream": "nothing-here"}, r"'stream': no stream 'nothing-here'"),
    ({"stream": "a,,b"}, r"'stream': missing, or an empty name"),
    ({"start": "abc"}, r"'start': malformed stream ID 'abc'"),
    ({"end": "1-x"}, r"'end': malformed stream ID '1-x'"),
    ({"start": "9", "end": "3"}, r"'start': '9' is after end '3'"),
    ({"partitions": "0"}, r"'partitions': expected a positive integer"),
    ({"binary": "yes"}, r"'binary': expected true or false"),
    ({"strat": "0"}, r"'strat': unknown option"),
]


@pytest.mark.slow
@needs_spark
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("options", "error"), BAD_READS)
def test_bad_read_input_names_the_option(
    spark: SparkSession, node: LiveNode, options: dict[str, str], error: str
) -> None:
    client(node.redis_port).xadd("present", {"x": "1"})
    given = {"url": url(node), "stream": "present"} | options
    given = {k: v.format(port=node.redis_port, closed=free_port()) for k, v in given.items()}
    with pytest.raises(Exception, match="pubmesh option " + error):
        read(spark, **given).collect()


@pytest.mark.slow
@needs_spark
@pytest.mark.timeout(120)
def test_bad_writes_name_the_option_and_write_nothing(spark: SparkSession, node: LiveNode) -> None:
    r = client(node.redis_port)
    df = spark.createDataFrame([(1, "a"), (None, None), (3, "c")], "n int, s string")

    def write(mode: str = "append", **options: str) -> None:
        given = {"url": url(node), "stream": "refused"} | options
        df.write.format("pubmesh").mode(mode).options(**given).save()

    with pytest.raises(Exception, match=r"pubmesh option 'mode': overwrite is not supported"):
        write("overwrite")
    with pytest.raises(
        Exception, match=r"pubmesh option 'start': is a batch read option; a batch write takes"
    ):
        write(start="0")
    with pytest.raises(Exception, match=r"pubmesh option 'stream': a write goes to one stream, not 2"):
        write(stream="a,b")
    with pytest.raises(Exception, match=r"pubmesh option 'url': cannot connect"):
        write(url=f"redis://127.0.0.1:{free_port()}")
    # The all-null row fails its task after the other rows were staged: the target stays untouched.
    with pytest.raises(Exception, match=r"a row whose columns are all null"):
        write()
    assert r.exists("refused") == 0
    assert staging_keys(r) == []
