"""Times and durations written the way nats-server's Go code writes them in monitoring JSON.

Tools that read ``/varz`` and ``/connz`` parse these strings, so the shapes matter: RFC 3339 with up
to nine fractional digits, ``uptime``/``idle`` as ``4h4m22s``, ``rtt`` as Go's ``Duration.String()``.
"""

from __future__ import annotations

import datetime

__all__ = ["SECOND", "go_duration", "go_time", "rtt", "uptime"]

SECOND = 10**9
"""Nanoseconds in a second (Go's ``time.Second``): durations in monitoring JSON are counted in ns."""


def uptime(ns: int) -> str:
    """nats-server's ``myUptime``: whole seconds, leading zero units dropped (``1h0m5s``)."""
    secs = max(ns, 0) // SECOND
    mins, hours = secs // 60, secs // 3600
    days = hours // 24
    years = days // 365
    if years:
        return f"{years}y{days % 365}d{hours % 24}h{mins % 60}m{secs % 60}s"
    if days:
        return f"{days}d{hours % 24}h{mins % 60}m{secs % 60}s"
    if hours:
        return f"{hours}h{mins % 60}m{secs % 60}s"
    if mins:
        return f"{mins}m{secs % 60}s"
    return f"{secs}s"


def _frac(value: int, unit: int, digits: int) -> str:
    whole, rest = divmod(value, unit)
    return str(whole) + (("." + f"{rest:0{digits}d}".rstrip("0")) if rest else "")


def go_duration(ns: int) -> str:
    """Go's ``time.Duration.String()``: ``0s``, ``321µs``, ``1.5ms``, ``2m3.5s``."""
    if ns == 0:
        return "0s"
    magnitude = abs(ns)
    if magnitude < SECOND:
        if magnitude < 1000:
            text = f"{magnitude}ns"
        elif magnitude < 10**6:
            text = _frac(magnitude, 1000, 3) + "µs"
        else:
            text = _frac(magnitude, 10**6, 6) + "ms"
    else:
        text = _frac(magnitude % (60 * SECOND), SECOND, 9) + "s"
        mins = magnitude // SECOND // 60
        if mins:
            text = f"{mins % 60}m" + text
            if mins // 60:
                text = f"{mins // 60}h" + text
    return ("-" if ns < 0 else "") + text


def rtt(ns: int) -> str:
    """nats-server shows round trips under a millisecond to the microsecond, others to the nanosecond."""
    return go_duration(ns - ns % 1000 if 1000 < ns < 1_000_000 else ns)


def go_time(ns_since_epoch: int) -> str:
    """RFC 3339 in UTC with nanoseconds, trailing zeros trimmed, as Go marshals ``time.Time``."""
    secs, nanos = divmod(ns_since_epoch, SECOND)
    base = datetime.datetime.fromtimestamp(secs, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return base + (("." + f"{nanos:09d}".rstrip("0")) if nanos else "") + "Z"
