"""Integers in Redis commands, read exactly as redis-server reads them; None for what it refuses.

* ``string2ll``: a signed 64-bit argument (counts, TTLs, database numbers, client IDs, lengths in
  the protocol itself): ``0``, or an optional ``-`` and digits without a leading zero. Nothing else:
  no ``+``, no white space, no ``-0``, nothing past the signed 64-bit range.
* ``string2ull``: an unsigned 64-bit number (either part of a stream ID): what ``string2ll`` takes,
  unless negative (``-5`` is refused), else what C's ``strtoull`` takes in full (``05``, ``+5``,
  `` 5``, and ``-05`` as 2**64 - 5, a minus negating modulo 2**64).
* ``scan_cursor``: SCAN's cursor, which redis-server reads with ``strtoul``: a sign, leading zeros
  and a minus that wraps (``-1`` is 2**64 - 1) are taken, leading white space is not, and the
  empty string is 0. The argument ends at its first NUL byte, as a C string does.
"""

from __future__ import annotations

from typing import Final

__all__ = ["U64", "scan_cursor", "string2ll", "string2ull"]

U64: Final = (1 << 64) - 1
_SPACE: Final = b" \t\n\v\f\r"
"""C's ``isspace`` in the C locale."""
_LONGEST: Final = 20
"""The longest text of a signed 64-bit number: -9223372036854775808."""


def string2ll(text: bytes) -> int | None:
    """A signed 64-bit integer as redis-server's ``string2ll`` reads it."""
    if text == b"0":
        return 0
    digits = text[1:] if text[:1] == b"-" else text
    if len(text) > _LONGEST or not digits.isdigit() or digits[:1] == b"0":
        return None
    value = -int(digits) if len(digits) < len(text) else int(digits)
    return value if -(1 << 63) <= value < (1 << 63) else None


def string2ull(text: bytes) -> int | None:
    """An unsigned 64-bit integer as redis-server's ``string2ull`` reads it (``text`` is already cut
    at its first NUL byte, if it had one)."""
    strict = string2ll(text)
    if strict is not None:
        return strict if strict >= 0 else None
    return _strtoull(text.lstrip(_SPACE))


def scan_cursor(text: bytes) -> int | None:
    """A cursor as redis-server's SCAN reads it."""
    text = text.split(b"\0", 1)[0]
    if not text:
        return 0
    if text[:1] in _SPACE:
        return None
    return _strtoull(text)


def _strtoull(text: bytes) -> int | None:
    """What C's ``strtoull`` reads from ``text`` (white space already skipped) when it takes all of
    it: an optional sign, then digits; None when there are none, or the value passes 2**64 - 1."""
    negative = text[:1] == b"-"
    digits = text[1:] if text[:1] in (b"+", b"-") else text
    if not digits.isdigit():
        return None
    digits = digits.lstrip(b"0") or b"0"
    if len(digits) > _LONGEST:  # (too big however it reads: no int() of a huge text)
        return None
    value = int(digits)
    if value > U64:
        return None
    return -value & U64 if negative else value
