"""Memory per subscription, measured with tracemalloc (deterministic: it counts bytes, not time)."""

import gc
import tracemalloc
from collections.abc import Callable

import pytest

from routing import SubList, Subscription


def bytes_per_subscription(subject: Callable[[int], str], n: int = 20_000) -> float:
    """Everything holding ``n`` subscriptions costs: the records, their subjects and the trie."""
    gc.collect()
    tracemalloc.start()
    try:
        sl = SubList()
        for i in range(n):
            sl.insert(Subscription(subject(i)))
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(sl) == n
    return used / n


@pytest.mark.slow
@pytest.mark.parametrize(
    "subject",
    [
        pytest.param(lambda i: f"a{i}.b{i}.c{i}.d{i}.e{i}", id="every-token-distinct"),
        pytest.param(lambda i: f"tenant{i % 50}.region{i % 7}.dev{i}.s{i % 13}.v", id="iot"),
    ],
)
def test_at_most_one_kib_per_subscription(subject: Callable[[int], str]) -> None:
    assert bytes_per_subscription(subject) <= 1024
