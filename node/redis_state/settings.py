"""The Redis front door's run-time parameters that CONFIG SET may change and that nothing else on
the node owns (``maxmemory`` is ``node.data.keyspace``'s, ``appendfsync`` the journal's): one
``RedisSettings`` per node, read by whoever the parameter concerns, and the keyspace-event classes
of ``notify-keyspace-events`` as redis-server reads and writes them.

``notify_flags`` is the parameter as bits of the ``NOTIFY_*`` classes; ``notify_keyspace_events``
its text as redis-server shows it back (normalised: ``A`` for all the type classes, then ``K``,
``E``, ``m``).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "NOTIFY_ALL",
    "NOTIFY_EVICTED",
    "NOTIFY_EXPIRED",
    "NOTIFY_GENERIC",
    "NOTIFY_HASH",
    "NOTIFY_KEYEVENT",
    "NOTIFY_KEYSPACE",
    "NOTIFY_KEY_MISS",
    "NOTIFY_LIST",
    "NOTIFY_MODULE",
    "NOTIFY_NEW",
    "NOTIFY_SET",
    "NOTIFY_STREAM",
    "NOTIFY_STRING",
    "NOTIFY_ZSET",
    "RedisSettings",
    "notify_flags",
    "notify_text",
]

NOTIFY_KEYSPACE: Final = 1 << 0
NOTIFY_KEYEVENT: Final = 1 << 1
NOTIFY_GENERIC: Final = 1 << 2
NOTIFY_STRING: Final = 1 << 3
NOTIFY_LIST: Final = 1 << 4
NOTIFY_SET: Final = 1 << 5
NOTIFY_HASH: Final = 1 << 6
NOTIFY_ZSET: Final = 1 << 7
NOTIFY_EXPIRED: Final = 1 << 8
NOTIFY_EVICTED: Final = 1 << 9
NOTIFY_STREAM: Final = 1 << 10
NOTIFY_KEY_MISS: Final = 1 << 11
NOTIFY_MODULE: Final = 1 << 13
NOTIFY_NEW: Final = 1 << 14
NOTIFY_ALL: Final = (
    NOTIFY_GENERIC
    | NOTIFY_STRING
    | NOTIFY_LIST
    | NOTIFY_SET
    | NOTIFY_HASH
    | NOTIFY_ZSET
    | NOTIFY_EXPIRED
    | NOTIFY_EVICTED
    | NOTIFY_STREAM
    | NOTIFY_MODULE
)
"""``A``: every class of event but key misses and new keys."""

_CLASSES: Final = {
    "A": NOTIFY_ALL,
    "g": NOTIFY_GENERIC,
    "$": NOTIFY_STRING,
    "l": NOTIFY_LIST,
    "s": NOTIFY_SET,
    "h": NOTIFY_HASH,
    "z": NOTIFY_ZSET,
    "x": NOTIFY_EXPIRED,
    "e": NOTIFY_EVICTED,
    "K": NOTIFY_KEYSPACE,
    "E": NOTIFY_KEYEVENT,
    "t": NOTIFY_STREAM,
    "m": NOTIFY_KEY_MISS,
    "d": NOTIFY_MODULE,
    "n": NOTIFY_NEW,
}
_TYPE_ORDER: Final = "g$lshzxetdn"
"""The type classes in the order the text shows them when not all are on."""


def notify_flags(text: bytes) -> int | None:
    """The classes ``text`` names, or None if it holds a character that names none."""
    flags = 0
    for char in text.decode("latin-1"):
        bits = _CLASSES.get(char)
        if bits is None:
            return None
        flags |= bits
    return flags


def notify_text(flags: int) -> str:
    """``flags`` written back as redis-server writes them."""
    if flags & NOTIFY_ALL == NOTIFY_ALL:
        text = "A"
    else:
        text = "".join(c for c in _TYPE_ORDER if flags & _CLASSES[c])
    return text + "".join(c for c in "KEm" if flags & _CLASSES[c])


class RedisSettings:
    """The values of the parameters kept here: redis-server's defaults until CONFIG SET changes
    them, but for the subscribers' output limits (``pubsub_limits``: the node's ``[redis]``
    settings).

    Only the slow log and latency monitor settings, the stream node sizes and the keyspace events
    change what the node does; ``timeout``, ``hz``, ``busy_reply_threshold`` and the output
    limits of the ``normal`` and ``replica`` classes are kept and shown back only.
    """

    def __init__(self, pubsub_limits: tuple[int, int, int]) -> None:
        self.notify_flags = 0
        self.appendfsync = "everysec"
        """Shown back while the node keeps no journal (else the journal's policy is)."""
        self.stream_node_max_entries = 100
        self.stream_node_max_bytes = 4096
        self.busy_reply_threshold = 5000
        """Milliseconds (``lua-time-limit``, ``busy-reply-threshold``)."""
        self.timeout = 0
        self.hz = 10
        self.slowlog_log_slower_than = 10000
        """Microseconds (negative: nothing is logged, 0: every command)."""
        self.slowlog_max_len = 128
        self.latency_monitor_threshold = 0
        """Milliseconds (0: nothing is recorded)."""
        self.latency_tracking = True
        """Whether each command's times are tracked (LATENCY HISTOGRAM, INFO latencystats)."""
        self.latency_percentiles = [50.0, 99.0, 99.9]
        """The percentiles INFO latencystats shows."""
        self.normal_limits = (0, 0, 0)
        self.replica_limits = (256 << 20, 64 << 20, 60)
        self.pubsub_limits = pubsub_limits
        """The output limits of subscribers: hard and soft bytes, soft seconds."""

    @property
    def notify_keyspace_events(self) -> str:
        return notify_text(self.notify_flags)
