"""Integer arguments (``node.integers``) against redis-server's own rules: ``string2ll`` as its
source states them, and ``string2ull`` and SCAN's cursor through the C library's ``strtoull``
itself (the side-by-side replies are in test_resp_conformance)."""

from __future__ import annotations

import ctypes
import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.integers import scan_cursor, string2ll, string2ull

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(sys.platform != "linux", reason="compares with glibc's strtoull"),
]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.strtoull.restype = ctypes.c_ulonglong
_libc.strtoull.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
ERANGE = 34
CANONICAL = re.compile(rb"0|-?[1-9][0-9]*")


def c_strtoull(text: bytes) -> tuple[int, bytes, bool]:
    """What C's ``strtoull(text, &end, 10)`` returns, what is left at ``end``, and whether it set
    ERANGE (``text`` as a C string: up to its first NUL)."""
    buffer = ctypes.create_string_buffer(text)
    end = ctypes.c_void_p()
    ctypes.set_errno(0)
    value = _libc.strtoull(buffer, ctypes.byref(end), 10)
    errno = ctypes.get_errno()
    start = ctypes.addressof(buffer)
    rest = text[(end.value or start) - start :].split(b"\0", 1)[0]
    return value, rest, errno == ERANGE


def redis_string2ll(text: bytes) -> int | None:
    """util.c's string2ll: up to 20 bytes, canonical decimal, in the signed 64-bit range."""
    if len(text) > 20 or not CANONICAL.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def redis_string2ull(text: bytes) -> int | None:
    """util.c's string2ull, for a C string."""
    text = text.split(b"\0", 1)[0]
    strict = redis_string2ll(text)
    if strict is not None:
        return strict if strict >= 0 else None
    value, rest, erange = c_strtoull(text)
    return None if erange or not text or rest else value


def redis_scan_cursor(text: bytes) -> int | None:
    """db.c's parseScanCursorOrReply: strtoul, refused after leading white space."""
    text = text.split(b"\0", 1)[0]
    value, rest, erange = c_strtoull(text)
    return None if text[:1].isspace() or rest or erange else value


ALPHABET = b"0123456789+- \t\0x"
TEXT = st.one_of(
    st.binary(max_size=24).map(lambda b: bytes(ALPHABET[c % len(ALPHABET)] for c in b)),
    st.integers(-(2**65), 2**65).map(lambda n: b"%d" % n),
    st.integers(0, 2**65).map(lambda n: b"+%d" % n),
    st.integers(0, 2**65).map(lambda n: b"00%d" % n),
    st.binary(max_size=8),
)
EDGES = [
    b"",
    b"0",
    b"-0",
    b"+0",
    b"00",
    b"01",
    b"+1",
    b" 1",
    b"1 ",
    b"-",
    b"+",
    b"1_0",
    b"9223372036854775807",
    b"9223372036854775808",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-18446744073709551615",
    b"-18446744073709551616",
    b"-1",
    b"1\0x",
    b"\0",
    b" \0",
    b"0" * 5000 + b"1",
]


@pytest.mark.slow
@settings(max_examples=2000)
@given(TEXT)
def test_string2ll_is_redis_servers(text: bytes) -> None:
    assert string2ll(text) == redis_string2ll(text)


@pytest.mark.slow
@settings(max_examples=2000)
@given(TEXT)
def test_string2ull_is_redis_servers(text: bytes) -> None:
    assert string2ull(text.split(b"\0", 1)[0]) == redis_string2ull(text)


@pytest.mark.slow
@settings(max_examples=2000)
@given(TEXT)
def test_scan_cursor_is_redis_servers(text: bytes) -> None:
    assert scan_cursor(text) == redis_scan_cursor(text)


@pytest.mark.parametrize("text", EDGES)
def test_the_edges(text: bytes) -> None:
    assert string2ll(text) == redis_string2ll(text)
    assert string2ull(text.split(b"\0", 1)[0]) == redis_string2ull(text)
    assert scan_cursor(text) == redis_scan_cursor(text)


def test_what_the_rules_mean() -> None:
    assert [string2ll(t) for t in (b"01", b"+1", b" 1", b"-0", b"-1")] == [None] * 4 + [-1]
    assert [string2ull(t) for t in (b"05", b"+5", b" 5", b"-05", b"-5")] == [5, 5, 5, 2**64 - 5, None]
    assert [scan_cursor(t) for t in (b"-1", b"", b"+5", b" 5", b"1\0x")] == [2**64 - 1, 0, 5, None, 1]
