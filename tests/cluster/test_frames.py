"""The link codec: frames survive the round trip, and nothing a peer sends gets past unchecked."""

from __future__ import annotations

import contextlib

import attrs
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.checks import MAX_ARRAY
from cluster.decoder import FrameDecoder
from cluster.frames import (
    HANDSHAKE_FRAME,
    MAX_PEERS,
    Challenge,
    Err,
    Frame,
    GatewayHello,
    Gateways,
    Gossip,
    Hello,
    KeysReply,
    KeysRequest,
    LinkError,
    MessageFrame,
    PeerInfo,
    Ping,
    Pong,
    Proof,
    RouteHello,
    Snapshot,
    SubAdd,
    SubRemove,
    encode,
)
from routing import Message

# msgpack strings are UTF-8, so no lone surrogates; its integers stop at 64 bits.
TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
SUBJECT = st.text(st.characters(codec="utf-8", blacklist_characters=" \t\r\n"), min_size=1, max_size=12)
QUEUE = st.none() | TEXT
BLOB = st.binary(max_size=40)

PEER = st.builds(PeerInfo, TEXT, TEXT, TEXT)
URLS = st.lists(TEXT, max_size=3).map(tuple)
ROUTE_HELLO = st.builds(
    RouteHello,
    id=TEXT, name=TEXT, cluster=TEXT, url=TEXT, pool_size=st.integers(1, 64),
    pinned=URLS, peers=st.lists(PEER, max_size=3).map(tuple), gateway_url=TEXT,
    slot=st.none() | st.integers(0, 63) | TEXT, connection=TEXT,
    redis_url=st.sampled_from(["", "127.0.0.1:6379", "[::1]:7000", "redis.example:1"]),
).map(lambda h: h if h.slot is not None else attrs.evolve(h, connection=""))  # fmt: skip
GATEWAY_HELLO = st.builds(
    GatewayHello,
    id=TEXT, name=TEXT, gateway=TEXT.filter(bool), url=TEXT, urls=URLS,
    gateways=st.dictionaries(TEXT, URLS, max_size=3),
)  # fmt: skip
NONCE = st.binary(min_size=32, max_size=32)

FRAMES: st.SearchStrategy[Frame] = st.one_of(
    st.builds(Challenge, TEXT, st.integers(0, 0xFFFF), NONCE),
    st.builds(Proof, NONCE),
    st.builds(Hello, ROUTE_HELLO | GATEWAY_HELLO),
    st.builds(Ping),
    st.builds(Pong),
    st.builds(SubAdd, TEXT, SUBJECT, QUEUE, st.integers(1, 1000)),
    st.builds(SubRemove, TEXT, SUBJECT, QUEUE),
    st.builds(Snapshot, TEXT, st.lists(st.tuples(SUBJECT, QUEUE, st.integers(1, 9)), max_size=5)),
    st.builds(
        MessageFrame,
        TEXT,
        st.builds(Message, BLOB, st.none() | BLOB, st.none() | BLOB, BLOB),
        st.lists(TEXT, max_size=3).map(tuple),
    ),
    st.builds(Gossip, st.lists(PEER, max_size=3)),
    st.builds(Gateways, st.dictionaries(TEXT, URLS, max_size=3)),
    st.builds(
        KeysRequest,
        st.integers(0, 1 << 63),
        TEXT,
        st.integers(0, 255),
        st.integers(0, 8),
        st.lists(BLOB, min_size=1, max_size=4),
        st.sampled_from([2, 3]),
    ),
    st.builds(KeysReply, st.integers(0, 1 << 63), BLOB),
    st.builds(Err, TEXT),
)


def decode_all(
    data: bytes, *, chunk: int = 0, max_frame: int = 1 << 20, opened: bool = True
) -> list[Frame]:
    """The frames in ``data`` fed in ``chunk``-sized pieces, to a decoder of an authenticated link
    (or not yet, unless ``opened``)."""
    decoder = FrameDecoder(max_frame)
    if opened:
        decoder.open()
    frames: list[Frame] = []
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)] if chunk else [data]
    for piece in pieces:
        decoder.receive_data(piece)
        frames.extend(decoder.frames())
    return frames


@given(st.lists(FRAMES, max_size=8), st.integers(0, 7))
def test_frames_survive_the_round_trip_in_any_chunking(frames: list[Frame], chunk: int) -> None:
    assert decode_all(b"".join(map(encode, frames)), chunk=chunk) == frames


def route_hello(**changes: object) -> list[object]:
    """A route HELLO frame, well formed but for ``changes``."""
    fields = {"kind": "route", "id": "x", "name": "x", "cluster": "c", "url": "u", "pool_size": 3}
    return ["HELLO", fields | changes]


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
        ["HELLO", {"kind": "route"}],
        ["HELLO", {"kind": "martian", "id": "x"}],
        route_hello(peers=None),
        route_hello(peers=7),
        route_hello(peers=[{"id": "y", "name": "y"}]),
        route_hello(pool_size=0),
        route_hello(slot=64),
        route_hello(pool_size=True),
        route_hello(redis_url="no-port"),
        route_hello(redis_url="host:0"),
        route_hello(redis_url="a b:1"),
        route_hello(redis_url=7),
        ["HELLO", {"kind": "gateway", "id": "x", "name": "x", "gateway": "", "url": "u"}],
        [
            "HELLO",
            {"kind": "gateway", "id": "x", "name": "x", "gateway": "g", "url": "u"}
            | {"gateways": {"a": "nats://a:1"}},
        ],
        ["CHALLENGE", "route", 2, b"short"],
        ["CHALLENGE", "route", "2", b"n" * 32],
        ["PROOF", "m" * 32],
        ["GOSSIP", [{"id": 1}]],
        ["GOSSIP", [{"id": "a", "name": "a", "url": "u"}] * (MAX_PEERS + 1)],
        ["GATEWAYS", {"east": "nats://a:7222"}],
        ["GATEWAYS", {"east": [7222]}],
        ["PING", "extra"],
        ["KEYS", 1, "$G", 0, 0, []],
        ["KEYS", 1, "$G", 256, 0, [b"GET", b"k"]],
        ["KEYS", -1, "$G", 0, 0, [b"GET"]],
        ["KEYS", 1, "$G", 0, 9, [b"GET"]],
        ["KEYS", 1, "$G", 0, 0, ["GET"]],
        ["KEYS", 1, "$G", 0, 0, [b"GET"], 4],
        ["KEYS", 1, "$G", 0, 0, [b"GET"], "3"],
        ["KEYS", 1, "$G", 0, 0, [b"GET"], 3, 0],
        ["KEYR", 1, "text"],
    ],
)
def test_malformed_frames_are_link_errors(value: object) -> None:
    with pytest.raises(LinkError):
        decode_all(msgpack.packb(value))


def test_a_forwarded_command_without_a_protocol_is_resp2() -> None:
    """(as an earlier release sends it, during a rolling upgrade)"""
    (frame,) = decode_all(msgpack.packb(["KEYS", 7, "$G", 1, 0, [b"GET", b"k"]]))
    assert frame == KeysRequest(7, "$G", 1, 0, [b"GET", b"k"], 2)


def test_a_forwarded_command_of_more_arguments_than_an_array_holds_travels_whole() -> None:
    args = [b"XADD", b"k", b"*", *(b"f%d" % n for n in range(2 * MAX_ARRAY))]
    request = KeysRequest(3, "$G", 0, 1, args, 3)
    (frame,) = decode_all(encode(request))
    assert frame == request
    nested = b"\xdd" + (1 << 20).to_bytes(4) + b"\x90" * (1 << 20)  # (a million empty arrays)
    too_many = b"\xdd" + (1 << 30).to_bytes(4) + b"\xc4\x00" * 5000
    cut = msgpack.packb([b"x"] * 5000)[:-1]
    few = b"\xdc" + (3).to_bytes(2) + b"\xc4\x01a" * 3  # (what an array holds: no packing)
    packings = (b"\xc1", msgpack.packb({"a": 1}), msgpack.packb([]), nested, too_many, cut, few)
    for packed in (*packings, msgpack.packb([b"x"] * 5000) + b"\x00"):
        with pytest.raises(LinkError):
            decode_all(msgpack.packb(["KEYS", 7, "$G", 1, 0, packed, 2]))


def test_undecodable_bytes_are_a_link_error() -> None:
    with pytest.raises(LinkError, match="undecodable"):
        decode_all(b"\xc1")


def test_an_oversized_frame_is_refused_before_it_is_whole() -> None:
    decoder = FrameDecoder(1024)
    big = encode(MessageFrame("$G", Message(b"s", None, None, b"x" * 5000), ()))
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


@pytest.mark.parametrize(
    "data",
    [
        b"\xdd\x03\x93\x87\x00" + b"\x00" * 1000,  # an array of 60 million elements
        b"\xdf\x00\x10\x00\x00" + b"\x00" * 1000,  # a map of a million pairs
        b"\xc9\x00\x00\x00\x10\x01" + b"\x00" * 16,  # an ext
        msgpack.packb(["ERR", "x" * 5000]),  # a long string
        msgpack.packb(["PROOF", b"x" * 100]),  # a long binary
    ],
)
def test_a_stranger_cannot_announce_anything_big(data: bytes) -> None:
    """Before the handshake, lengths are refused from the header: nothing is allocated for them."""
    with pytest.raises(LinkError, match="exceeds"):
        decode_all(data, max_frame=1 << 30, opened=False)


def test_a_frame_before_the_handshake_is_small() -> None:
    decoder = FrameDecoder(1 << 30)
    with pytest.raises(LinkError, match="larger"):
        decoder.receive_data(b"\x00" * (HANDSHAKE_FRAME + 1))


def test_the_open_link_takes_big_frames_and_keeps_what_was_buffered() -> None:
    decoder = FrameDecoder(1 << 20)
    big = encode(MessageFrame("$G", Message(b"s", None, None, b"x" * 500_000), ()))
    decoder.receive_data(encode(Proof(b"p" * 32)) + big[:1000])
    frames = decoder.frames()
    assert next(frames) == Proof(b"p" * 32)
    decoder.open()
    decoder.receive_data(big[1000:])
    assert [f.msg.payload for f in frames] == [b"x" * 500_000]  # type: ignore[union-attr]


def test_a_deep_frame_is_a_link_error() -> None:
    with pytest.raises(LinkError):
        decode_all(b"\x91" * 5000 + b"\x90")
