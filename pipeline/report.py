"""What a person reads after the orders job: a PNG chart of revenue per region per minute and a
summary table, both from the windows the job wrote (plain rows, no Spark needed)."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC, datetime
from decimal import Decimal

import attrs

__all__ = ["Window", "chart", "summary_table"]


@attrs.frozen
class Window:
    """One region's minute, as the job wrote it."""

    start: datetime
    region: str
    orders: int
    revenue: Decimal
    p50: Decimal
    p99: Decimal
    top: list[tuple[str, int]]
    """The most ordered products and their order counts, most first."""


def chart(windows: list[Window], path: str) -> str:
    """Revenue per region per minute, one line per region, drawn off-screen (Agg) into ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    by_region: dict[str, list[Window]] = defaultdict(list)
    for window in sorted(windows, key=lambda w: w.start):
        by_region[window.region].append(window)
    figure, axes = plt.subplots(figsize=(9, 4.5), dpi=100)
    try:
        ranked = sorted(by_region, key=lambda r: -sum(w.revenue for w in by_region[r]))
        for region in ranked:
            points = by_region[region]
            times = mdates.date2num([w.start for w in points])  # type: ignore[no-untyped-call]
            axes.plot(times, [float(w.revenue) for w in points], marker="o", label=region)
        axes.set_title("Revenue per region per minute (event time)")
        axes.set_ylabel("revenue")
        # A tick on whole minutes (every minute for up to a dozen of them), labelled in UTC.
        step = max(1, -(-len({w.start for w in windows}) // 12))
        ticks = mdates.MinuteLocator(byminute=range(0, 60, step), tz=UTC)  # type: ignore[no-untyped-call]
        axes.xaxis.set_major_locator(ticks)
        axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=UTC))  # type: ignore[no-untyped-call]
        axes.set_xlabel("minute (UTC)")
        axes.grid(alpha=0.3)
        axes.legend(loc="upper left", fontsize="small")
        figure.autofmt_xdate()
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path


def summary_table(windows: list[Window]) -> str:
    """Per region: closed windows, orders, revenue, the median of its windows' median order value,
    the highest 99th percentile, and its most ordered products; a total line at the end."""
    if not windows:
        return "no window has closed yet (the watermark has not passed the end of any minute)"
    by_region: dict[str, list[Window]] = defaultdict(list)
    for window in windows:
        by_region[window.region].append(window)
    head = (
        f"{'region':10} {'minutes':>7} {'orders':>8} {'revenue':>12} {'p50':>8} {'p99':>8}  top products"
    )
    lines = [head, "-" * len(head)]
    for region, group in sorted(by_region.items(), key=lambda kv: -sum(w.revenue for w in kv[1])):
        medians = sorted(w.p50 for w in group)
        top: Counter[str] = Counter()
        for window in group:
            top.update(dict(window.top))
        lines.append(
            f"{region:10} {len(group):>7} {sum(w.orders for w in group):>8,} "
            f"{sum(w.revenue for w in group):>12,.2f} {medians[len(medians) // 2]:>8.2f} "
            f"{max(w.p99 for w in group):>8.2f}  {', '.join(p for p, _ in top.most_common(3))}"
        )
    first, last = min(w.start for w in windows), max(w.start for w in windows)
    lines.append("-" * len(head))
    lines.append(
        f"{'total':10} {len({w.start for w in windows}):>7} {sum(w.orders for w in windows):>8,} "
        f"{sum(w.revenue for w in windows):>12,.2f}  minutes {first:%H:%M}-{last:%H:%M} UTC"
    )
    return "\n".join(lines)
