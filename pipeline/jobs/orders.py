"""Orders per region per minute: a Structured Streaming job over a captured ``orders`` stream.

The stream's entries are NATS messages a node captured (fields ``subject`` and ``data``, the data an
order as JSON: order_id, region, product, quantity, price, ts in epoch milliseconds). The job takes
the order's own ``ts`` as event time, counts one-minute windows per region (orders, revenue, median
and 99th percentile order value, the three most ordered products), and emits a window once the
watermark has passed its end, so each window is written once, complete, and never revised:

- into a pubmesh stream (``orders-by-minute``), through the ``pubmesh`` streaming sink, where NATS and
  Redis clients can follow the results as they come;
- into Parquet files under ``OUT/windows`` (Spark's file sink, exactly once by its own log);

then, once the query stops, draws ``OUT/revenue.png`` and prints a summary from the Parquet files.

Run it with ``spark-submit pipeline/jobs/orders.py --url redis://host:6379`` (the pubmesh package
must be installed where the executors run), or from Python with ``run(spark, JobOptions(...))``.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from pipeline.report import Window, chart, summary_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

__all__ = ["JobOptions", "Outcome", "main", "order_windows", "run", "start"]

ORDER_SCHEMA = (
    "order_id STRING, region STRING, product STRING, quantity INT, price DECIMAL(10,2), ts BIGINT"
)
TOP_PRODUCTS = 3


@attrs.frozen
class JobOptions:
    url: str
    """The node (or Redis server) holding the streams: ``redis://[user:pass@]host:port[/db]``."""
    source: str = "orders"
    results: str = "orders-by-minute"
    out: str = "pipeline-out"
    """Parquet files, checkpoints and the chart go here (on a cluster: a directory every executor
    and the driver share)."""
    watermark: str = "1 minute"
    """How late an order may arrive and still be counted in its window."""
    starting_offsets: str = "earliest"
    max_records: int | None = None
    """Entries read per micro-batch (``maxRecordsPerTrigger``); None reads all there are."""
    follow: bool = False
    """Run until stopped, a micro-batch every ``interval``, instead of stopping when caught up."""
    interval: str = "5 seconds"

    @property
    def windows_path(self) -> str:
        return str(Path(self.out) / "windows")

    @property
    def chart_path(self) -> str:
        return str(Path(self.out) / "revenue.png")

    def checkpoint(self, name: str) -> str:
        return str(Path(self.out) / "checkpoints" / name)

    def commit_key(self) -> str:
        """The results stream's commit key: made with the checkpoints and kept beside them, so a
        restart from them resumes the query's exactly-once commits while a fresh start (checkpoints
        removed) is a new query, not a replay of batches the stream already holds."""
        path = Path(self.checkpoint("commit-key"))
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{self.results}:{uuid.uuid4().hex}")
        return path.read_text()


def order_windows(entries: DataFrame, watermark: str) -> DataFrame:
    """Closed one-minute windows per region from stream entries (a streaming or a batch frame).

    An entry whose data is not an order (not JSON, or missing a field the job needs) is skipped:
    anyone may publish on ``orders.>``, and one bad message must not stop the job.
    """
    from pyspark.sql import functions as F

    orders = (
        entries.select(F.from_json(F.col("fields")["data"], ORDER_SCHEMA).alias("o"))
        .select("o.*")
        .where(
            F.col("region").isNotNull()
            & F.col("product").isNotNull()
            & (F.col("quantity") > 0)
            & F.col("price").isNotNull()
            & F.col("ts").isNotNull()
        )
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withColumn("amount", F.col("price") * F.col("quantity"))
        .withWatermark("event_time", watermark)
    )
    grouped = orders.groupBy(F.window("event_time", "1 minute"), "region").agg(
        F.count("*").alias("orders"),
        F.sum("amount").alias("revenue"),
        F.percentile_approx("amount", [0.5, 0.99]).alias("order_value"),
        F.collect_list("product").alias("products"),
    )
    # The most ordered products of each window: counted from the window's product list once the
    # window is complete (per-product counts inside the streaming state would need a second
    # aggregation).
    ranked = F.array_sort(
        F.transform(
            F.array_distinct("products"),
            lambda p: F.struct(
                F.size(F.filter("products", lambda q: q == p)).alias("orders"), p.alias("product")
            ),
        ),
        lambda a, b: (
            F.when(a["orders"] > b["orders"], -1)
            .when(a["orders"] < b["orders"], 1)
            .otherwise(F.when(a["product"] < b["product"], -1).otherwise(1))
        ),
    )
    return grouped.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        "region",
        "orders",
        "revenue",
        F.col("order_value")[0].alias("p50_order_value"),
        F.col("order_value")[1].alias("p99_order_value"),
        F.slice(ranked, 1, TOP_PRODUCTS).alias("top_products"),
    )


def as_entries(windows: DataFrame) -> DataFrame:
    """Windows as stream entries: text fields, times in ISO 8601 with their offset, the top
    products as JSON."""
    from pyspark.sql import functions as F

    iso = "yyyy-MM-dd'T'HH:mm:ssXXX"
    return windows.select(
        F.date_format("window_start", iso).alias("window_start"),
        F.date_format("window_end", iso).alias("window_end"),
        "region",
        "orders",
        "revenue",
        "p50_order_value",
        "p99_order_value",
        F.to_json("top_products").alias("top_products"),
    )


def start(spark: SparkSession, options: JobOptions) -> list[StreamingQuery]:
    """Start the two queries (results stream, Parquet files) over one definition of the windows."""
    reader = (
        spark.readStream.format("pubmesh")
        .option("url", options.url)
        .option("stream", options.source)
        .option("startingOffsets", options.starting_offsets)
    )
    if options.max_records is not None:
        reader = reader.option("maxRecordsPerTrigger", str(options.max_records))
    windows = order_windows(reader.load(), options.watermark)

    def trigger(writer: DataStreamWriter) -> DataStreamWriter:
        if options.follow:
            return writer.trigger(processingTime=options.interval)
        return writer.trigger(availableNow=True)

    to_stream = (
        as_entries(windows)
        .writeStream.format("pubmesh")
        .queryName("orders-by-minute-stream")
        .outputMode("append")
        .option("url", options.url)
        .option("stream", options.results)
        .option("checkpointLocation", options.checkpoint("stream"))
        .option("commitKey", options.commit_key())
    )
    to_files = (
        windows.writeStream.format("parquet")
        .queryName("orders-by-minute-parquet")
        .outputMode("append")
        .option("path", options.windows_path)
        .option("checkpointLocation", options.checkpoint("parquet"))
    )
    return [trigger(to_stream).start(), trigger(to_files).start()]


@attrs.frozen
class Outcome:
    windows: list[Window]
    """Every window written so far, oldest first."""
    chart: str | None
    """The chart's path; None when no window has closed yet."""


def run(spark: SparkSession, options: JobOptions) -> Outcome:
    """Run the job until it has caught up with the stream (or, with ``follow``, until stopped),
    then draw the chart from everything written to Parquet so far."""
    queries = start(spark, options)
    try:
        for query in queries:
            query.awaitTermination()
    finally:
        for query in queries:
            query.stop()
    windows = read_windows(spark, options.windows_path)
    path = chart(windows, options.chart_path) if windows else None
    return Outcome(windows, path)


def read_windows(spark: SparkSession, path: str) -> list[Window]:
    if not (Path(path) / "_spark_metadata").exists():
        return []
    from pyspark.sql import functions as F

    # Times as epoch milliseconds: collect() would turn timestamps into this process's local time.
    frame = spark.read.parquet(path).withColumn("start_ms", F.unix_millis("window_start"))
    rows = frame.orderBy("window_start", "region").collect()
    return [
        Window(
            start=datetime.fromtimestamp(row.start_ms / 1000, UTC),
            region=row.region,
            orders=row.orders,
            revenue=row.revenue,
            p50=row.p50_order_value,
            p99=row.p99_order_value,
            top=[(p.product, p.orders) for p in row.top_products],
        )
        for row in rows
    ]


_JOB = attrs.fields(JobOptions)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="orders.py",
        description="Orders per region per minute from a captured orders stream (Spark job).",
    )
    p.add_argument("--url", required=True, help="redis://host:port of a pubmesh node")
    p.add_argument("--source", default=_JOB.source.default, help="the captured orders stream")
    p.add_argument("--results", default=_JOB.results.default, help="stream the windows are added to")
    p.add_argument("--out", default=_JOB.out.default, help="Parquet, checkpoints and chart go here")
    p.add_argument("--watermark", default=_JOB.watermark.default, help="allowed lateness")
    p.add_argument("--max-records", type=int, help="entries per micro-batch (default: all there are)")
    p.add_argument("--follow", action="store_true", help="keep running, following the stream")
    return p


def options_from(args: argparse.Namespace) -> JobOptions:
    return JobOptions(
        url=args.url,
        source=args.source,
        results=args.results,
        out=args.out,
        watermark=args.watermark,
        max_records=args.max_records,
        follow=args.follow,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The ``spark-submit`` entry point: a session from spark-submit's settings, the data source
    registered, the job run, the summary printed."""
    from pyspark.sql import SparkSession

    from pipeline.session import SHUFFLE_PARTITIONS
    from pipeline.spark import PubmeshDataSource

    options = options_from(_parser().parse_args(sys.argv[1:] if argv is None else argv))
    spark = SparkSession.builder.appName("pubmesh-orders-by-minute").getOrCreate()
    if not spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
    spark.dataSource.register(PubmeshDataSource)
    outcome = run(spark, options)
    print(summary_table(outcome.windows))
    if outcome.chart:
        print(f"chart: {outcome.chart}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
