"""Keyspace notifications, as redis-server 7.2 sends them: the classes of events, their
``notify-keyspace-events`` spelling, and the publishing of one event.

A write to a key announces what it did (``Database.notify``: a class and an event name such as
``xadd``) when ``notify-keyspace-events`` enables the class and at least one of ``K`` (keyspace) and
``E`` (keyevent): as a message on ``__keyspace@<db>__:<key>`` whose payload is the event's name,
and as one on ``__keyevent@<db>__:<event>`` whose payload is the key. Both are published in the
account that holds the key, through the node's ordinary publish path, so they reach Redis and NATS
subscribers and cross routes and gateways wherever someone is interested, like any channel.

**Subjects.** A channel is a subject (``routing.channels``): ``__keyevent@0__:xadd`` is a valid
literal subject (``@`` and ``:`` are ordinary characters in a token) and is used as it is, and so
is ``__keyspace@0__:<key>`` whenever it is one: a key with dots makes it several tokens
(``__keyspace@0__:orders.eu`` is two), so NATS clients may subscribe to ``__keyspace@0__:orders.>``.
A key with blanks, empty tokens or ``*``/``>`` tokens makes the channel a ``$R.``-hex subject,
which NATS clients cannot name but Redis clients subscribe to as usual.

**Cost.** With notifications off (the default) a write pays one test of ``Notifier.flags``. Events
caused by publishing an event (a stream capturing the notification subjects adds an entry, which
would announce itself again) are not announced: an event never begets another one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

__all__ = [
    "ALL",
    "EVICTED",
    "EXPIRED",
    "GENERIC",
    "HASH",
    "KEYEVENT",
    "KEYSPACE",
    "KEY_MISS",
    "LIST",
    "MODULE",
    "NEW",
    "SET",
    "STREAM",
    "STRING",
    "ZSET",
    "Notifier",
    "Publish",
    "format_flags",
    "parse_flags",
]

KEYSPACE: Final = 1 << 0
"""``K``: events go to ``__keyspace@<db>__:<key>``."""
KEYEVENT: Final = 1 << 1
"""``E``: events go to ``__keyevent@<db>__:<event>``."""
GENERIC: Final = 1 << 2
"""``g``: DEL, EXPIRE, RENAME ... (commands on keys of any type)."""
STRING: Final = 1 << 3
"""``$``: string commands."""
LIST: Final = 1 << 4
SET: Final = 1 << 5
HASH: Final = 1 << 6
ZSET: Final = 1 << 7
EXPIRED: Final = 1 << 8
"""``x``: a key removed because its time had come."""
EVICTED: Final = 1 << 9
"""``e``: a key evicted past ``maxmemory`` (never here: the policy is noeviction)."""
STREAM: Final = 1 << 10
"""``t``: stream commands."""
KEY_MISS: Final = 1 << 11
"""``m``: a read of a key that does not exist."""
MODULE: Final = 1 << 13
"""``d``: module events (never here)."""
NEW: Final = 1 << 14
"""``n``: a key created."""
ALL: Final = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE
"""``A``: every class but ``m`` and ``n``."""

_LETTERS: Final = {
    ord("A"): ALL,
    ord("g"): GENERIC,
    ord("$"): STRING,
    ord("l"): LIST,
    ord("s"): SET,
    ord("h"): HASH,
    ord("z"): ZSET,
    ord("x"): EXPIRED,
    ord("e"): EVICTED,
    ord("K"): KEYSPACE,
    ord("E"): KEYEVENT,
    ord("t"): STREAM,
    ord("m"): KEY_MISS,
    ord("d"): MODULE,
    ord("n"): NEW,
}
_CLASSES: Final = (
    (GENERIC, b"g"),
    (STRING, b"$"),
    (LIST, b"l"),
    (SET, b"s"),
    (HASH, b"h"),
    (ZSET, b"z"),
    (EXPIRED, b"x"),
    (EVICTED, b"e"),
    (STREAM, b"t"),
    (MODULE, b"d"),
    (NEW, b"n"),
)
_TARGETS: Final = ((KEYSPACE, b"K"), (KEYEVENT, b"E"), (KEY_MISS, b"m"))

INVALID: Final = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'."
"""redis-server's refusal of a ``notify-keyspace-events`` value with a letter it does not know."""


def parse_flags(value: bytes) -> int | None:
    """The classes a ``notify-keyspace-events`` value enables (letters in any order, repeats
    allowed), or None if it has a letter redis-server does not know (a NUL ends the value, as the
    C string redis-server reads it as does)."""
    flags = 0
    for letter in value.partition(b"\0")[0]:
        bits = _LETTERS.get(letter)
        if bits is None:
            return None
        flags |= bits
    return flags


def format_flags(flags: int) -> bytes:
    """``flags`` as CONFIG GET shows them: ``A`` for all of ``ALL`` (else each class letter in a
    fixed order), then ``K``, ``E`` and ``m``."""
    # (``n`` is not shown beside ``A``: redis-server does not show it)
    text = b"A" if flags & ALL == ALL else b"".join(letter for bit, letter in _CLASSES if flags & bit)
    return text + b"".join(letter for bit, letter in _TARGETS if flags & bit)


Publish = Callable[[str, bytes, bytes], None]
"""Publishes a message (account name, channel, payload) as PUBLISH would."""


class Notifier:
    """What ``notify-keyspace-events`` enables, and how events are published.

    ``flags`` is read on every write: 0 (nothing is sent, the default) unless both a class and a
    target are enabled, so one test tells whether anything is to be done; ``configured`` keeps the
    value as set, for CONFIG GET.
    """

    __slots__ = ("_emitting", "configured", "flags", "publish")

    def __init__(self) -> None:
        self.configured = 0
        self.flags = 0
        self.publish: Publish | None = None
        """Set by the node once it can publish (None: events go nowhere)."""
        self._emitting = False

    def configure(self, flags: int) -> None:
        self.configured = flags
        targets = flags & (KEYSPACE | KEYEVENT)
        self.flags = flags if targets and flags & ~(KEYSPACE | KEYEVENT) else 0

    def emit(self, account: str, db: int, event: bytes, key: bytes) -> None:
        """Publish ``event`` on ``key`` of database ``db`` of ``account`` (its class enabled)."""
        publish = self.publish
        if publish is None or self._emitting:
            return
        self._emitting = True
        try:
            if self.flags & KEYSPACE:
                publish(account, b"__keyspace@%d__:%b" % (db, key), event)
            if self.flags & KEYEVENT:
                publish(account, b"__keyevent@%d__:%b" % (db, event), key)
        finally:
            self._emitting = False
