"""A synthetic order feed for the demo job: what a shop's checkout would publish, one order per message.

The feed is deterministic for a seed, so a test can recompute every total. Its shape is meant to give
the job something to show: a few regions of different sizes, products whose popularity falls off
steeply (a Zipf-like law), quantities mostly 1 and rarely large, and event times spread over several
simulated minutes. Orders are published in arrival order, but some arrive late: their event time is
up to ``MAX_LATENESS_MS`` before the newest one already published, as a phone that was offline for a
while would send them. That lateness stays under the job's watermark delay, so no order is dropped
as too late and every closed window holds everything published for it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal

import attrs

__all__ = ["MAX_LATENESS_MS", "PRODUCTS", "REGIONS", "Order", "generate", "publish"]

REGIONS: dict[str, float] = {
    "us-east": 0.34,
    "eu-west": 0.26,
    "us-west": 0.18,
    "ap-south": 0.14,
    "sa-east": 0.08,
}
"""Regions and their share of the orders."""

PRODUCTS: dict[str, Decimal] = {
    name: Decimal(price)
    for name, price in (
        ("espresso-beans", "14.50"),
        ("pour-over-kit", "39.00"),
        ("ceramic-mug", "12.00"),
        ("grinder", "89.90"),
        ("milk-frother", "24.99"),
        ("filter-papers", "4.25"),
        ("kettle", "59.00"),
        ("tea-sampler", "19.75"),
        ("scale", "32.40"),
        ("travel-cup", "17.80"),
        ("cold-brew-jar", "27.00"),
        ("descaler", "8.60"),
    )
}
"""Products and their list prices; the first is the most popular, popularity falling as 1/rank."""

QUANTITIES = (1, 2, 3, 4, 6, 12)
QUANTITY_WEIGHTS = (0.62, 0.2, 0.08, 0.05, 0.03, 0.02)
LATE_SHARE = 0.04
"""Orders that arrive late."""
MAX_LATENESS_MS = 40_000
"""How far behind the newest event time a late order may be; under the job's watermark delay."""


@attrs.frozen
class Order:
    order_id: str
    region: str
    product: str
    quantity: int
    price: Decimal
    ts: int
    """Event time, in milliseconds since the epoch (UTC)."""

    @property
    def subject(self) -> str:
        return f"orders.{self.region}"

    @property
    def amount(self) -> Decimal:
        return self.price * self.quantity

    def payload(self) -> bytes:
        body = attrs.asdict(self)
        body["price"] = float(self.price)  # two decimals, which JSON carries exactly as written
        return json.dumps(body, separators=(",", ":")).encode()


def generate(count: int, *, minutes: int, start_ms: int, seed: int = 7) -> Iterator[Order]:
    """``count`` orders in arrival order, event times over ``minutes`` minutes from ``start_ms``."""
    rng = random.Random(seed)
    regions, region_weights = list(REGIONS), list(REGIONS.values())
    products = list(PRODUCTS)
    product_weights = [1 / rank for rank in range(1, len(products) + 1)]
    span = minutes * 60_000
    newest = start_ms
    for i in range(count):
        ts = start_ms + span * i // max(count, 1) + rng.randrange(1000)
        newest = max(newest, ts)
        if rng.random() < LATE_SHARE:
            ts = max(start_ms, newest - rng.randrange(5_000, MAX_LATENESS_MS))
        product = rng.choices(products, product_weights)[0]
        # Prices move a little around the list price (discounts, surcharges), in whole cents.
        price = PRODUCTS[product] * Decimal(rng.choice((90, 95, 100, 100, 100, 105))) / 100
        yield Order(
            order_id=f"o-{seed}-{i:08d}",
            region=rng.choices(regions, region_weights)[0],
            product=product,
            quantity=rng.choices(QUANTITIES, QUANTITY_WEIGHTS)[0],
            price=price.quantize(Decimal("0.01")),
            ts=ts,
        )


async def publish(
    url: str, orders: Iterable[Order], progress: Callable[[int], None] | None = None
) -> int:
    """Publish each order on ``orders.<region>`` over NATS; returns how many were sent once the
    server has answered a PING sent after the last (so it has taken them all)."""
    import nats

    client = await nats.connect(url, connect_timeout=10, allow_reconnect=False)
    sent = 0
    try:
        for order in orders:
            await client.publish(order.subject, order.payload())
            sent += 1
            if sent % 1000 == 0:
                await client.flush(timeout=30)  # keeps the client's buffer, and memory, bounded
                if progress is not None:
                    progress(sent)
        await client.flush(timeout=30)
        if progress is not None:
            progress(sent)
    finally:
        await client.close()
    return sent
