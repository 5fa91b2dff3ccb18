"""``maxmemory`` over RESP, as redis-server 7.2 answers it: CONFIG SET (of ``maxmemory`` and
``maxmemory-policy``, the only parameters that can change while the node runs) and INFO's memory
section.

What ``used_memory`` counts, and how it is kept, is ``node.data.keyspace``'s to say. The only policy is
``noeviction``: nothing is ever evicted to make room.
"""

from __future__ import annotations

import logging
from typing import Final

from node.config.keyspace_events import INVALID, parse_flags
from node.integers import string2ll
from node.process_memory import resident_bytes
from node.resp.connection import RespConnection
from node.resp.tracking import Tracker
from node.resp.writer import OK

__all__ = ["POLICY", "config_set", "human", "memory_info", "parse_memory"]

log = logging.getLogger("pubmesh")

POLICY: Final = b"noeviction"
"""The one ``maxmemory-policy``."""
_POLICIES: Final = (
    "volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, "
    "allkeys-random, noeviction"
)
"""The policies redis-server knows, as its error lists them."""
_SETTABLE: Final = frozenset(
    [b"maxmemory", b"maxmemory-policy", b"notify-keyspace-events", b"tracking-table-max-keys"]
)
_UNITS: Final = {
    b"": 1,
    b"b": 1,
    b"k": 1000,
    b"kb": 1024,
    b"m": 1000**2,
    b"mb": 1024**2,
    b"g": 1000**3,
    b"gb": 1024**3,
}
_ULL: Final = 2**64


def parse_memory(value: bytes) -> int | None:
    """A memory value as redis-server's ``memtoull`` reads it, or None: digits and an optional
    unit of ``_UNITS`` in any case; no sign, no blanks; the number saturates at 2**64-1 and the
    product wraps around, as unsigned C arithmetic does."""
    end = 0
    while end < len(value) and value[end : end + 1].isdigit():
        end += 1
    multiplier = _UNITS.get(value[end:].lower())
    if multiplier is None or end >= 128:
        return None
    number = min(int(value[:end] or b"0"), _ULL - 1)
    return number * multiplier % _ULL


def human(size: int) -> str:
    """Bytes as redis-server's ``bytesToHuman`` shows them: ``512B``, ``1.50K``, ``2.00M``..."""
    if size < 1024:
        return f"{size}B"
    for power, unit in enumerate("KMGTP", 1):
        if size < 1024 ** (power + 1):
            return f"{size / 1024**power:.2f}{unit}"
    return f"{size}B"


def memory_info(conn: RespConnection) -> str:
    """INFO's memory section: the fields redis-server shows that mean something here, in its
    order. ``used_memory_dataset`` is what the keys hold, ``mem_clients_normal`` the clients'
    output buffers (measured now)."""
    broker = conn.broker
    keyspaces = broker.keyspaces
    keyspaces.measure_output(broker.pending_output())
    used, rss, peak = keyspaces.used_memory, resident_bytes(), keyspaces.peak
    limit = keyspaces.maxmemory
    return (
        "# Memory\r\n"
        f"used_memory:{used}\r\nused_memory_human:{human(used)}\r\n"
        f"used_memory_rss:{rss}\r\nused_memory_rss_human:{human(rss)}\r\n"
        f"used_memory_peak:{peak}\r\nused_memory_peak_human:{human(peak)}\r\n"
        f"used_memory_dataset:{keyspaces.dataset_bytes}\r\n"
        f"maxmemory:{limit}\r\nmaxmemory_human:{human(limit)}\r\n"
        f"maxmemory_policy:{POLICY.decode()}\r\n"
        f"mem_clients_normal:{keyspaces.output_bytes}\r\n"
    )


def _failed(name: str, why: str) -> str:
    return f"CONFIG SET failed (possibly related to argument '{name}') - {why}"


def config_set(conn: RespConnection, args: list[bytes]) -> None:
    """CONFIG SET name value [name value ...], checked in redis-server's order (every name, then
    every value) and applied only if all are good. Names other than ``maxmemory``,
    ``maxmemory-policy``, ``notify-keyspace-events`` and ``tracking-table-max-keys`` are refused
    as redis-server refuses a parameter it does not know."""
    if len(args) % 2:
        conn.error("syntax error")
        return
    seen: set[bytes] = set()
    for name in args[2::2]:
        key = name.lower()
        shown = name.decode("utf-8", "surrogateescape")
        if key not in _SETTABLE:
            conn.error(f"Unknown option or number of arguments for CONFIG SET - '{shown}'")
            return
        if key in seen:
            conn.error(_failed(shown, "duplicate parameter"))
            return
        seen.add(key)
    limit: int | None = None
    events: int | None = None
    tracked: int | None = None
    for name, value in zip(args[2::2], args[3::2], strict=True):
        if name.lower() == b"tracking-table-max-keys":
            tracked = string2ll(value)
            if tracked is None or tracked < 0:
                why = "argument couldn't be parsed into an integer"
                if tracked is not None:
                    why = f"argument must be between 0 and {2**63 - 1} inclusive"
                conn.error(_failed(name.decode("utf-8", "surrogateescape"), why))
                return
        elif name.lower() == b"notify-keyspace-events":
            events = parse_flags(value)
            if events is None:
                conn.error(_failed(name.decode("utf-8", "surrogateescape"), INVALID))
                return
        elif name.lower() == b"maxmemory":
            limit = parse_memory(value)
            if limit is None:
                conn.error(_failed("maxmemory", "argument must be a memory value"))
                return
        elif value.lower() != POLICY:
            known = value.lower().decode("latin-1") in _POLICIES.split(", ")
            why = (
                "only noeviction is supported"
                if known
                else f"argument(s) must be one of the following: {_POLICIES}"
            )
            conn.error(_failed("maxmemory-policy", why))
            return
    if events is not None:
        conn.broker.keyspaces.notifier.configure(events)
    if tracked is not None:
        conn.broker.keyspaces.tracking_max_keys = tracked
        tracker = conn.broker.keyspaces.tracker
        if isinstance(tracker, Tracker):
            tracker.limit()
    if limit is not None:
        keyspaces = conn.broker.keyspaces
        keyspaces.maxmemory = limit
        if limit and limit < keyspaces.used_memory:
            log.warning(
                "WARNING: the new maxmemory value set via CONFIG SET (%d) is smaller than the "
                "current memory usage (%d): commands that add data are refused until keys are "
                "deleted (maxmemory-policy noeviction)",
                limit,
                keyspaces.used_memory,
            )
    conn.reply(OK)
