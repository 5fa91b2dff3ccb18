"""``pubmesh pipeline bench``: how fast the data source reads, and how soon a streamed entry is out.

- Batch read: a stream of ``--entries`` order-like entries (1M by default) is filled with the same
  data in a pubmesh node and in a redis-server, both started here on 127.0.0.1. The ``pubmesh``
  format reads it whole (``count()``) with 1 and 2 partitions, beside a plain redis-py loop of XRANGE
  pages of 10,000 entries over the same stream. Rows per second, the best of ``--runs``.
- Streaming latency: messages published over NATS at a steady ``--rate`` (5,000/s) are captured into
  a stream; a streaming query (``readStream.format("pubmesh")``, micro-batches as fast as they go)
  copies them into a second stream through the ``pubmesh`` sink; a redis-py client follows that
  stream with XREAD BLOCK. Latency is from just before the publish to when the follower sees the
  entry, for messages sent over ``--seconds`` once the first entry has come through; p50 and p99.

Everything runs on this machine, so the servers, Spark and the clients share its cores: the numbers
are for comparing one row with another, not absolute capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, cast

import attrs

from pipeline.feed import Order
from pipeline.local import NodeUrls, pubmesh_node, redis_server

if TYPE_CHECKING:
    import redis
    from pyspark.sql import SparkSession

__all__ = ["main"]

PAGE = 10_000
PRICE = Decimal("89.90")
BASE_MS = 1_700_000_000_000
FILL_BATCH = 1_000
SOURCE = "bench-orders"
TICKS, LIVE, COPY = "bench.ticks", "bench-ticks", "bench-ticks-copy"
"""The latency run's subject, the stream capturing it, and the stream the query copies it into."""
WARMUP_TIMEOUT = 180.0
DRAIN = 5.0
"""Seconds the follower keeps reading after the feed stops, for the last micro-batches."""


Entries = list[tuple[bytes, dict[bytes, bytes]]]


@attrs.frozen
class Row:
    measurement: str
    server: str
    value: str


def _client(url: str) -> redis.Redis:
    import redis

    return redis.Redis.from_url(url, socket_timeout=60)


def fill(url: str, entries: int) -> None:
    """``entries`` order-like entries (subject and a JSON order of ~110 bytes), pipelined."""
    client = _client(url)
    client.delete(SOURCE)
    for first in range(0, entries, FILL_BATCH):
        pipe = client.pipeline(transaction=False)
        for i in range(first, min(first + FILL_BATCH, entries)):
            order = Order(f"o-{i:08d}", "eu-west", "grinder", 1 + i % 3, PRICE, BASE_MS + i)
            pipe.xadd(SOURCE, {"subject": order.subject, "data": order.payload()})
        pipe.execute()


def best(runs: int, entries: int, measure: Callable[[], int]) -> float:
    """Rows per second of the fastest of ``runs`` runs; each must read every entry."""
    rates = []
    for _ in range(runs):
        began = time.perf_counter()
        rows = measure()
        elapsed = time.perf_counter() - began
        if rows != entries:
            raise RuntimeError(f"read {rows:,} entries of {entries:,}")
        rates.append(rows / elapsed)
    return max(rates)


def xrange_loop(url: str) -> int:
    client = _client(url)
    start, rows = "-", 0
    while True:
        page = cast(Entries, client.xrange(SOURCE, start, "+", count=PAGE))
        rows += len(page)
        if len(page) < PAGE:
            return rows
        start = "(" + page[-1][0].decode()


def spark_read(spark: SparkSession, url: str, partitions: int) -> int:
    frame = spark.read.format("pubmesh").options(url=url, stream=SOURCE, partitions=str(partitions))
    return frame.load().count()


def batch_rows(spark: SparkSession, servers: dict[str, str], entries: int, runs: int) -> list[Row]:
    return [
        row for server, url in servers.items() for row in _server_rows(spark, server, url, entries, runs)
    ]


def _server_rows(spark: SparkSession, server: str, url: str, entries: int, runs: int) -> list[Row]:
    fill(url, entries)
    spark_read(spark, url, 2)  # warms up the Python workers and the JVM's code paths
    measures: list[tuple[str, Callable[[], int]]] = [
        ("redis-py XRANGE loop (pages of 10k)", lambda: xrange_loop(url)),
        ("spark read, 1 partition", lambda: spark_read(spark, url, 1)),
        ("spark read, 2 partitions", lambda: spark_read(spark, url, 2)),
    ]
    rows = []
    for name, measure in measures:
        got = best(runs, entries, measure)
        rows.append(Row(f"{name}, {entries:,} entries", server, f"{got:,.0f} rows/s"))
    _client(url).delete(SOURCE)
    return rows


async def _publish_steady(url: str, rate: int, stop: threading.Event) -> None:
    """Publish ``{"sent": perf_counter}`` on TICKS at ``rate`` per second, in 10 ms slices, until
    ``stop``."""
    import nats

    client = await nats.connect(url, connect_timeout=10, allow_reconnect=False)
    sent, began = 0, time.perf_counter()
    try:
        while not stop.is_set():
            due = int((time.perf_counter() - began) * rate)
            while sent < due:
                await client.publish(TICKS, b'{"sent":%r}' % time.perf_counter())
                sent += 1
            await client.flush()
            await asyncio.sleep(0.01)
    finally:
        await client.close()


def _follow(url: str, seen: list[tuple[float, float]], stop: threading.Event) -> None:
    """XREAD BLOCK on the copy stream, noting each entry's (sent, seen) times."""
    client = _client(url)
    last = "$"
    while not stop.is_set():
        reply = cast(list[tuple[bytes, Entries]], client.xread({COPY: last}, block=200, count=10_000))
        for _, entries in reply:
            now = time.perf_counter()
            for entry_id, fields in entries:
                seen.append((json.loads(fields[b"data"])["sent"], now))
                last = entry_id.decode()


def latency_rows(spark: SparkSession, urls: NodeUrls, rate: int, seconds: float, out: str) -> list[Row]:
    """The query starts and the feed runs until the first entry comes through (the first
    micro-batches start Spark's Python workers); then messages sent over ``seconds`` are timed."""
    query = (
        spark.readStream.format("pubmesh")
        .options(url=urls.redis, stream=LIVE, startingOffsets="latest")
        .load()
        .select("fields")
        .writeStream.format("pubmesh")
        .options(url=urls.redis, stream=COPY, checkpointLocation=out)
        .trigger(processingTime="0 seconds")
        .start()
    )
    seen: list[tuple[float, float]] = []
    stop_feed, stop_follower = threading.Event(), threading.Event()
    threads = [
        threading.Thread(target=_follow, args=(urls.redis, seen, stop_follower), daemon=True),
        threading.Thread(
            target=asyncio.run, args=(_publish_steady(urls.nats, rate, stop_feed),), daemon=True
        ),
    ]
    try:
        for thread in threads:
            thread.start()
        deadline = time.perf_counter() + WARMUP_TIMEOUT
        while not seen:
            if time.perf_counter() > deadline or not query.isActive:
                raise RuntimeError(f"no entry came through the streaming query: {query.exception()}")
            time.sleep(0.1)
        began = time.perf_counter()
        time.sleep(seconds)
        ended = time.perf_counter()
        stop_feed.set()
        time.sleep(DRAIN)
        batches = [p for p in query.recentProgress if p["numInputRows"]]
    finally:
        stop_feed.set()
        stop_follower.set()
        query.stop()
        for thread in threads:
            thread.join(10)
    measured = sorted(now - sent for sent, now in seen if began <= sent < ended)
    expected = round((ended - began) * rate)

    def ms(q: float) -> str:
        return f"{measured[min(len(measured) - 1, int(q * len(measured)))] * 1000:,.0f} ms"

    what = f"publish -> sink entry visible, {rate:,} msgs/s for {seconds:.0f} s"
    what += f" ({len(measured):,} of ~{expected:,} seen)"
    rows = sum(p["numInputRows"] for p in batches)
    busy = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    return [
        Row(f"{what}, p50", "pubmesh", ms(0.5)),
        Row(f"{what}, p99", "pubmesh", ms(0.99)),
        Row(
            f"streaming query: {len(batches)} micro-batches, rows per second busy",
            "pubmesh",
            f"{rows / busy:,.0f} rows/s",
        ),
    ]


def table(rows: Sequence[Row]) -> str:
    width = max(len(r.measurement) for r in rows)
    lines = [f"| {'measurement':{width}} | server       | result          |"]
    lines.append(f"|{'-' * (width + 2)}|--------------|-----------------|")
    lines += [f"| {r.measurement:{width}} | {r.server:12} | {r.value:>15} |" for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    import tempfile

    from pipeline.session import spark_session

    p = argparse.ArgumentParser(prog="pubmesh pipeline bench", description=__doc__.split("\n")[0])
    p.add_argument("--entries", type=int, default=1_000_000, help="entries in the batch-read stream")
    p.add_argument("--runs", type=int, default=2, help="runs per batch measurement; the best is shown")
    p.add_argument("--rate", type=int, default=5_000, help="messages per second for the latency run")
    p.add_argument("--seconds", type=float, default=20.0, help="measured seconds of the latency run")
    p.add_argument("--master", default="local[2]", help="Spark master")
    p.add_argument("--skip-batch", action="store_true", help="only the streaming latency")
    args = p.parse_args(argv)
    spark = spark_session(args.master, "pubmesh-pipeline-bench")
    rows: list[Row] = []
    try:
        with pubmesh_node({LIVE: TICKS}) as urls, tempfile.TemporaryDirectory() as scratch:
            if not args.skip_batch:
                with redis_server() as redis_port:
                    redis_url = f"redis://127.0.0.1:{redis_port}"
                    servers = {"pubmesh": urls.redis, "redis-server": redis_url}
                    rows += batch_rows(spark, servers, args.entries, args.runs)
            rows += latency_rows(spark, urls, args.rate, args.seconds, scratch)
    finally:
        spark.stop()
    print(table(rows))
    return 0
