"""RAFT frames: every Raft message survives the codec, and a malformed one is a LinkError, never
anything else."""

from __future__ import annotations

from typing import Any

import attrs
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.decoder import FrameDecoder
from cluster.frames import LinkError, RaftFrame, encode
from cluster.raft import AddVoter, ChangeEntry, RemoveVoter
from cluster.raft import messages as m
from cluster.replication.wire import MAX_NAME, MAX_NONCE, MAX_SNAPSHOT, SnapshotPart, pack, unpack

NAME = st.text(min_size=1, max_size=12)
INDEX = st.integers(0, 2**63 - 1)
NONCE = st.just(0) | st.integers(1, MAX_NONCE)
"""A recovery field: absent (0), or a recovery's nonce."""
CHANGE = st.builds(
    ChangeEntry,
    st.builds(AddVoter, NAME) | st.builds(RemoveVoter, NAME),
    st.frozensets(NAME, max_size=5),
).map(ChangeEntry.encode)
ENTRY = st.tuples(
    INDEX, st.binary(max_size=30), st.sampled_from([m.EntryKind.COMMAND, m.EntryKind.NOOP])
)
ENTRY |= st.tuples(INDEX, CHANGE, st.just(m.EntryKind.CONFIG))


@st.composite
def appends(draw: st.DrawFn) -> m.AppendEntries:
    prev = draw(st.integers(0, 2**40))
    datas = draw(st.lists(ENTRY, max_size=5))
    entries = tuple(m.Entry(prev + 1 + i, t, d, k) for i, (t, d, k) in enumerate(datas))
    return m.AppendEntries(
        sender=draw(NAME), to=draw(NAME), term=draw(INDEX), prev_index=prev,
        prev_term=draw(INDEX), entries=entries, commit=draw(INDEX),
    )  # fmt: skip


MESSAGES = st.one_of(
    appends(),
    st.builds(m.VoteRequest, sender=NAME, to=NAME, term=INDEX, last_index=INDEX, last_term=INDEX,
              pre=st.booleans(), transfer=st.booleans(), recovering=NONCE),
    st.builds(m.VoteResponse, sender=NAME, to=NAME, term=INDEX, granted=st.booleans(),
              pre=st.booleans()),
    st.builds(m.AppendResponse, sender=NAME, to=NAME, term=INDEX, index=INDEX,
              reject=st.booleans(), hint_index=INDEX, hint_term=INDEX, recovering=NONCE,
              recovered=NONCE),
    st.builds(m.Heartbeat, sender=NAME, to=NAME, term=INDEX, commit=INDEX, read_seq=INDEX,
              recovered=NONCE),
    st.builds(m.HeartbeatResponse, sender=NAME, to=NAME, term=INDEX, read_seq=INDEX,
              recovering=NONCE, recovered=NONCE),
    st.builds(m.InstallSnapshot, sender=NAME, to=NAME, term=INDEX,
              snapshot=st.builds(m.Snapshot, INDEX, INDEX, st.frozensets(NAME, max_size=5),
                                 st.binary(max_size=50))),
    st.builds(m.TimeoutNow, sender=NAME, to=NAME, term=INDEX),
    st.builds(lambda head, data, offset, extra: SnapshotPart(
        **head, offset=offset, total=offset + len(data) + extra, data=data),
        st.fixed_dictionaries({"sender": NAME, "to": NAME, "term": INDEX, "index": INDEX,
                               "snap_term": INDEX, "voters": st.frozensets(NAME, max_size=5)}),
        st.binary(min_size=1, max_size=50), st.integers(0, MAX_SNAPSHOT - 2**21),
        st.integers(0, 2**20)),
)  # fmt: skip
GROUP = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", fullmatch=True)


def decoded(data: bytes) -> list[Any]:
    decoder = FrameDecoder(1 << 20)
    decoder.open()
    decoder.receive_data(data)
    return list(decoder.frames())


@given(group=GROUP, message=MESSAGES)
def test_every_message_survives_the_frame_codec(group: str, message: m.Message | SnapshotPart) -> None:
    assert decoded(encode(RaftFrame(group, message))) == [RaftFrame(group, message)]


VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=10)
    | st.binary(max_size=10) | st.floats(),
    lambda inner: st.lists(inner, max_size=9),
    max_leaves=20,
)  # fmt: skip


@given(message=MESSAGES, position=st.integers(0, 8), value=VALUE)
def test_a_field_of_the_wrong_kind_is_a_link_error(
    message: m.Message | SnapshotPart, position: int, value: Any
) -> None:
    fields = pack(message)
    position %= len(fields)
    fields[position] = value
    try:
        again = unpack(msgpack.unpackb(msgpack.packb(fields, use_bin_type=True), raw=False))
    except LinkError:
        return
    assert type(again) is type(message)  # (the value happened to fit)


@given(fields=st.lists(VALUE, max_size=10))
def test_anything_else_is_a_link_error_or_a_message(fields: list[Any]) -> None:
    try:
        message = unpack(fields)
    except LinkError:
        return
    assert isinstance(message, m.AppendEntries | m.Heartbeat | m.VoteRequest | m.TimeoutNow
                      | m.VoteResponse | m.AppendResponse | m.HeartbeatResponse
                      | m.InstallSnapshot | SnapshotPart)  # fmt: skip


def test_bounds_are_enforced() -> None:
    beat = m.Heartbeat(sender="a", to="b", term=1, commit=0)
    with pytest.raises(LinkError):
        unpack(pack(attrs.evolve(beat, sender="x" * (MAX_NAME + 1))))
    with pytest.raises(LinkError):
        unpack(pack(attrs.evolve(beat, sender="")))
    bad = pack(beat)
    bad[3] = -1
    with pytest.raises(LinkError):
        unpack(bad)
    gap = m.AppendEntries(sender="a", to="b", term=1, prev_index=5, prev_term=1,
                          entries=(m.Entry(7, 1),), commit=0)  # fmt: skip
    with pytest.raises(LinkError, match="out of sequence"):
        unpack(pack(gap))
    with pytest.raises(LinkError):
        decoded(msgpack.packb(["RAFT", "../etc", pack(beat)], use_bin_type=True))
    for data in (b"", b"[]", b'{"op":"add","node":1,"voters":[]}', b'{"op":"x","node":"a","voters":[]}'):
        change = attrs.evolve(gap, prev_index=6, entries=(m.Entry(7, 1, data, m.EntryKind.CONFIG),))
        with pytest.raises(LinkError):
            unpack(pack(change))


def test_recovery_fields_are_sent_only_when_set_and_bounded() -> None:
    """Nodes of an earlier version send (and understand) messages without them."""
    beaten = m.HeartbeatResponse(sender="a", to="b", term=1, read_seq=0)
    assert pack(beaten) == ["BEATEN", "a", "b", 1, 0]
    assert unpack(pack(beaten)) == beaten
    recovering = attrs.evolve(beaten, recovering=7)
    assert pack(recovering) == ["BEATEN", "a", "b", 1, 0, 7]
    assert unpack(pack(recovering)) == recovering
    for nonce in (0, -1, MAX_NONCE + 1, True):
        with pytest.raises(LinkError):
            unpack(["BEATEN", "a", "b", 1, 0, nonce])
    over = attrs.evolve(beaten, recovered=7)
    assert pack(over) == ["BEATEN", "a", "b", 1, 0, 0, 7]
    assert unpack(pack(over)) == over
    for nonce in (0, -1, MAX_NONCE + 1, True):
        with pytest.raises(LinkError):
            unpack(["BEATEN", "a", "b", 1, 0, 0, nonce])
