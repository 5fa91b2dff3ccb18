"""The append-only file's record format: round trips in any pieces, torn tails, damage with its offset;
and what the store does at start with a torn or damaged file."""

from __future__ import annotations

import logging
import struct
import zlib
from functools import partial
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from node.broker import Broker
from node.config.options import Config
from node.data.store import COMMIT, CorruptRecord, Record, RecordReader, Store, StoreError, encode
from node.data.store.records import HEADER_SIZE
from node.resp.executor import CommandExecutor

record = st.builds(
    Record,
    account=st.sampled_from(["$G", "ACME", "ü"]),
    db=st.integers(0, 15),
    args=st.lists(st.binary(max_size=40), min_size=1, max_size=6),
)
batches = st.lists(st.lists(record, max_size=4), min_size=1, max_size=5)


@attrs.frozen
class File:
    data: bytes
    starts: list[int]
    """Where each record starts, commit records included."""
    ends: list[int]
    """Where each batch ends."""


def _file(items: list[list[Record]]) -> File:
    data = b""
    starts, ends = [], []
    for batch in items:
        for one in batch:
            starts.append(len(data))
            data += encode(one.account, one.db, one.args)
        starts.append(len(data))
        data += COMMIT
        ends.append(len(data))
    return File(data, starts, ends)


def _read(data: bytes, piece: int) -> tuple[list[Record], RecordReader]:
    reader = RecordReader()
    got: list[Record] = []
    for i in range(0, len(data), piece):
        got += reader.feed(data[i : i + piece])
    return got, reader


@given(batches, st.integers(1, 64))
def test_records_round_trip_in_pieces_of_any_size(items: list[list[Record]], piece: int) -> None:
    file = _file(items)
    got, reader = _read(file.data, piece)
    assert got == [one for batch in items for one in batch]
    assert reader.offset == len(file.data)
    assert reader.pending == 0


def test_records_round_trip_byte_at_a_time() -> None:
    items = [Record("$G", 0, [b"XADD", b"s", b"1-1", b"f", b"v"]), Record("A", 15, [b"FLUSHALL"])]
    data = _file([items, []]).data
    reader = RecordReader()
    got: list[Record] = []
    for i in range(len(data)):
        got += reader.feed(data[i : i + 1])
        assert reader.offset + reader.pending == i + 1
    assert got == items


@pytest.mark.slow
@given(batches)
def test_a_torn_tail_at_any_offset_leaves_the_whole_batches_before_it(
    items: list[list[Record]],
) -> None:
    file = _file(items)
    for cut in range(len(file.data) + 1):
        got, reader = _read(file.data[:cut], 7)
        whole = sum(1 for end in file.ends if end <= cut)
        assert got == [one for batch in items[:whole] for one in batch]
        boundary = file.ends[whole - 1] if whole else 0
        assert reader.offset == boundary
        assert reader.pending == cut - boundary


@given(batches, st.data())
def test_a_flipped_byte_anywhere_is_damage_at_its_records_offset(
    items: list[list[Record]], data: st.DataObject
) -> None:
    file = _file(items)
    position = data.draw(st.integers(0, len(file.data) - 1))
    flip = data.draw(st.integers(1, 255))
    damaged = bytearray(file.data)
    damaged[position] ^= flip
    with pytest.raises(CorruptRecord) as raised:
        _read(bytes(damaged), data.draw(st.integers(1, 64)))
    assert raised.value.offset == max(start for start in file.starts if start <= position)


def test_a_body_that_does_not_parse_is_damage() -> None:
    good = encode("$G", 0, [b"DEL", b"k"])
    body = good[HEADER_SIZE:-1]  # (the last argument's length now runs past the body)
    prefix = struct.pack("<II", len(body), zlib.crc32(body))
    bad = prefix + struct.pack("<I", zlib.crc32(prefix)) + body
    with pytest.raises(CorruptRecord, match="malformed record at offset 0"):
        RecordReader().feed(bad + COMMIT)


def _store(path: Path) -> tuple[Store, Broker]:
    broker = Broker(Config())
    store = Store(path, executor=partial(CommandExecutor, broker))
    store.load(broker.keyspaces)
    return store, broker


def test_the_store_drops_a_torn_last_record_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    whole = encode("$G", 0, [b"XADD", b"s", b"1-1", b"f", b"v"]) + COMMIT
    torn = encode("$G", 0, [b"XADD", b"s", b"2-1", b"f", b"v"]) + COMMIT[:-3]
    (tmp_path / "appendonly.log").write_bytes(whole + torn)
    with caplog.at_level(logging.WARNING, logger="pubmesh"):
        store, broker = _store(tmp_path)
    assert f"dropped a torn tail at offset {len(whole)}" in caplog.text
    stream = broker.keyspaces.database("$G", 0).stream(b"s", 0)
    assert stream is not None
    assert stream.length == 1
    assert (tmp_path / "appendonly.log").stat().st_size == len(whole)  # (cut off the file)
    store.append("$G", 0, [b"DEL", b"s"])
    store.commit()
    store.close()
    _, again = _store(tmp_path)
    assert again.keyspaces.database("$G", 0).stream(b"s", 0) is None


def test_damage_before_the_end_stops_the_start_naming_file_and_offset(tmp_path: Path) -> None:
    first = encode("$G", 0, [b"XADD", b"s", b"1-1", b"f", b"v"])
    second = bytearray(encode("$G", 0, [b"XADD", b"s", b"2-1", b"f", b"v"]))
    second[-2] ^= 0x40
    path = tmp_path / "appendonly.log"
    path.write_bytes(first + bytes(second) + COMMIT + first + COMMIT)
    with pytest.raises(StoreError) as raised:
        _store(tmp_path)
    assert str(raised.value).startswith(f"{path}: record checksum mismatch at offset {len(first)}")


def test_an_unknown_fsync_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="appendfsync"):
        Store(tmp_path, executor=partial(CommandExecutor, Broker(Config())), appendfsync="sometimes")


def test_one_process_at_a_time_per_store(tmp_path: Path) -> None:
    store, _ = _store(tmp_path)
    with pytest.raises(StoreError, match="in use by another process"):
        _store(tmp_path)
    store.close()
    again, _ = _store(tmp_path)
    again.close()
