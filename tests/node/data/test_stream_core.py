"""Stream storage by hand: Redis's documented examples, trimming, XDEL, XSETID, blocks and memory."""

from __future__ import annotations

import sys
from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.data.streams import MAX_ID, Stream, StreamError, Trim, make_id
from node.data.streams.ids import (
    XSETID_BELOW_GIVEN_MAX_DELETED,
    XSETID_BELOW_MAX_DELETED,
    XSETID_ENTRIES_ADDED,
    XSETID_TOO_SMALL,
    split_id,
)
from node.data.streams.stream import check_setid_args

pytestmark = pytest.mark.timeout(60)


def filled(n: int, node: int = 10, *, start: int = 1) -> Stream:
    stream = Stream(node_max_entries=node)
    for i in range(start, start + n):
        stream.add((i, 0), [b"item", b"%d" % i])
    return stream


def ids(stream: Stream) -> list[int]:
    return [i >> 64 for i, _ in stream.range(0, MAX_ID)]


def test_reference_approximate_maxlen_with_limit() -> None:
    """Redis's own numbers: 100 entries in nodes of 10, XADD MAXLEN ~ 55 LIMIT 30 leaves 71, then 62."""
    stream = filled(100)
    stream.add((101, 0), [b"item", b"101"])
    assert stream.trim(Trim("maxlen", 55, approximate=True, limit=30)) == 30
    assert stream.length == 71
    stream.add((102, 0), [b"item", b"102"])
    assert stream.trim(Trim("maxlen", 55, approximate=True, limit=30)) == 10
    assert stream.length == 62
    assert stream.first_id == make_id(41, 0)
    assert stream.trim(Trim("maxlen", 55, approximate=True)) == 0  # the next node would go below 55


def test_default_limit_is_a_hundred_nodes() -> None:
    stream = filled(3000, node=10)
    assert stream.trim(Trim("maxlen", 0, approximate=True)) == 1000  # 100 x node_max_entries
    assert stream.trim(Trim("maxlen", 0, approximate=True, limit=0)) == 2000  # LIMIT 0: unlimited
    assert stream.length == 0
    assert stream.first_id == 0
    assert stream.node_count == 0


def test_exact_trim_flags_inside_the_first_node() -> None:
    stream = filled(25)
    assert stream.trim(Trim("maxlen", 12)) == 13
    assert ids(stream) == list(range(14, 26))
    assert stream.node_count == 2  # the node of 11..20 keeps 14..20 live
    assert stream.first_id == make_id(14, 0)
    assert stream.trim(Trim("minid", make_id(17, 0))) == 3
    assert ids(stream) == list(range(17, 26))
    assert stream.trim(Trim("minid", make_id(17, 0), approximate=True)) == 0
    assert stream.trim(Trim("minid", make_id(21, 0), approximate=True)) == 4  # the whole node 11..20


def test_approximate_minid_removes_only_whole_nodes() -> None:
    stream = filled(30)
    assert stream.trim(Trim("minid", make_id(15, 0), approximate=True)) == 10
    assert ids(stream)[0] == 11
    assert stream.trim(Trim("minid", make_id(21, 0), approximate=True, limit=5)) == 0  # 10 > limit 5


def test_minid_exact_leaves_a_node_of_tombstones() -> None:
    """Exact trimming never frees the node it trims inside, even when no live entry is left in it."""
    stream = filled(10, node=5)  # nodes 1..5 and 6..10
    assert stream.delete([make_id(3, 0)]) == 1
    assert stream.trim(Trim("minid", make_id(3, 0))) == 2  # 1 and 2; 3 is already a tombstone
    assert stream.node_count == 2
    assert stream.delete([make_id(4, 0), make_id(5, 0)]) == 2  # the last live ones free the node
    assert stream.node_count == 1
    assert stream.first_id == make_id(6, 0)


def test_xdel_flags_frees_and_tracks() -> None:
    stream = filled(6, node=3)
    assert stream.delete([make_id(2, 0), make_id(2, 0), make_id(99, 0)]) == 1
    assert stream.max_deleted_id == make_id(2, 0)
    assert stream.node_count == 2
    assert stream.delete([make_id(1, 0), make_id(3, 0)]) == 2
    assert stream.node_count == 1
    assert stream.first_id == make_id(4, 0)
    assert stream.max_deleted_id == make_id(3, 0)
    assert stream.delete([make_id(1, 0)]) == 0
    assert stream.delete([make_id(6, 0)]) == 1
    assert stream.last_id == make_id(6, 0)  # deleting the top entry leaves last_id alone
    assert stream.last_entry() == (make_id(5, 0), [b"item", b"5"])
    # the tail node still has room for deleted-counting entries? 4,5,6 filled it: a new node starts
    stream.add((7, 0), [b"item", b"7"])
    assert stream.node_count == 2
    assert stream.entries_added == 7
    assert stream.length == 3


def test_appends_go_to_the_previous_node_after_the_tail_is_freed() -> None:
    stream = filled(4, node=3)  # nodes 1..3 and 4
    stream.delete([make_id(2, 0)])
    stream.delete([make_id(4, 0)])  # frees the tail node
    assert stream.node_count == 1
    stream.add((5, 0), [b"item", b"5"])  # the 1..3 node is full (deleted entries count)
    assert stream.node_count == 2
    small = filled(2, node=3)
    small.add((3, 0), [b"other", b"x"])
    small.delete([make_id(3, 0)])
    assert small.node_count == 1


def test_node_max_bytes_starts_new_nodes() -> None:
    stream = Stream(node_max_entries=100, node_max_bytes=200)
    for i in range(1, 11):
        stream.add((i, 0), [b"f", b"x" * 60])
    assert stream.node_count == 5  # two 60-byte values fit under 200 bytes, a third would not
    big = Stream(node_max_entries=0, node_max_bytes=0)  # no entry limit, the 1 GB byte cap
    for i in range(1, 1001):
        big.add((i, 0), [b"f", b"v"])
    assert big.node_count == 1


def test_fields_values_and_master_fields() -> None:
    stream = Stream(node_max_entries=4)
    rows = [
        [b"a", b"1", b"b", b"2"],
        [b"a", b"", b"b", b"x" * 300],  # same fields, a long value (multi-byte length)
        [b"c", b"3"],
        [b"a", b"1", b"b", b"2", b"a", b"dup"],  # a field repeated, as XADD allows
        [b"\x00\xff", b"\r\n"],
    ]
    for n, row in enumerate(rows, 1):
        stream.add((1, n), row)
    assert [p for _, p in stream.range(0, MAX_ID)] == rows
    assert [p for _, p in stream.range(0, MAX_ID, reverse=True)] == rows[::-1]
    assert stream.get(make_id(1, 2)) == rows[1]
    assert stream.get(make_id(1, 9)) is None
    assert stream.get(0) is None


def test_ranges() -> None:
    stream = filled(20, node=3)
    stream.delete([make_id(5, 0), make_id(6, 0)])
    assert [i >> 64 for i, _ in stream.range(make_id(4, 0), make_id(8, 0))] == [4, 7, 8]
    assert [i >> 64 for i, _ in stream.range(make_id(4, 0), make_id(8, 0), reverse=True)] == [8, 7, 4]
    assert [i >> 64 for i, _ in stream.range(0, MAX_ID, 3, reverse=True)] == [20, 19, 18]
    assert [i >> 64 for i, _ in stream.range(make_id(4, 1), make_id(7, 0), 1)] == [7]
    assert stream.range(make_id(9, 0), make_id(8, 0)) == []
    assert [i >> 64 for i, _ in stream.after(make_id(18, 0), None)] == [19, 20]
    assert stream.after(MAX_ID, None) == []
    assert stream.first_entry() == (make_id(1, 0), [b"item", b"1"])


def test_seq_wrap_inside_a_node() -> None:
    """Sequence numbers below the node's first one, and huge ones, round-trip."""
    stream = Stream(node_max_entries=10)
    for entry_id in (make_id(5, 2**64 - 2), make_id(5, 2**64 - 1), make_id(6, 0), make_id(2**64 - 1, 3)):
        stream.add(split_id(entry_id), [b"f", b"v"])
    assert [i for i, _ in stream.range(0, MAX_ID)] == [
        make_id(5, 2**64 - 2),
        make_id(5, 2**64 - 1),
        make_id(6, 0),
        make_id(2**64 - 1, 3),
    ]
    assert stream.get(make_id(6, 0)) == [b"f", b"v"]


def test_set_id_rules() -> None:
    stream = filled(5)
    stream.delete([make_id(2, 0)])
    with pytest.raises(StreamError, match=XSETID_TOO_SMALL):
        stream.set_id(make_id(4, 0))
    stream.delete([make_id(5, 0)])
    with pytest.raises(StreamError, match=XSETID_BELOW_MAX_DELETED):
        stream.set_id(make_id(4, 0))  # above the top live entry 4-0 but below the deleted 5-0 (7.2)
    with pytest.raises(StreamError, match=XSETID_ENTRIES_ADDED):
        stream.set_id(make_id(9, 0), entries_added=2)  # 3 live entries
    with pytest.raises(StreamError, match=XSETID_BELOW_GIVEN_MAX_DELETED):
        check_setid_args(make_id(9, 0), make_id(10, 0))
    stream.set_id(make_id(9, 0), entries_added=40, max_deleted_id=make_id(6, 0))
    assert (stream.last_id, stream.entries_added, stream.max_deleted_id) == (
        make_id(9, 0),
        40,
        make_id(6, 0),
    )
    stream.set_id(make_id(9, 0), max_deleted_id=0)  # 0 leaves max_deleted_id alone
    assert stream.max_deleted_id == make_id(6, 0)
    empty = filled(2)
    empty.trim(Trim("maxlen", 0))
    empty.set_id(make_id(1, 0))  # an empty stream may go below its last ID
    assert empty.last_id == make_id(1, 0)


def test_counters() -> None:
    stream = filled(10, node=4)
    stream.delete([make_id(1, 0)])
    stream.trim(Trim("maxlen", 5))
    assert (stream.length, stream.entries_added, stream.max_deleted_id) == (5, 10, make_id(1, 0))
    assert stream.first_id == make_id(6, 0)


def test_memory_is_compact() -> None:
    """No per-entry Python objects: well under 60 bytes an entry for two small fields."""
    stream = Stream()
    for i in range(20_000):
        stream.add((1_700_000_000_000 + i // 7, i % 7), [b"f1", b"v%04d" % i, b"f2", b"%05d" % i])
    assert stream.node_count == 200
    assert stream.memory_usage() < 20_000 * 60


def test_counts_that_are_not_positive_mean_no_limit() -> None:
    stream = filled(5)
    assert len(stream.range(0, MAX_ID, 0)) == len(stream.range(0, MAX_ID, -3)) == 5
    assert len(stream.after(0, 0)) == 5


def sealed_size(block: Any) -> int:
    """What ``sys.getsizeof`` says of a block and its parts, sealed (a copy, for the tail)."""
    arrays = [array(a.typecode, a) for a in (block.ms, block.seq, block.offsets)]
    parts = [block.first, *arrays, bytearray(block.flags), bytes(block.data)]
    return sys.getsizeof(block) + sum(map(sys.getsizeof, parts))


def counted_from_scratch(stream: Stream) -> int:
    """``memory_usage`` as a walk over every block with ``sys.getsizeof`` (what the running tally
    must equal)."""
    blocks = stream._blocks
    total = sys.getsizeof(stream) + sys.getsizeof(blocks[:]) + sys.getsizeof(stream._firsts[:])
    total += sum(sealed_size(block) for block in blocks)
    for fields in {id(block.fields): block.fields for block in blocks}.values():
        total += sys.getsizeof(fields) + sum(sys.getsizeof(f) for f in fields)
    return total + sum(group.memory_usage() for group in stream.groups.values())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "add", "other_fields", "xdel", "pop", "trim", "trim_exact"]),
            st.integers(0, 40),
        ),
        max_size=120,
    )
)
def test_memory_tally_equals_a_walk_over_the_blocks(steps: list[tuple[str, int]]) -> None:
    """Whatever adds, deletions and trims did, the running tally is what a full walk counts."""
    stream = Stream(node_max_entries=4, node_max_bytes=150)  # (blocks sealed by either limit)
    ms = 1
    for op, n in steps:
        if op in ("add", "other_fields"):
            ms += 1
            name = b"f" if op == "add" else b"g%d" % (n % 3)
            stream.add((ms, 0), [name, b"v" * (60 if n % 3 == 0 else n % 10)])
        elif op == "xdel":
            stream.delete([make_id(m, 0) for m in range(n % 5 + 1, ms + 1, n % 3 + 2)])
        elif op == "pop":  # (the newest entries: a sealed block may become the tail again)
            stream.delete([make_id(m, 0) for m in range(ms - n % 7, ms + 1)])
        else:
            stream.trim(Trim("maxlen", n, approximate=op == "trim"))
        assert stream.memory_usage() == counted_from_scratch(stream)
