"""Stream IDs as plain ints, and the exact parsing rules and error texts of Redis streams.

An ID ``ms-seq`` (two unsigned 64-bit numbers) is the int ``(ms << 64) | seq``: IDs then compare, sort
and bisect as ints with no per-ID object beyond the int itself.

Where an ID is made rather than compared (XADD), it goes as its two halves, ``IdParts``: each half
is a small int (below 2**62, what a compiled build holds unboxed), where the one int is a 128-bit
number whose every shift and mask allocates.
"""

from __future__ import annotations

from typing import Final

from node.integers import U64 as U64
from node.integers import string2ull

MAX_ID: Final = (1 << 128) - 1
SMALL: Final = 1 << 62
"""Halves below this (and above its negative) are small ints: comparing them costs no allocation."""

IdParts = tuple[int, int]
"""An ID as ``(ms, seq)``."""

INVALID_ID: Final = "ERR Invalid stream ID specified as stream command argument"
INVALID_START: Final = "ERR invalid start ID for the interval"
INVALID_END: Final = "ERR invalid end ID for the interval"
XADD_TOO_SMALL: Final = (
    "ERR The ID specified in XADD is equal or smaller than the target stream top item"
)
XADD_ZERO: Final = "ERR The ID specified in XADD must be greater than 0-0"
XADD_EXHAUSTED: Final = "ERR The stream has exhausted the last possible ID, unable to add more items"
XSETID_TOO_SMALL: Final = "ERR The ID specified in XSETID is smaller than the target stream top item"
XSETID_BELOW_MAX_DELETED: Final = (
    "ERR The ID specified in XSETID is smaller than current max_deleted_entry_id"
)
XSETID_BELOW_GIVEN_MAX_DELETED: Final = (
    "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
)
XSETID_ENTRIES_ADDED: Final = (
    "ERR The entries_added specified in XSETID is smaller than the target stream length"
)

# Redis copies an ID argument into a 128-byte buffer; longer arguments are rejected outright.
MAX_ID_ARG: Final = 127


class StreamError(Exception):
    """A command error; ``str(exc)`` is the exact Redis error reply without the leading ``-``."""


def make_id(ms: int, seq: int) -> int:
    return (ms << 64) | seq


def split_id(i: int) -> IdParts:
    return i >> 64, i & U64


def is_max(half: int) -> bool:
    """Whether an ID's half is the largest there is (2**64 - 1)."""
    return half >= SMALL and half == U64


def format_id(i: int) -> bytes:
    return b"%d-%d" % (i >> 64, i & U64)


def format_parts(parts: IdParts) -> bytes:
    ms, seq = parts
    return b"%d-%d" % (ms, seq)


def _parse(arg: bytes, missing_seq: int, *, strict: bool) -> int:
    if len(arg) > MAX_ID_ARG:
        raise StreamError(INVALID_ID)
    # The C string ends at the first NUL. (Asked with an int: ``b"\0" in arg`` first tries its
    # needle as an int, raising and clearing a TypeError, 150 ns against 17.)
    if 0 in arg:
        arg = arg.split(b"\0", 1)[0]
    if arg == b"-":
        if strict:
            raise StreamError(INVALID_ID)
        return 0
    if arg == b"+":
        if strict:
            raise StreamError(INVALID_ID)
        return MAX_ID
    ms_text, dash, seq_text = arg.partition(b"-")
    ms = string2ull(ms_text)
    seq = string2ull(seq_text) if dash else missing_seq
    if ms is None or seq is None:
        raise StreamError(INVALID_ID)
    return (ms << 64) | seq


def parse_id(arg: bytes, *, missing_seq: int = 0, strict: bool = True) -> int:
    """An ID (``ms`` or ``ms-seq``). Strict, as XADD/XDEL/XACK/XCLAIM take it, ``-`` and ``+`` are
    refused; otherwise (XGROUP SETID) they are the smallest and the largest ID."""
    return _parse(arg, missing_seq, strict=strict)


def parse_bound(arg: bytes, *, end: bool) -> int:
    """An interval bound of XRANGE/XREVRANGE/XPENDING/XAUTOCLAIM, as the inclusive ID it denotes.

    ``-``/``+`` are the extremes, a bare ``ms`` is ``ms-0`` as a start and ``ms-<max>`` as an end, and
    ``(id`` excludes the ID (strict, so ``(-`` and ``(+`` are invalid).
    """
    missing_seq = U64 if end else 0
    if len(arg) > 1 and arg[:1] == b"(":
        value = _parse(arg[1:], missing_seq, strict=True)
        if end:
            if value == 0:
                raise StreamError(INVALID_END)
            return value - 1
        if value == MAX_ID:
            raise StreamError(INVALID_START)
        return value + 1
    return _parse(arg, missing_seq, strict=False)


def next_id(last: IdParts, now: int) -> IdParts:
    """The ID ``*`` generates after ``last`` (not the largest ID): the clock if it moved past the
    last ID's ms, else the last ID plus one."""
    ms, seq = last
    if now > ms:
        return now, 0
    if is_max(seq):
        return ms + 1, 0
    return ms, seq + 1
