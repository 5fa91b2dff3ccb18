"""The orders job and ``pubmesh pipeline demo`` on a few hundred orders: what the job writes (the
results stream, Parquet files, the chart) adds up to exactly what the feed published."""

from __future__ import annotations

import gc
import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest
import redis

from pipeline import feed
from pipeline.demo import DemoOptions, run_demo, totals
from pipeline.jobs.orders import JobOptions, order_windows
from pipeline.local import NodeUrls, streams_toml
from pipeline.report import Window, chart, summary_table
from tests.live import LiveNode, live_node
from tests.pipeline.conftest import needs_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <socket\.socket:pytest.PytestUnraisableExceptionWarning"
)

START_MS = 1_700_000_040_000  # on a whole minute
MINUTE = 60_000


@pytest.fixture(scope="module")
def capturing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveNode]:
    """A node capturing ``orders.>`` into ``orders``, as the demo's own node does."""
    config = tmp_path_factory.mktemp("node") / "node.toml"
    config.write_text(streams_toml({"orders": "orders.>"}))
    with live_node("-c", str(config), redis=True) as running:
        yield running


def urls_of(node: LiveNode) -> NodeUrls:
    return NodeUrls(f"nats://127.0.0.1:{node.port}", f"redis://127.0.0.1:{node.redis_port}")


def test_the_feed_is_deterministic_and_late_orders_stay_within_the_lateness_bound() -> None:
    orders = list(feed.generate(2000, minutes=5, start_ms=START_MS, seed=3))
    assert orders == list(feed.generate(2000, minutes=5, start_ms=START_MS, seed=3))
    assert len({o.order_id for o in orders}) == 2000
    newest, late = START_MS, 0
    for order in orders:
        assert START_MS <= order.ts < START_MS + 5 * MINUTE + 1000
        assert newest - order.ts < feed.MAX_LATENESS_MS
        late += order.ts < newest
        newest = max(newest, order.ts)
    assert late > 20  # some do arrive out of order
    regions = Counter(o.region for o in orders)
    assert regions.most_common(1)[0][0] == "us-east"
    assert Counter(o.product for o in orders).most_common(1)[0][0] == "espresso-beans"
    body = json.loads(orders[0].payload())
    assert set(body) == {"order_id", "region", "product", "quantity", "price", "ts"}
    assert Decimal(str(body["price"])) == orders[0].price


def top3(orders: list[feed.Order]) -> list[tuple[str, int]]:
    counts = Counter(o.product for o in orders)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]


@pytest.mark.slow
@needs_spark
def test_entries_that_are_not_orders_are_skipped(spark: SparkSession) -> None:
    """Anyone may publish on orders.>: what is not an order (not JSON, a field missing or of the
    wrong type) is left out, and the orders beside it are counted."""
    good = list(feed.generate(3, minutes=1, start_ms=START_MS, seed=1))
    junk = ["not json", '{"region":"us-east"}', '{"region":"x","product":"p","quantity":"many"}', ""]
    entries = spark.createDataFrame(
        [
            ({"subject": "orders.x", "data": data},)
            for data in [*junk, *(o.payload().decode() for o in good)]
        ],
        "fields map<string,string>",
    )
    rows = order_windows(entries, "1 minute").collect()
    gc.collect()
    assert sum(r.orders for r in rows) == 3
    assert sum(r.revenue for r in rows) == sum(o.amount for o in good)


def test_chart_and_summary(tmp_path: Path) -> None:
    assert "no window has closed" in summary_table([])
    orders = list(feed.generate(400, minutes=4, start_ms=START_MS, seed=5))
    windows = [
        Window(
            start=datetime.fromtimestamp(minute / 1000, UTC),
            region=region,
            orders=count,
            revenue=revenue,
            p50=Decimal("10.00"),
            p99=Decimal("100.00"),
            top=[("grinder", 3)],
        )
        for (minute, region), (count, revenue) in sorted(totals(orders).items())
    ]
    table = summary_table(windows)
    assert f"{400:>8,}" in table.splitlines()[-1]
    assert f"{sum(o.amount for o in orders):,.2f}" in table.splitlines()[-1]
    png = Path(chart(windows, str(tmp_path / "revenue.png"))).read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) > 10_000


def stream_windows(r: redis.Redis, stream: str) -> dict[tuple[int, str], tuple[int, Decimal]]:
    entries = cast(list[tuple[bytes, dict[bytes, bytes]]], r.xrange(stream))
    out = {}
    for _, fields in entries:
        start = int(datetime.fromisoformat(fields[b"window_start"].decode()).timestamp() * 1000)
        key = (start, fields[b"region"].decode())
        assert key not in out, f"window {key} written twice"
        out[key] = (int(fields[b"orders"]), Decimal(fields[b"revenue"].decode()))
    return out


@pytest.mark.slow
@needs_spark
@pytest.mark.timeout(240)
def test_demo_end_to_end(spark: SparkSession, capturing: LiveNode, tmp_path: Path) -> None:
    """Publish over NATS, stream through the job; every window the watermark closed is written
    once, to the results stream and to Parquet, with exactly the published totals."""
    r = redis.Redis(port=capturing.redis_port or 0, socket_timeout=20)
    r.delete("orders", "orders-by-minute")
    # An order already in the stream, from before the demo: the job starts after it.
    earlier = feed.Order("o-earlier", "us-east", "grinder", 100, Decimal("89.90"), START_MS + 1000)
    r.xadd("orders", {"subject": earlier.subject, "data": earlier.payload()})
    options = DemoOptions(orders=400, minutes=4, out=str(tmp_path / "out"), start_ms=START_MS, seed=2)
    demo = run_demo(spark, urls_of(capturing), options)
    gc.collect()

    expected = totals(demo.published)
    watermark = max(o.ts for o in demo.published) - MINUTE
    closed = {key: value for key, value in expected.items() if key[0] + MINUTE <= watermark}
    assert len(closed) >= 10
    assert stream_windows(r, "orders-by-minute") == closed
    parquet = {
        (int(w.start.timestamp() * 1000), w.region): (w.orders, w.revenue) for w in demo.outcome.windows
    }
    assert parquet == closed
    for window in demo.outcome.windows:
        start = int(window.start.timestamp() * 1000)
        members = [
            o for o in demo.published if o.region == window.region and start <= o.ts < start + MINUTE
        ]
        assert window.top == top3(members)
        amounts = sorted(o.amount for o in members)
        assert amounts[0] <= window.p50 <= window.p99 <= amounts[-1]
    assert list(Path(demo.job.windows_path).glob("*.parquet"))
    assert demo.outcome.chart is not None
    png = Path(demo.outcome.chart).read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) > 10_000


def test_command_line_defaults_are_the_options_defaults() -> None:
    from pipeline import demo
    from pipeline.jobs import orders

    args = demo._parser().parse_args([])
    assert (args.orders, args.minutes, args.out, args.seed) == (
        DemoOptions().orders,
        DemoOptions().minutes,
        DemoOptions().out,
        DemoOptions().seed,
    )
    url = "redis://127.0.0.1:1"
    assert orders.options_from(orders._parser().parse_args(["--url", url])) == JobOptions(url=url)


def test_pubmesh_pipeline_dispatch(capsys: pytest.CaptureFixture[str]) -> None:
    from node.run.cli import main

    assert main(["pipeline"]) == 2
    assert main(["pipeline", "--help"]) == 0
    assert "pubmesh pipeline {demo,bench}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["pipeline", "demo", "--help"])
    assert exit_.value.code == 0
    assert "--orders" in capsys.readouterr().out
