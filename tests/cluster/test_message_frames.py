"""The MSG frame written by hand is the frame msgpack's packer makes, and reads back as itself; read
in place, it is what the general way reads."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.checks import LinkError
from cluster.decoder import FrameDecoder
from cluster.frames import Frame, MessageFrame, check_frame, encode
from cluster.message_frames import pack_message, read_message
from routing import Message

# Lengths on both sides of every boundary between msgpack's forms (fix, 8-, 16- and 32-bit).
LENGTHS = st.sampled_from([0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536]) | st.integers(0, 300)
TEXT = st.builds(lambda n, tail: "a" * n + tail, LENGTHS, st.text(max_size=3))
BLOB = st.builds(lambda n, tail: b"b" * n + tail, LENGTHS, st.binary(max_size=3))
QUEUES = st.lists(st.text(max_size=40), max_size=20).map(tuple)
MESSAGES = st.builds(Message, BLOB, st.none() | BLOB, st.none() | BLOB, BLOB)


@given(account=TEXT, msg=MESSAGES, queues=QUEUES)
def test_a_written_message_is_what_the_packer_makes(
    account: str, msg: Message, queues: tuple[str, ...]
) -> None:
    fields = ["MSG", account, msg.subject, msg.reply, msg.headers, msg.payload, list(queues)]
    assert pack_message(account, msg, queues) == msgpack.packb(fields, use_bin_type=True)


@given(account=st.text(max_size=300), msg=MESSAGES, queues=QUEUES)
def test_a_written_message_reads_back_as_itself(
    account: str, msg: Message, queues: tuple[str, ...]
) -> None:
    decoder = FrameDecoder(1 << 20)
    decoder.open()
    decoder.receive_data(encode(MessageFrame(account, msg, queues)))
    assert list(decoder.frames()) == [MessageFrame(account, msg, queues)]


def read_the_general_way(data: bytes) -> Frame | None:
    """What the decoder's general way makes of one frame's bytes (None: a LinkError)."""
    try:
        return check_frame(msgpack.unpackb(data, raw=False, strict_map_key=True))
    except (LinkError, ValueError, msgpack.UnpackException):
        return None


SHORT_TEXT = st.text(max_size=20)
SHORT_MESSAGES = st.builds(
    Message, BLOB, st.none() | BLOB, st.none() | BLOB, BLOB
)  # (binaries of any length: read in place in every form)


@given(
    account=SHORT_TEXT,
    msg=SHORT_MESSAGES,
    queues=st.lists(SHORT_TEXT, max_size=15).map(tuple),
    before=st.binary(max_size=8),
    after=st.binary(max_size=8),
)
def test_a_message_as_links_write_it_is_read_in_place(
    account: str, msg: Message, queues: tuple[str, ...], before: bytes, after: bytes
) -> None:
    frame = pack_message(account, msg, queues)
    buf = before + frame + after
    assert read_message(buf, len(before), 1 << 20) == (
        MessageFrame(account, msg, queues),
        len(before) + len(frame),
    )
    assert read_message(buf, len(before), len(frame) - 1) == (None, -1)  # (over the frame limit)
    assert read_message(buf[: len(before) + len(frame) - 1], len(before), 1 << 20) == (None, -1)


@given(account=TEXT, msg=MESSAGES, queues=QUEUES, at=st.integers(0, 4), data=st.data())
def test_what_is_read_in_place_is_what_the_general_way_reads(
    account: str, msg: Message, queues: tuple[str, ...], at: int, data: st.DataObject
) -> None:
    """Mutated, cut or not, a frame read in place is the frame the general way reads from the same
    bytes, and ends where it does."""
    raw = bytearray(b"\x00" * at + pack_message(account, msg, queues))
    for _ in range(data.draw(st.integers(0, 3))):
        raw[data.draw(st.integers(at, len(raw) - 1))] = data.draw(st.integers(0, 255))
    buf = bytes(raw[: data.draw(st.integers(at, len(raw)))])
    frame, end = read_message(buf, at, 1 << 20)
    if frame is not None:
        assert read_the_general_way(buf[at:end]) == frame


@pytest.mark.parametrize("queues", [(), ("workers",)])
def test_every_byte_of_a_frame_changed_reads_as_the_general_way_reads_it(
    queues: tuple[str, ...],
) -> None:
    raw = pack_message("$G", Message(b"orders.new", b"_INBOX.1", None, b"payload"), queues)
    for i in range(len(raw)):
        for value in range(256):
            buf = raw[:i] + bytes([value]) + raw[i + 1 :]
            frame, end = read_message(buf, 0, 1 << 20)
            if frame is not None:
                assert read_the_general_way(buf[:end]) == frame, (i, value)
