"""Monitoring's time and duration strings match what nats-server's Go code prints."""

import pytest

from node.monitoring.gofmt import go_duration, go_time, uptime

S = 10**9


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (22 * S, "22s"),
        ((4 * 60 + 22) * S, "4m22s"),
        ((3600 + 5) * S, "1h0m5s"),
        ((4 * 3600 + 4 * 60 + 22) * S, "4h4m22s"),
        ((32 * 86400 + 4 * 3600 + 4 * 60 + 22) * S, "32d4h4m22s"),
        (((22 * 365 + 32) * 86400 + 4 * 3600 + 4 * 60 + 22) * S, "22y32d4h4m22s"),
        (S - 1, "0s"),
    ],
)
def test_uptime(ns: int, text: str) -> None:
    assert uptime(ns) == text


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (999, "999ns"),
        (1500, "1.5µs"),
        (321_000, "321µs"),
        (1_234_567, "1.234567ms"),
        (1_500_000_000, "1.5s"),
        (123_500_000_000, "2m3.5s"),
        (3600 * S, "1h0m0s"),
        (-1500, "-1.5µs"),
    ],
)
def test_go_duration(ns: int, text: str) -> None:
    assert go_duration(ns) == text


def test_go_time() -> None:
    assert go_time(0) == "1970-01-01T00:00:00Z"
    assert go_time(1_700_000_000_123_456_789) == "2023-11-14T22:13:20.123456789Z"
    assert go_time(1_700_000_000_500_000_000) == "2023-11-14T22:13:20.5Z"
