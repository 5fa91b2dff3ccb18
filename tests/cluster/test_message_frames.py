"""The MSG frame written by hand is the frame msgpack's packer makes, and reads back as itself."""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from cluster.frames import FrameDecoder, MessageFrame, encode
from cluster.message_frames import write_message
from routing import Message

# Lengths on both sides of every boundary between msgpack's forms (fix, 8-, 16- and 32-bit).
LENGTHS = st.sampled_from([0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536]) | st.integers(0, 300)
TEXT = st.builds(lambda n, tail: "a" * n + tail, LENGTHS, st.text(max_size=3))
BLOB = st.builds(lambda n, tail: b"b" * n + tail, LENGTHS, st.binary(max_size=3))
QUEUES = st.lists(st.text(max_size=40), max_size=20).map(tuple)
MESSAGES = st.builds(Message, BLOB, st.none() | BLOB, st.none() | BLOB, BLOB)


@given(account=TEXT, msg=MESSAGES, queues=QUEUES, before=st.binary(max_size=8))
def test_a_written_message_is_what_the_packer_makes(
    account: str, msg: Message, queues: tuple[str, ...], before: bytes
) -> None:
    out = bytearray(before)
    write_message(out, account, msg, queues)
    fields = ["MSG", account, msg.subject, msg.reply, msg.headers, msg.payload, list(queues)]
    assert bytes(out) == before + msgpack.packb(fields, use_bin_type=True)


@given(account=st.text(max_size=300), msg=MESSAGES, queues=QUEUES)
def test_a_written_message_reads_back_as_itself(
    account: str, msg: Message, queues: tuple[str, ...]
) -> None:
    decoder = FrameDecoder(1 << 20)
    decoder.open()
    decoder.receive_data(encode(MessageFrame(account, msg, queues)))
    assert list(decoder.frames()) == [MessageFrame(account, msg, queues)]
