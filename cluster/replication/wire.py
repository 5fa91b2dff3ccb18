"""Raft messages as msgpack values, and back, checked field by field (the RAFT frame's payload).

A ``RAFT group message`` frame (``cluster.frames``) carries one ``cluster.raft`` message for one
replica group between two route peers. ``pack`` turns a message into a msgpack-ready array whose
first element names its type; ``unpack`` takes whatever msgpack decoded from a peer and returns the
typed message or raises ``LinkError``: wrong types, unknown message types, names or counts past
their bounds, negative indexes or terms. Sizes are bounded twice: the frame decoder's limits bound
every string and binary before it is allocated, and here names, entry counts and voter sets are
bounded again to what a group may hold.

Message layouts (after the type name): ``sender to term`` and then

* ``VOTE last_index last_term pre transfer [recovering]`` / ``VOTED granted pre``
* ``APPEND prev_index prev_term [[index term kind data], ...] commit`` (a membership change
  entry's data must decode as a ``ChangeEntry`` within the voter bounds)
* ``APPENDED index reject hint_index hint_term [recovering [recovered]]``
* ``BEAT commit read_seq [recovered]`` / ``BEATEN read_seq [recovering [recovered]]`` / ``TIMEOUT``

(The bracketed fields are ``cluster.raft.recovery``'s, sent only when set: a recovery's nonce,
1 to ``MAX_NONCE``; an answer's ``recovering`` is 0 when only ``recovered`` is set.)
* ``SNAP index term [voter, ...] data``
* ``PART index term [voter, ...] total offset data``: a piece of a snapshot too large for one frame
  (``SnapshotPart``: the ``total`` bytes of its data from ``offset`` on, ``cluster.replication.
  transfer`` sends and joins them); not a Raft message, so the core never sees one.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from cluster.checks import LinkError, array, blob, integer, text
from cluster.raft.membership import ChangeEntry
from cluster.raft.messages import (
    AppendEntries,
    AppendResponse,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    Snapshot,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)

__all__ = [
    "GROUP_NAME",
    "MAX_ENTRIES",
    "MAX_NAME",
    "MAX_SNAPSHOT",
    "MAX_VOTERS",
    "SnapshotPart",
    "check_group",
    "pack",
    "unpack",
]

MAX_NAME = 256
"""The longest node name a message may carry (a server name)."""
MAX_VOTERS = 64
MAX_ENTRIES = 4096
"""Entries one APPEND may carry (the sender's ``max_entries_per_append`` is far below)."""
MAX_INDEX = (1 << 63) - 1
MAX_NONCE = (1 << 62) - 1
"""A recovery's nonce (``cluster.raft.recovery.new_recovery``) at most."""
GROUP_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
"""A replica group's name: also its directory's name under the node's store."""
MAX_SNAPSHOT = 1 << 36
"""The largest snapshot a peer may announce in parts (what is held grows only with parts that came)."""
_KINDS = {EntryKind.COMMAND: 0, EntryKind.NOOP: 1, EntryKind.CONFIG: 2}


@attrs.frozen(kw_only=True)
class SnapshotPart:
    """``data`` is the snapshot's data from ``offset`` on, of ``total`` bytes in all."""

    sender: str
    to: str
    term: int
    index: int
    snap_term: int
    voters: frozenset[str]
    total: int
    offset: int
    data: bytes


_KIND_OF = {code: kind for kind, code in _KINDS.items()}


def check_group(value: Any) -> str:
    name = text(value, 64)
    if not GROUP_NAME.fullmatch(name):
        raise LinkError(f"bad group name {name[:64]!r}")
    return name


def _entry(entry: Entry) -> list[Any]:
    return [entry.index, entry.term, _KINDS[entry.kind], entry.data]


def pack(message: Message | SnapshotPart) -> list[Any]:
    """``message`` as a msgpack-ready array."""
    head = [message.sender, message.to, message.term]
    if isinstance(message, SnapshotPart):
        return ["PART", *head, message.index, message.snap_term, sorted(message.voters),
                message.total, message.offset, message.data]  # fmt: skip
    if isinstance(message, AppendEntries):
        entries = [_entry(e) for e in message.entries]
        return ["APPEND", *head, message.prev_index, message.prev_term, entries, message.commit]
    if isinstance(message, AppendResponse):
        return ["APPENDED", *head, message.index, message.reject, message.hint_index,
                message.hint_term, *_answer_recovery(message)]  # fmt: skip
    if isinstance(message, Heartbeat):
        return ["BEAT", *head, message.commit, message.read_seq, *_recovery(message.recovered)]
    if isinstance(message, HeartbeatResponse):
        return ["BEATEN", *head, message.read_seq, *_answer_recovery(message)]
    if isinstance(message, VoteRequest):
        return ["VOTE", *head, message.last_index, message.last_term, message.pre, message.transfer,
                *_recovery(message.recovering)]  # fmt: skip
    if isinstance(message, VoteResponse):
        return ["VOTED", *head, message.granted, message.pre]
    if isinstance(message, InstallSnapshot):
        snap = message.snapshot
        return ["SNAP", *head, snap.index, snap.term, sorted(snap.voters), snap.data]
    return ["TIMEOUT", *head]


def _recovery(value: int) -> list[int]:
    """A recovery field (``cluster.raft.recovery``) is sent only when set, so that nodes of an
    earlier version, which know messages without it, keep understanding the others."""
    return [value] if value else []


def _answer_recovery(message: AppendResponse | HeartbeatResponse) -> list[int]:
    """An answer's recovery fields: none, ``recovering``, or both (``recovering`` 0 if over)."""
    if message.recovered:
        return [message.recovering, message.recovered]
    return _recovery(message.recovering)


def _answered_recovery(obj: list[Any], position: int) -> tuple[int, int]:
    """An answer's (``recovering``, ``recovered``) from ``position`` on (0 for those not sent)."""
    if len(obj) > position + 1:
        return integer(obj[position], 0, MAX_NONCE), _nonce(obj, position + 1)
    return _nonce(obj, position), 0


def _nonce(obj: list[Any], position: int) -> int:
    """The optional recovery nonce at ``position`` (0 if the message ends before it)."""
    return integer(obj[position], 1, MAX_NONCE) if len(obj) > position else 0


def _index(value: Any) -> int:
    return integer(value, 0, MAX_INDEX)


def _flag(value: Any) -> bool:
    if type(value) is not bool:
        raise LinkError(f"expected a boolean, got {type(value).__name__}")
    return value


def _name(value: Any) -> str:
    name = text(value, MAX_NAME)
    if not name:
        raise LinkError("an empty node name")
    return name


def _unpack_entry(value: Any) -> Entry:
    fields = array(value, 4)
    if len(fields) != 4:
        raise LinkError("bad log entry")
    kind = _KIND_OF.get(integer(fields[2], 0, len(_KINDS) - 1))
    assert kind is not None
    data = blob(fields[3])
    if kind is EntryKind.CONFIG:
        try:
            change = ChangeEntry.decode(data)
        except ValueError as error:
            raise LinkError(str(error)) from None
        if len(change.voters) > MAX_VOTERS or any(len(v) > MAX_NAME for v in change.voters):
            raise LinkError("a membership change past its bounds")
    return Entry(_index(fields[0]), _index(fields[1]), data, kind)


def unpack(value: Any) -> Message | SnapshotPart:
    """The message a peer sent, checked.

    Raises:
        LinkError: it is not a well-formed message.
    """
    obj = array(value, 16)
    if len(obj) < 4:
        raise LinkError("a Raft message too short")
    op, n = obj[0], len(obj)
    sender, to, term = _name(obj[1]), _name(obj[2]), _index(obj[3])
    if op == "APPEND" and n == 8:
        entries = tuple([_unpack_entry(e) for e in array(obj[6], MAX_ENTRIES)])
        prev_index = _index(obj[4])
        if any(e.index != prev_index + 1 + i for i, e in enumerate(entries)):
            raise LinkError("APPEND entries out of sequence")
        return AppendEntries(
            sender=sender, to=to, term=term, prev_index=prev_index, prev_term=_index(obj[5]),
            entries=entries, commit=_index(obj[7]),
        )  # fmt: skip
    if op == "APPENDED" and n in (8, 9, 10):
        recovering, recovered = _answered_recovery(obj, 8)
        return AppendResponse(
            sender=sender, to=to, term=term, index=_index(obj[4]), reject=_flag(obj[5]),
            hint_index=_index(obj[6]), hint_term=_index(obj[7]), recovering=recovering,
            recovered=recovered,
        )  # fmt: skip
    if op == "BEAT" and n in (6, 7):
        return Heartbeat(
            sender=sender, to=to, term=term, commit=_index(obj[4]), read_seq=_index(obj[5]),
            recovered=_nonce(obj, 6),
        )  # fmt: skip
    if op == "BEATEN" and n in (5, 6, 7):
        recovering, recovered = _answered_recovery(obj, 5)
        return HeartbeatResponse(
            sender=sender, to=to, term=term, read_seq=_index(obj[4]), recovering=recovering,
            recovered=recovered,
        )  # fmt: skip
    if op == "VOTE" and n in (8, 9):
        return VoteRequest(
            sender=sender, to=to, term=term, last_index=_index(obj[4]), last_term=_index(obj[5]),
            pre=_flag(obj[6]), transfer=_flag(obj[7]), recovering=_nonce(obj, 8),
        )  # fmt: skip
    if op == "VOTED" and n == 6:
        return VoteResponse(sender=sender, to=to, term=term, granted=_flag(obj[4]), pre=_flag(obj[5]))
    if op == "SNAP" and n == 8:
        voters = frozenset([_name(v) for v in array(obj[6], MAX_VOTERS)])
        snapshot = Snapshot(_index(obj[4]), _index(obj[5]), voters, blob(obj[7]))
        return InstallSnapshot(sender=sender, to=to, term=term, snapshot=snapshot)
    if op == "PART" and n == 10:
        total, offset, data = integer(obj[7], 1, MAX_SNAPSHOT), _index(obj[8]), blob(obj[9])
        if not data or offset + len(data) > total:
            raise LinkError("a snapshot part outside its snapshot")
        voters = frozenset([_name(v) for v in array(obj[6], MAX_VOTERS)])
        return SnapshotPart(
            sender=sender, to=to, term=term, index=_index(obj[4]), snap_term=_index(obj[5]),
            voters=voters, total=total, offset=offset, data=data,
        )  # fmt: skip
    if op == "TIMEOUT" and n == 4:
        return TimeoutNow(sender=sender, to=to, term=term)
    raise LinkError(f"unknown or malformed Raft message {str(op)[:16]!r}/{n}")
