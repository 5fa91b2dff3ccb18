"""The value language of redis-server's ``notify-keyspace-events``: the classes of keyspace
notifications as bits, the letters that stand for them (``Ag$lshzxeKEtmdn``), and how CONFIG GET
spells a set of them. What is announced, and how, is ``node.data.notifications``'s.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ALL",
    "EVICTED",
    "EXPIRED",
    "GENERIC",
    "HASH",
    "INVALID",
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
