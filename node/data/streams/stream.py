"""A Redis stream: its entries (``node.data.streams.entries``), consumer groups, XADD IDs and XSETID.

The groups hold their own state and read the entries through ``Entries``; this class ties them to one
key, with the memory they hold together and Redis's exact checks of the IDs XADD and XSETID are given.
"""

from __future__ import annotations

from node.data.streams.entries import Entries
from node.data.streams.groups import ConsumerGroup, GroupInfo
from node.data.streams.ids import (
    INVALID_ID,
    MAX_ID_ARG,
    XADD_EXHAUSTED,
    XADD_TOO_SMALL,
    XADD_ZERO,
    XSETID_BELOW_GIVEN_MAX_DELETED,
    XSETID_BELOW_MAX_DELETED,
    XSETID_ENTRIES_ADDED,
    XSETID_TOO_SMALL,
    IdParts,
    StreamError,
    is_max,
    next_id,
    parse_id,
    split_id,
)
from node.integers import string2ull

__all__ = ["Stream", "check_setid_args", "group_infos", "parse_add_id"]


class Stream(Entries):
    """One stream key's entries, counters and consumer groups (the groups hold their own state)."""

    def __init__(self, node_max_entries: int = 100, node_max_bytes: int = 4096) -> None:
        super().__init__(node_max_entries, node_max_bytes)
        self.groups: dict[bytes, ConsumerGroup] = {}

    def copy(self) -> Stream:
        """An independent stream in the same state: entries, counters and groups (COPY)."""
        twin = Stream(self.node_max_entries, self.node_max_bytes)
        self.copy_entries(twin)
        for name, group in self.groups.items():
            twin.groups[name] = group.copy()
        return twin

    def memory_usage(self) -> int:
        """Bytes held by this stream: its entries (``entries_memory``) and consumer groups."""
        total = self.entries_memory()
        for group in self.groups.values():
            total += group.memory_usage()
        return total

    def set_id(
        self, last_id: int, entries_added: int | None = None, max_deleted_id: int | None = None
    ) -> None:
        """XSETID, with its checks in Redis's order (``check_setid_args`` runs first, before the key)."""
        check_setid_args(last_id, max_deleted_id)
        if last_id < self.max_deleted_id:
            raise StreamError(XSETID_BELOW_MAX_DELETED)
        if self.length:
            last_entry = self.last_entry()
            assert last_entry is not None
            if last_id < last_entry[0]:
                raise StreamError(XSETID_TOO_SMALL)
            if entries_added is not None and self.length > entries_added:
                raise StreamError(XSETID_ENTRIES_ADDED)
        self.last_id = last_id
        if entries_added is not None:
            self.entries_added = entries_added
        if max_deleted_id:
            self.max_deleted_id = max_deleted_id

    # ----------------------------------------------------------------- groups

    def create_group(self, name: bytes, last_id: int, entries_read: int | None) -> bool:
        """XGROUP CREATE; False when the name is taken (BUSYGROUP)."""
        if name in self.groups:
            return False
        self.groups[name] = ConsumerGroup(name, last_id, entries_read)
        return True

    def destroy_group(self, name: bytes) -> bool:
        return self.groups.pop(name, None) is not None


def group_infos(stream: Stream) -> list[GroupInfo]:
    """XINFO GROUPS rows in Redis's order (byte order of group names)."""
    return [group.info(stream) for _, group in sorted(stream.groups.items())]


def check_setid_args(last_id: int, max_deleted_id: int | None) -> None:
    """XSETID's argument check, which Redis makes before looking the key up."""
    if max_deleted_id is not None and last_id < max_deleted_id:
        raise StreamError(XSETID_BELOW_GIVEN_MAX_DELETED)


def parse_add_id(arg: bytes, stream: Stream | None, now: int) -> IdParts:
    """The ID XADD will use for ``arg`` (``*``, ``ms-*``, ``ms`` or ``ms-seq``) on ``stream``.

    Raises the errors of XADD in Redis's order: an invalid ID, then ``0-0``, then an exhausted stream,
    then an ID not above the top item. (WRONGTYPE sits between ``0-0`` and the rest in Redis; that is
    the caller's.)
    """
    last = (0, 0) if stream is None else stream.last
    exhausted = stream is not None and stream.exhausted()
    if len(arg) <= MAX_ID_ARG and 0 in arg:  # the C string ends at the first NUL (see ``ids``)
        arg = arg.split(b"\0", 1)[0]
    if arg == b"*":
        if exhausted:
            raise StreamError(XADD_EXHAUSTED)
        return next_id(last, now)
    last_ms, last_seq = last
    if arg.endswith(b"-*") and len(arg) <= MAX_ID_ARG:
        ms = string2ull(arg[:-2])
        if ms is None or arg.find(b"-", 0, -2) >= 0:
            raise StreamError(INVALID_ID)
        if exhausted:
            raise StreamError(XADD_EXHAUSTED)
        if ms == last_ms:
            if is_max(last_seq):
                raise StreamError(XADD_TOO_SMALL)
            return ms, last_seq + 1
        seq = 0
    else:
        ms, seq = split_id(parse_id(arg))
        if ms == seq == 0:
            raise StreamError(XADD_ZERO)
        if exhausted:
            raise StreamError(XADD_EXHAUSTED)
    if ms < last_ms or (ms == last_ms and seq <= last_seq):
        raise StreamError(XADD_TOO_SMALL)
    return ms, seq
