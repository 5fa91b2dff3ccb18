"""The link codec: frames survive the round trip, and nothing a peer sends gets past unchecked."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.frames import (
    Err,
    Frame,
    FrameDecoder,
    Gateways,
    Gossip,
    Hello,
    LinkError,
    MessageFrame,
    Ping,
    Pong,
    Snapshot,
    SubAdd,
    SubRemove,
    encode,
)

# msgpack strings are UTF-8, so no lone surrogates; its integers stop at 64 bits.
TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
SUBJECT = st.text(st.characters(codec="utf-8", blacklist_characters=" \t\r\n"), min_size=1, max_size=12)
QUEUE = st.none() | TEXT
BLOB = st.binary(max_size=40)

FRAMES: st.SearchStrategy[Frame] = st.one_of(
    st.builds(Hello, st.dictionaries(TEXT, st.integers(-(2**63), 2**63 - 1) | TEXT, max_size=4)),
    st.builds(Ping),
    st.builds(Pong),
    st.builds(SubAdd, TEXT, SUBJECT, QUEUE, st.integers(1, 1000)),
    st.builds(SubRemove, TEXT, SUBJECT, QUEUE),
    st.builds(Snapshot, TEXT, st.lists(st.tuples(SUBJECT, QUEUE, st.integers(1, 9)), max_size=5)),
    st.builds(
        MessageFrame,
        TEXT,
        BLOB,
        st.none() | BLOB,
        st.none() | BLOB,
        BLOB,
        st.lists(TEXT, max_size=3).map(tuple),
    ),
    st.builds(
        Gossip, st.lists(st.dictionaries(st.sampled_from(["id", "name", "url"]), TEXT), max_size=3)
    ),
    st.builds(Gateways, st.dictionaries(TEXT, st.lists(TEXT, max_size=3), max_size=3)),
    st.builds(Err, TEXT),
)


def decode_all(data: bytes, *, chunk: int = 0, max_frame: int = 1 << 20) -> list[Frame]:
    decoder = FrameDecoder(max_frame)
    frames: list[Frame] = []
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)] if chunk else [data]
    for piece in pieces:
        decoder.receive_data(piece)
        frames.extend(decoder.frames())
    return frames


@given(st.lists(FRAMES, max_size=8), st.integers(0, 7))
def test_frames_survive_the_round_trip_in_any_chunking(frames: list[Frame], chunk: int) -> None:
    assert decode_all(b"".join(map(encode, frames)), chunk=chunk) == frames


@pytest.mark.parametrize(
    "value",
    [
        [],
        "not an array",
        ["NOPE"],
        ["MSG", "$G", "subject-as-str", None, None, b"", []],
        ["MSG", "$G", b"s", None, None, b"", "q"],
        ["RS+", "$G", "foo", None, 0],  # weights start at 1
        ["RS+", "$G", "foo", None, True],
        ["RS-", "$G", b"foo", None],
        ["SNAP", "$G", [["foo", None]]],
        ["HELLO", ["not", "a", "map"]],
        ["GOSSIP", [{"id": 1}]],
        ["GATEWAYS", {"east": "nats://a:7222"}],
        ["GATEWAYS", {"east": [7222]}],
        ["PING", "extra"],
    ],
)
def test_malformed_frames_are_link_errors(value: object) -> None:
    with pytest.raises(LinkError):
        decode_all(msgpack.packb(value))


def test_undecodable_bytes_are_a_link_error() -> None:
    with pytest.raises(LinkError, match="undecodable"):
        decode_all(b"\xc1")


def test_an_oversized_frame_is_refused_before_it_is_whole() -> None:
    decoder = FrameDecoder(1024)
    big = encode(MessageFrame("$G", b"s", None, None, b"x" * 5000, ()))
    with pytest.raises(LinkError, match="larger"):
        decoder.receive_data(big[:2000])


@given(st.binary(max_size=200))
def test_random_bytes_give_frames_or_a_link_error(data: bytes) -> None:
    try:
        frames = decode_all(data, max_frame=256)
    except LinkError:
        return
    assert all(isinstance(f, Frame) for f in frames)


@given(st.lists(FRAMES, min_size=1, max_size=4), st.data())
def test_mutated_streams_give_frames_or_a_link_error(frames: list[Frame], data: st.DataObject) -> None:
    raw = bytearray(b"".join(map(encode, frames)))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(LinkError):
        decode_all(bytes(raw), max_frame=4096)
