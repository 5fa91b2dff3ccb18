"""Stream ID arithmetic, parsing and XADD's ID rules (the live comparison is in test_stream_redis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.data.streams import (
    MAX_ID,
    Stream,
    StreamError,
    format_id,
    make_id,
    parse_add_id,
    parse_bound,
    parse_id,
)
from node.data.streams.ids import (
    INVALID_END,
    INVALID_ID,
    INVALID_START,
    XADD_EXHAUSTED,
    XADD_TOO_SMALL,
    XADD_ZERO,
    format_parts,
    is_max,
    split_id,
)

U64 = st.integers(min_value=0, max_value=2**64 - 1)
pytestmark = pytest.mark.timeout(60)


@given(ms=U64, seq=U64)
def test_make_split_format_parse_round_trip(ms: int, seq: int) -> None:
    i = make_id(ms, seq)
    assert split_id(i) == (ms, seq)
    assert format_id(i) == b"%d-%d" % (ms, seq)
    assert parse_id(format_id(i)) == i
    assert parse_bound(format_id(i), end=False) == i
    assert parse_bound(format_id(i), end=True) == i
    assert parse_id(b"%d" % ms) == make_id(ms, 0)
    assert parse_id(b"%d" % ms, missing_seq=7) == make_id(ms, 7)


def _add_id_on_ints(arg: bytes, last: int, now: int) -> int:
    """XADD's ID rules worked on the one 128-bit int (what ``parse_add_id`` does on the halves)."""
    if arg == b"*":
        if last == MAX_ID:
            raise StreamError(XADD_EXHAUSTED)
        return now << 64 if now > last >> 64 else last + 1
    if arg.endswith(b"-*"):
        ms = parse_id(arg[:-2])
        if arg.count(b"-") > 1:
            raise StreamError(INVALID_ID)
        if last == MAX_ID:
            raise StreamError(XADD_EXHAUSTED)
        if ms == last >> 64 << 64:
            if last & (2**64 - 1) == 2**64 - 1:
                raise StreamError(XADD_TOO_SMALL)
            return last + 1
        new = ms
    else:
        new = parse_id(arg)
        if new == 0:
            raise StreamError(XADD_ZERO)
        if last == MAX_ID:
            raise StreamError(XADD_EXHAUSTED)
    if new <= last:
        raise StreamError(XADD_TOO_SMALL)
    return new


EDGE = st.one_of(U64, st.sampled_from([0, 1, 2**62 - 1, 2**62, 2**63, 2**64 - 2, 2**64 - 1]))


@settings(max_examples=500)
@given(last=st.tuples(EDGE, EDGE), new=st.tuples(EDGE, EDGE), now=EDGE, form=st.integers(0, 3))
def test_add_ids_on_halves_are_the_ids_on_ints(
    last: tuple[int, int], new: tuple[int, int], now: int, form: int
) -> None:
    """``parse_add_id`` answers the ID (or the error) the same rules give on the 128-bit int, at
    the edges of the halves too (where a half stops being a small int, and the largest ones)."""
    arg = [b"*", b"%d-*" % new[0], b"%d-%d" % new, b"%d" % new[0]][form]
    stream = _stream_at(make_id(*last)) if last != (0, 0) else None
    expected: int | str
    try:
        expected = _add_id_on_ints(arg, make_id(*last), now)
    except StreamError as exc:
        expected = str(exc)
    if isinstance(expected, str):
        with pytest.raises(StreamError) as refused:
            parse_add_id(arg, stream, now)
        assert str(refused.value) == expected
        return
    got = parse_add_id(arg, stream, now)
    assert make_id(*got) == expected
    assert format_parts(got) == format_id(expected)
    assert split_id(expected) == got
    if stream is not None:
        stream.add(got, [b"f", b"v"])
        assert stream.last == got
        assert stream.last_id == expected
        assert stream.exhausted() == (expected == MAX_ID) == (is_max(got[0]) and is_max(got[1]))


@given(a=st.tuples(U64, U64), b=st.tuples(U64, U64))
def test_ids_order_like_pairs(a: tuple[int, int], b: tuple[int, int]) -> None:
    assert (make_id(*a) < make_id(*b)) == (a < b)


@settings(max_examples=300)
@given(junk=st.binary(max_size=30))
def test_junk_is_rejected_or_a_valid_id(junk: bytes) -> None:
    """Whatever parses is an ID within range; everything else is the exact invalid-ID error."""
    outcome: int | str
    try:
        outcome = parse_id(junk)
    except StreamError as exc:
        outcome = str(exc)
    assert outcome == INVALID_ID or (isinstance(outcome, int) and 0 <= outcome <= MAX_ID)


@pytest.mark.parametrize(
    "text",
    [b"", b"abc", b"1-x", b"-", b"+", b"1-", b"-1", b"1--1", b"1-2-3", b"1 ", b"0x10", b"1.5", b"1_000",
     b"18446744073709551616", b"1-18446744073709551616", b"1" * 128],
)  # fmt: skip
def test_invalid_ids(text: bytes) -> None:
    with pytest.raises(StreamError, match=INVALID_ID):
        parse_id(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [(b"05", make_id(5, 0)), (b"+5-1", make_id(5, 1)), (b" 7-2", make_id(7, 2)),
     (b"1--0", make_id(1, 0)), (b"1- -1", make_id(1, 2**64 - 1)), (b"1--05", make_id(1, 2**64 - 5)),
     (b"3\x00junk", make_id(3, 0)), (b"18446744073709551615-18446744073709551615", MAX_ID)],
)  # fmt: skip
def test_redis_strtoull_leniency(text: bytes, expected: int) -> None:
    """What redis-server accepts beyond plain digits (string2ull falls back to strtoull)."""
    assert parse_id(text) == expected


def test_bounds() -> None:
    assert parse_bound(b"-", end=False) == 0
    assert parse_bound(b"+", end=True) == MAX_ID
    assert parse_bound(b"5", end=False) == make_id(5, 0)
    assert parse_bound(b"5", end=True) == make_id(5, 2**64 - 1)
    assert parse_bound(b"(5-3", end=False) == make_id(5, 4)
    assert parse_bound(b"(5-3", end=True) == make_id(5, 2)
    assert parse_bound(b"(5", end=False) == make_id(5, 1)
    assert parse_bound(b"(5", end=True) == make_id(5, 2**64 - 2)
    assert parse_bound(b"(6-0", end=True) == make_id(5, 2**64 - 1)
    for text in (b"(-", b"(+", b"(", b"((1"):
        with pytest.raises(StreamError, match=INVALID_ID):
            parse_bound(text, end=False)
    with pytest.raises(StreamError, match=INVALID_START):
        parse_bound(b"(18446744073709551615-18446744073709551615", end=False)
    with pytest.raises(StreamError, match=INVALID_END):
        parse_bound(b"(0-0", end=True)


def _stream_at(last: int) -> Stream:
    stream = Stream()
    stream.add(split_id(last), [b"f", b"v"])
    return stream


def test_add_id_rules() -> None:
    assert parse_add_id(b"*", None, 1000) == (1000, 0)
    assert parse_add_id(b"0-*", None, 1000) == (0, 1)  # 0-0 is invalid, so 0-1
    assert parse_add_id(b"7-*", None, 1000) == (7, 0)
    s = _stream_at(make_id(1000, 5))
    assert parse_add_id(b"*", s, 1000) == (1000, 6)
    assert parse_add_id(b"*", s, 999) == (1000, 6)  # the clock went backwards
    assert parse_add_id(b"*", s, 1001) == (1001, 0)
    assert parse_add_id(b"1000-*", s, 0) == (1000, 6)
    assert parse_add_id(b"1001-*", s, 0) == (1001, 0)
    assert parse_add_id(b"1000-6", s, 0) == (1000, 6)
    assert parse_add_id(b"1001", s, 0) == (1001, 0)
    for text in (b"1000-5", b"1000", b"999-*", b"5"):
        with pytest.raises(StreamError, match=XADD_TOO_SMALL):
            parse_add_id(text, s, 0)
    with pytest.raises(StreamError, match=XADD_ZERO):
        parse_add_id(b"0-0", None, 0)
    with pytest.raises(StreamError, match=XADD_ZERO):
        parse_add_id(b"0", s, 0)
    for text in (b"x-*", b"-*", b"1--*", b"1-**"):
        with pytest.raises(StreamError, match=INVALID_ID):
            parse_add_id(text, s, 0)


def test_add_id_overflow_and_exhaustion() -> None:
    top_seq = _stream_at(make_id(5, 2**64 - 1))
    assert parse_add_id(b"*", top_seq, 0) == (6, 0)  # the sequence overflows into ms + 1
    with pytest.raises(StreamError, match=XADD_TOO_SMALL):
        parse_add_id(b"5-*", top_seq, 0)
    full = _stream_at(MAX_ID)
    for text in (b"*", b"5-*", b"7-7"):
        with pytest.raises(StreamError, match=XADD_EXHAUSTED):
            parse_add_id(text, full, 0)
    with pytest.raises(StreamError, match=XADD_ZERO):
        parse_add_id(b"0-0", full, 0)  # Redis checks 0-0 first
