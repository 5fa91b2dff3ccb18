"""Replies to bytes, in RESP2 and RESP3, as redis-server 7.2 writes them.

Types the two versions share are plain functions (``bulk``, ``integer``, ``array`` ...); those that
differ are methods of a ``Writer`` for one version, ``RESP2`` or ``RESP3``, which a connection keeps
and swaps on ``HELLO``. RESP3 types fall back in RESP2 as redis-server's ``addReply*`` do: null is
``$-1`` (``*-1`` for a null array), a map is a flat array of its pairs, a set an array, a double or
big number or verbatim string a bulk string, a boolean ``:1``/``:0``, a push an array.

Aggregates are built from encoded items: ``array([bulk(b"a"), integer(1)])``. A delivery is the hot
path, so ``message``, ``pmessage`` and ``smessage`` are each one ``%``-format with the push header
precomputed for the writer's version; ``message`` also keeps the last delivery it wrote, since a
message fanned out to many subscribers of one channel is the same bytes for each of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal
from typing import Final

__all__ = [
    "OK",
    "PONG",
    "RESP2",
    "RESP3",
    "Writer",
    "array",
    "array_header",
    "as_text",
    "bulk",
    "error",
    "format_double",
    "integer",
    "protocol_error",
    "simple",
    "writer_for",
]

OK: Final = b"+OK\r\n"
PONG: Final = b"+PONG\r\n"
_HALF_RANGE: Final = float((2**63 - 1) // 2)
"""``double2ll``'s bound for writing a double as an integer (2**62 once a double)."""
_REMEMBERED_PAYLOAD: Final = 64 * 1024
"""The largest payload whose delivery ``Writer.message`` keeps for the next subscriber: a
larger one costs its copy anyway, and is not held on to after it went out."""


def simple(text: bytes) -> bytes:
    """A simple string, ``+text``; it must hold no CR or LF."""
    return b"+%b\r\n" % text


def error(text: str) -> bytes:
    """An error line as ``addReplyError`` writes it: ``-ERR text``, unless the text brings its own
    code (``-WRONGTYPE ...``). CR and LF become blanks, as ``addReplyErrorFormat`` makes them, so
    client input quoted in the text cannot end the line; text from ``surrogateescape`` goes back
    as the bytes it came from."""
    line = text.encode("utf-8", "surrogateescape").replace(b"\r", b" ").replace(b"\n", b" ")
    return b"%b\r\n" % line if line[:1] == b"-" else b"-ERR %b\r\n" % line


def as_text(value: bytes) -> str:
    """Client bytes to quote in an error's text: ``error`` turns them back into the same bytes."""
    return value.decode("utf-8", "surrogateescape")


def protocol_error(message: str) -> bytes:
    """The line a connection sends for a ``RespProtocolError`` before it closes."""
    return error(f"Protocol error: {message}")


_SMALL_INTEGERS: Final = tuple(b":%d\r\n" % value for value in range(256))
"""Small integer replies made once: every PUBLISH answers one."""


def integer(value: int) -> bytes:
    if 0 <= value < 256:
        return _SMALL_INTEGERS[value]
    return b":%d\r\n" % value


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(data), data)


def array_header(length: int) -> bytes:
    return b"*%d\r\n" % length


def array(items: Iterable[bytes]) -> bytes:
    """An array of encoded items."""
    encoded = list(items)
    return b"*%d\r\n%b" % (len(encoded), b"".join(encoded))


def format_double(value: float) -> bytes:
    """A double as redis-server 7.2's ``d2string``: ``nan``, ``inf``, ``-inf``, ``0``/``-0``,
    an integer when the value is one (within half the 64-bit range), else the shortest digits that
    read back as the value, laid out as ``fpconv_dtoa`` lays them out (plain up to 21 integer digits
    or 6 leading fraction zeros, otherwise ``d.ddde+XX``). redis-server 7.0 wrote ``%.17g``
    instead (``0.1`` was ``0.10000000000000001``)."""
    if math.isnan(value):
        return b"nan"
    if math.isinf(value):
        return b"inf" if value > 0 else b"-inf"
    if value == 0:
        return b"-0" if math.copysign(1.0, value) < 0 else b"0"
    if -_HALF_RANGE <= value <= _HALF_RANGE and value == int(value):
        return b"%d" % int(value)
    sign, digits_tuple, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digits_tuple)).rstrip("0") or "0"
    # repr may keep trailing zeros in the coefficient; move them into the exponent.
    k = int(exponent) + len(digits_tuple) - len(digits)
    n = len(digits)
    exp = abs(k + n - 1)
    if k >= 0 and exp < n + 7:
        text = digits + "0" * k
    elif k < 0 and (k > -7 or exp < 4):
        offset = n + k
        text = "0." + "0" * -offset + digits if offset <= 0 else digits[:offset] + "." + digits[offset:]
    else:
        mantissa = digits[0] + ("." + digits[1:] if n > 1 else "")
        text = f"{mantissa}e{'-' if k + n - 1 < 0 else '+'}{exp}"
    return ("-" if sign else "").encode() + text.encode()


class Writer:
    """The replies whose bytes depend on the protocol version (2 or 3)."""

    def __init__(self, version: int) -> None:
        if version not in (2, 3):
            raise ValueError(f"RESP version {version} is not 2 or 3")
        self.version = version
        resp3 = version == 3
        self.null = b"_\r\n" if resp3 else b"$-1\r\n"
        """A missing value (``GET`` of no key)."""
        self.null_array = b"_\r\n" if resp3 else b"*-1\r\n"
        """A missing aggregate (a ``BLPOP`` that timed out)."""
        self.true, self.false = (b"#t\r\n", b"#f\r\n") if resp3 else (b":1\r\n", b":0\r\n")
        self._map, self._set, self._push = (b"%", b"~", b">") if resp3 else (b"*", b"*", b"*")
        self._pairs = 1 if resp3 else 2
        self._message = self.push_header(3) + bulk(b"message")
        self._pmessage = self.push_header(4) + bulk(b"pmessage")
        self._smessage = self.push_header(3) + bulk(b"smessage")
        # The last ``message`` written: its channel, its payload (the very object) and its bytes.
        self._last_channel = self._last_message = b""
        self._last_payload: bytes | None = None

    def boolean(self, value: bool) -> bytes:
        return self.true if value else self.false

    def map_header(self, pairs: int) -> bytes:
        """The header of a map of ``pairs`` key-value pairs (the items follow, key first)."""
        return b"%b%d\r\n" % (self._map, pairs * self._pairs)

    def map(self, pairs: Iterable[tuple[bytes, bytes]]) -> bytes:
        """A map of encoded keys and values."""
        encoded = [key + value for key, value in pairs]
        return self.map_header(len(encoded)) + b"".join(encoded)

    def set_header(self, length: int) -> bytes:
        return b"%b%d\r\n" % (self._set, length)

    def set(self, items: Iterable[bytes]) -> bytes:
        encoded = list(items)
        return self.set_header(len(encoded)) + b"".join(encoded)

    def push_header(self, length: int) -> bytes:
        return b"%b%d\r\n" % (self._push, length)

    def push(self, items: Iterable[bytes]) -> bytes:
        """Out-of-band data: a push in RESP3, an array in RESP2."""
        encoded = list(items)
        return self.push_header(len(encoded)) + b"".join(encoded)

    def double(self, value: float) -> bytes:
        text = format_double(value)
        return b",%b\r\n" % text if self.version == 3 else bulk(text)

    def big_number(self, digits: bytes) -> bytes:
        return b"(%b\r\n" % digits if self.version == 3 else bulk(digits)

    def verbatim(self, text: bytes, kind: bytes = b"txt") -> bytes:
        """A verbatim string of a three-letter ``kind`` (``txt``, ``mkd``), padded with blanks."""
        if self.version == 2:
            return bulk(text)
        return b"=%d\r\n%-3.3b:%b\r\n" % (len(text) + 4, kind, text)

    def message(self, channel: bytes, payload: bytes) -> bytes:
        """A delivery to a channel subscription (the same bytes again for the same message)."""
        if payload is self._last_payload and channel == self._last_channel:
            return self._last_message
        data = b"%b$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
            self._message, len(channel), channel, len(payload), payload,
        )  # fmt: skip
        if len(payload) <= _REMEMBERED_PAYLOAD:
            self._last_channel, self._last_payload, self._last_message = channel, payload, data
        return data

    def pmessage(self, pattern: bytes, channel: bytes, payload: bytes) -> bytes:
        """A delivery to a pattern subscription."""
        return b"%b$%d\r\n%b\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
            self._pmessage, len(pattern), pattern, len(channel), channel, len(payload), payload,
        )  # fmt: skip

    def smessage(self, channel: bytes, payload: bytes) -> bytes:
        """A delivery to a shard channel subscription."""
        return b"%b$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
            self._smessage, len(channel), channel, len(payload), payload,
        )  # fmt: skip

    def subscription(self, kind: bytes, channel: bytes | None, count: int) -> bytes:
        """The acknowledgement of one (un)subscription: ``kind`` is ``subscribe``,
        ``unsubscribe``, ``psubscribe``, ``punsubscribe``, ``ssubscribe`` or ``sunsubscribe``;
        ``channel`` None for an unsubscribe-all from nothing (a null in place of the channel);
        ``count`` the subscriptions left."""
        name = self.null if channel is None else bulk(channel)
        return b"%b%b%b:%d\r\n" % (self.push_header(3), bulk(kind), name, count)


RESP2: Final = Writer(2)
RESP3: Final = Writer(3)


def writer_for(version: int) -> Writer:
    """The writer for a protocol version (what ``HELLO`` asked for)."""
    return RESP3 if version == 3 else RESP2 if version == 2 else Writer(version)
