"""``pubmesh pipeline demo``: orders published over NATS, captured by a node, summarized by Spark.

By default the demo starts its own node (a ``pubmesh serve`` process on free ports of 127.0.0.1,
capturing ``orders.>`` into the stream ``orders``), publishes a synthetic order feed through NATS,
runs the orders job (``pipeline/jobs/orders.py``) until it has caught up, and leaves Parquet files
and a chart in ``--out``. With ``--url`` it uses a running node instead, which must capture
``orders.>`` into ``orders`` (a ``[[streams]]`` table); the job then starts after the entries the
stream already held, so earlier runs are not counted again.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import attrs

from pipeline import feed
from pipeline.jobs.orders import JobOptions, Outcome, run
from pipeline.local import NodeUrls, pubmesh_node
from pipeline.options import Endpoint
from pipeline.report import summary_table
from pipeline.resp import RespClient

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DemoOptions", "DemoRun", "main", "run_demo"]

SOURCE = "orders"
SUBJECTS = "orders.>"


@attrs.frozen
class DemoOptions:
    orders: int = 20_000
    minutes: int = 8
    """Simulated minutes of event time the feed spans."""
    out: str = "pipeline-out"
    seed: int = 7
    start_ms: int | None = None
    """The feed's first event time; None starts it ``minutes`` before now, on a whole minute."""
    show_progress: bool = True


@attrs.frozen
class DemoRun:
    published: list[feed.Order]
    outcome: Outcome
    job: JobOptions


def last_id(client: RespClient, stream: str) -> str | None:
    """The ID of the stream's newest entry; None for a stream that is empty or not there."""
    newest = client.call("XREVRANGE", stream, "+", "-", "COUNT", 1)
    if not isinstance(newest, list) or not newest:
        return None
    entry = newest[0]
    assert isinstance(entry, list)
    assert isinstance(entry[0], bytes)
    return entry[0].decode()


def _fresh_out(options: DemoOptions) -> JobOptions:
    """The job's output directory, emptied of what an earlier run wrote (windows, checkpoints and
    chart belong to that run's stream; the job would otherwise resume from its offsets)."""
    job = JobOptions(url="", out=options.out)
    for path in (Path(job.windows_path), Path(job.checkpoint("")).parent):
        shutil.rmtree(path, ignore_errors=True)
    Path(job.chart_path).unlink(missing_ok=True)
    Path(job.out).mkdir(parents=True, exist_ok=True)
    return job


def run_demo(spark: SparkSession, urls: NodeUrls, options: DemoOptions) -> DemoRun:
    """Publish the feed through ``urls.nats``, then run the job over what ``urls.redis`` captured."""
    job = _fresh_out(options)
    endpoint = Endpoint.parse(urls.redis)
    with endpoint.connect() as client:
        before = last_id(client, SOURCE)
    start_ms = options.start_ms
    if start_ms is None:
        start_ms = (int(time.time()) // 60 - options.minutes) * 60_000
    orders = list(
        feed.generate(options.orders, minutes=options.minutes, start_ms=start_ms, seed=options.seed)
    )
    with _progress(options.show_progress, "publishing orders", len(orders)) as progress:
        asyncio.run(feed.publish(urls.nats, orders, progress))
    with endpoint.connect() as client:
        after = last_id(client, SOURCE)
    if after is None or after == before:
        raise RuntimeError(
            f"nothing was captured into the stream {SOURCE!r}: the node needs a [[streams]] table "
            f'with name = "{SOURCE}" and subjects = ["{SUBJECTS}"]'
        )
    job = attrs.evolve(
        job,
        url=urls.redis,
        starting_offsets="earliest" if before is None else f'{{"{SOURCE}": "{before}"}}',
    )
    return DemoRun(orders, run(spark, job), job)


@contextmanager
def _progress(show: bool, label: str, total: int) -> Iterator[Callable[[int], None]]:
    from node.bench.progress import ProgressBar

    with ProgressBar.on_terminal(label) if show else ProgressBar(label, None) as bar:
        yield lambda done: bar(done, total)


def totals(orders: Sequence[feed.Order]) -> dict[tuple[int, str], tuple[int, Decimal]]:
    """Orders and revenue per (minute, region), the minute as epoch milliseconds."""
    out: dict[tuple[int, str], tuple[int, Decimal]] = defaultdict(lambda: (0, Decimal(0)))
    for order in orders:
        key = (order.ts - order.ts % 60_000, order.region)
        count, revenue = out[key]
        out[key] = (count + 1, revenue + order.amount)
    return dict(out)


def describe(demo: DemoRun, keeps_node: bool) -> str:
    windows = demo.outcome.windows
    counted = sum(w.orders for w in windows)
    lines = [
        summary_table(windows),
        "",
        f"published {len(demo.published):,} orders; {counted:,} are in the {len(windows)} closed "
        f"windows, the rest in the last minutes, which close once the watermark "
        f"({demo.job.watermark}) passes them",
        f"windows: Parquet in {demo.job.windows_path}, and the stream {demo.job.results!r} on "
        + (f"{demo.job.url}" if keeps_node else "the demo's node (stopped now; --url keeps them)"),
    ]
    if demo.outcome.chart:
        lines.append(f"chart: {demo.outcome.chart}")
    return "\n".join(lines)


_DEMO = attrs.fields(DemoOptions)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pubmesh pipeline demo",
        description="Publish an order feed over NATS, capture it in a stream, summarize it with Spark.",
    )
    p.add_argument("--orders", type=int, default=_DEMO.orders.default, help="orders in the feed")
    p.add_argument("--minutes", type=int, default=_DEMO.minutes.default, help="event-time minutes")
    p.add_argument("--out", default=_DEMO.out.default, help="Parquet files and the chart go here")
    p.add_argument(
        "--url",
        help="redis://host:port of a running node capturing orders.> into 'orders' "
        "(default: start one on 127.0.0.1)",
    )
    p.add_argument("--nats", help="its NATS URL (default: nats://the --url host:4222)")
    p.add_argument("--master", default="local[2]", help="Spark master")
    p.add_argument("--seed", type=int, default=_DEMO.seed.default, help="the feed's random seed")
    return p


@contextmanager
def _node(args: argparse.Namespace) -> Iterator[NodeUrls]:
    if args.url is None:
        with pubmesh_node({SOURCE: SUBJECTS}) as urls:
            yield urls
        return
    Endpoint.parse(args.url)  # a bad URL is reported before Spark starts
    yield NodeUrls(args.nats or f"nats://{urlsplit(args.url).hostname}:4222", args.url)


def main(argv: Sequence[str]) -> int:
    from pipeline.session import spark_session

    args = _parser().parse_args(argv)
    if args.orders < 1 or args.minutes < 1:
        raise SystemExit("pubmesh pipeline demo: --orders and --minutes must be positive")
    options = DemoOptions(orders=args.orders, minutes=args.minutes, out=args.out, seed=args.seed)
    with _node(args) as urls:
        spark = spark_session(args.master, "pubmesh-pipeline-demo")
        try:
            print(describe(run_demo(spark, urls, options), keeps_node=args.url is not None))
        finally:
            spark.stop()
    return 0
