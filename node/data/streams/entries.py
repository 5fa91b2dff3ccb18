"""A Redis stream's entries held in compact blocks, with Redis's exact trimming and deletion.

Entries live in blocks (Redis's listpack nodes): per block a first ("master") ID, the master entry's
field names, the entries' ms deltas and sequence numbers in ``array``s, one byte of flags per entry, and
the values packed into one byte string with per-entry offsets. An entry whose field names equal the
master fields stores only its values. So a stream holds a handful of Python objects per block and none
per entry.

Blocks are kept in ID order in a list, with a parallel sorted list of first IDs for bisection. A new
block starts when the tail one holds ``node_max_entries`` entries (deleted ones count) or its encoded
size would reach ``node_max_bytes``. XDEL only flags entries and frees a block when its last live entry
goes; trimming removes whole blocks from the head and, when exact, flags entries inside the first block
it cannot remove.

The memory the entries hold is what ``sys.getsizeof`` says of their parts once sealed (object headers
included, growth slack not), worked out from their lengths: a block's is counted once, when it stops
being the tail (sealed blocks do not change size), so ``entries_memory`` costs a few additions whatever
the stream's length.

``Entries`` is the storage and its counters; ``node.data.streams.stream.Stream`` adds the consumer
groups (which read entries through this class) and XSETID.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from typing import Final, Literal

import attrs

from node.data.streams.ids import MAX_ID, SMALL, U64, IdParts, is_max, make_id
from node.integers import string2ll

__all__ = ["Entries", "Entry", "Trim"]

Entry = tuple[int, list[bytes]]

_DELETED: Final = 1
_SAMEFIELDS: Final = 2
_WIDE: Final = 0xFFFFFFFF
# Redis caps a node at 1 GB whatever stream-node-max-bytes says.
_MAX_NODE_BYTES: Final = 1 << 30
# A listpack's own header and end byte, and its master entry's terminator.
_LP_HEADER: Final = 7 + 2
_INT_START: Final = frozenset(b"-0123456789")  # first bytes of a candidate integer
# What sys.getsizeof says of the containers a sealed block holds, less their items.
_ARRAY: Final = sys.getsizeof(array("I"))
_BYTEARRAY: Final = sys.getsizeof(bytearray(b"x")) - 1
_BYTES: Final = sys.getsizeof(b"")
_LIST: Final = sys.getsizeof([])
# (Called unbound: compiled, ``arr.append(x)`` looks the method up by name at every call.)
_append_int: Final = array.append
_append_byte: Final = bytearray.append


@attrs.frozen
class Trim:
    """A trimming request of XADD/XTRIM, or of a stream that captures subjects.

    ``threshold`` is a count for ``maxlen``, an ID for ``minid`` and bytes for ``maxbytes`` (what
    the entries hold, ``Entries.entries_memory``: no command asks for that one, and it always goes
    a block at a time, the newest block kept). ``limit`` only applies when ``approximate`` (Redis
    refuses LIMIT without ``~``): None means Redis's default of 100 * node_max_entries, 0 means
    unlimited.
    """

    strategy: Literal["maxlen", "minid", "maxbytes"]
    threshold: int
    approximate: bool = False
    limit: int | None = None


class _Block:
    __slots__ = (
        "data", "fields", "first", "first_ms", "first_seq", "fixed", "flags", "held", "live", "ms",
        "names", "offsets", "seq", "size",
    )  # fmt: skip

    def __init__(self, first: IdParts, fields: tuple[bytes, ...]) -> None:
        self.first_ms, self.first_seq = first
        self.first = make_id(self.first_ms, self.first_seq)
        self.fields = fields
        self.ms = array("I")  # ms - first's ms; widened to "Q" when needed
        self.seq = array("I")  # absolute sequence numbers; widened to "Q" when needed
        self.offsets = array("I")  # start of each entry in data; widened to "Q" when needed
        self.flags = bytearray()
        self.data: bytearray | bytes = bytearray()
        self.live = 0
        # bytes as Redis's listpack would count them, but for the live/deleted counters (see _full)
        self.size = _LP_HEADER + _lp_int(len(fields)) + sum(map(_lp_string, fields))
        # (the first ID's halves are in the block's own size: a compiled build holds them unboxed;
        # not compiled, they are two ints more, left uncounted. The int of the whole ID is the one
        # ``Entries._firsts`` holds too.)
        self.fixed = sys.getsizeof(self) + sys.getsizeof(self.first)
        self.held = 0
        """Its ``footprint`` once sealed (0: the tail, worked out when asked)."""
        self.names = 0
        """Bytes of ``fields`` when this block is the first of those sharing it (else 0)."""

    def ids(self) -> list[int]:
        base = self.first_ms
        return [((base + m) << 64) | s for m, s in zip(self.ms, self.seq, strict=True)]

    def last_id(self) -> int:
        return ((self.first_ms + self.ms[-1]) << 64) | self.seq[-1]

    def index(self, entry_id: int) -> int | None:
        """Position of ``entry_id`` in this block if present (deleted or not)."""
        base = self.first_ms
        ms, seq = self.ms, self.seq
        j = bisect_left(range(len(ms)), entry_id, key=lambda k: ((base + ms[k]) << 64) | seq[k])
        if j < len(ms) and ((base + ms[j]) << 64) | seq[j] == entry_id:
            return j
        return None

    def pairs(self, j: int) -> list[bytes]:
        data = self.data
        start = self.offsets[j]
        end = self.offsets[j + 1] if j + 1 < len(self.offsets) else len(data)
        items = _decode(data, start, end)
        if not self.flags[j] & _SAMEFIELDS:
            return items
        out: list[bytes] = []
        for field, value in zip(self.fields, items, strict=True):
            out.append(field)
            out.append(value)
        return out

    def seal(self) -> None:
        """Drop growth slack once the block stops being the tail, as Redis shrinks a full listpack."""
        self.ms = array(self.ms.typecode, self.ms)
        self.seq = array(self.seq.typecode, self.seq)
        self.offsets = array(self.offsets.typecode, self.offsets)
        self.flags = bytearray(self.flags)
        self.data = bytes(self.data)

    def copy(self) -> _Block:
        """An independent block with the same entries, deleted ones and counts included."""
        twin = _Block((self.first_ms, self.first_seq), self.fields)
        twin.ms = array(self.ms.typecode, self.ms)
        twin.seq = array(self.seq.typecode, self.seq)
        twin.offsets = array(self.offsets.typecode, self.offsets)
        twin.flags = bytearray(self.flags)
        twin.data = self.data if isinstance(self.data, bytes) else bytearray(self.data)
        twin.live, twin.size, twin.fixed = self.live, self.size, self.fixed
        twin.held, twin.names = self.held, self.names
        return twin

    def footprint(self) -> int:
        """Bytes the block and its parts hold once sealed, as ``sys.getsizeof`` counts them (field
        names apart): the tail's growth slack is not counted."""
        n = len(self.flags)
        per_entry = self.ms.itemsize + self.seq.itemsize + self.offsets.itemsize + 1
        return self.fixed + 3 * _ARRAY + _BYTEARRAY + _BYTES + n * per_entry + len(self.data)


def _names_size(fields: tuple[bytes, ...]) -> int:
    return sys.getsizeof(fields) + sum(sys.getsizeof(f) for f in fields)


def _lp_int(value: int) -> int:
    """Bytes of an integer element in a listpack (encoding and back-length)."""
    if 0 <= value < 128:
        return 2
    if -4096 <= value < 4096:
        return 3
    if -(1 << 15) <= value < 1 << 15:
        return 4
    if -(1 << 23) <= value < 1 << 23:
        return 5
    if -(1 << 31) <= value < 1 << 31:
        return 6
    return 10


def _lp_string(item: bytes) -> int:
    """Bytes of a string element in a listpack, which stores canonical integers as integers."""
    n = len(item)
    if 0 < n <= 20 and item[0] in _INT_START:
        value = string2ll(item)
        if value is not None:
            return _lp_int(value)
    size = n + (1 if n < 64 else 2 if n < 4096 else 5)
    return size + (1 if size < 128 else 2 if size < 16383 else 3 if size < 2097151 else 4)


def _int64(delta: int) -> int:
    """The difference of two sequence numbers as the int64 a listpack holds (it wraps)."""
    if -SMALL <= delta < SMALL:
        return delta
    delta &= U64
    return delta - (1 << 64) if delta >> 63 else delta


def _push(arr: array[int], value: int) -> array[int]:
    if value > _WIDE and arr.typecode == "I":
        arr = array("Q", arr)
    _append_int(arr, value)
    return arr


def _encode(out: bytearray, items: list[bytes], start: int = 0, step: int = 1) -> int:
    """Append ``items[start::step]``, each with a LEB128 length prefix; return their size in a
    listpack (``_lp_string``), which the block's size counts."""
    size = 0
    i, end = start, len(items)
    while i < end:  # (not a range with a variable step: compiled, that is a range object)
        item = items[i]
        i += step
        size += _lp_string(item)
        n = len(item)
        while n >= 0x80:
            _append_byte(out, (n & 0x7F) | 0x80)
            n >>= 7
        _append_byte(out, n)
        out += item
    return size


def _same_fields(fields: tuple[bytes, ...], pairs: list[bytes]) -> bool:
    """Whether the field names of ``pairs`` (field, value, ...) are ``fields``."""
    if len(pairs) != 2 * len(fields):
        return False
    return all(pairs[2 * k] == field for k, field in enumerate(fields))


def _decode(data: bytearray | bytes, pos: int, end: int) -> list[bytes]:
    out: list[bytes] = []
    while pos < end:
        n = data[pos]
        pos += 1
        if n & 0x80:
            n &= 0x7F
            shift = 7
            while True:
                b = data[pos]
                pos += 1
                n |= (b & 0x7F) << shift
                if not b & 0x80:
                    break
                shift += 7
        out.append(bytes(data[pos : pos + n]))
        pos += n
    return out


class Entries:
    """One stream's entries and counters: what XADD, XDEL, XTRIM and the reads work on."""

    def __init__(self, node_max_entries: int = 100, node_max_bytes: int = 4096) -> None:
        self.node_max_entries = node_max_entries
        self.node_max_bytes = node_max_bytes
        self.length = 0
        self._last_ms = 0
        self._last_seq = 0
        self.max_deleted_id = 0
        self.entries_added = 0
        self._first_id = 0
        self._blocks: list[_Block] = []
        self._firsts: list[int] = []
        self._held = 0
        """Bytes of the sealed blocks (``_Block.held``) and of every block's ``names``."""

    def copy_entries(self, twin: Entries) -> None:
        """Give ``twin`` (a new, empty stream) these entries and counters, block for block, as
        COPY duplicates a stream."""
        twin.node_max_entries, twin.node_max_bytes = self.node_max_entries, self.node_max_bytes
        twin.length, twin._last_ms, twin._last_seq = self.length, self._last_ms, self._last_seq
        twin.max_deleted_id, twin.entries_added = self.max_deleted_id, self.entries_added
        twin._first_id = self._first_id
        twin._blocks = [block.copy() for block in self._blocks]
        twin._firsts = list(self._firsts)
        twin._held = self._held

    # ----------------------------------------------------------------- introspection

    @property
    def last_id(self) -> int:
        """The ID of the last entry added (or set by XSETID), 0 while none was."""
        return make_id(self._last_ms, self._last_seq)

    @last_id.setter
    def last_id(self, value: int) -> None:
        self._last_ms, self._last_seq = value >> 64, value & U64

    @property
    def last(self) -> IdParts:
        """``last_id`` as its halves."""
        return self._last_ms, self._last_seq

    def exhausted(self) -> bool:
        """Whether ``last_id`` is the largest ID (no entry can be added after it)."""
        return is_max(self._last_seq) and is_max(self._last_ms)

    @property
    def first_id(self) -> int:
        """The first live entry's ID (Redis's recorded-first-entry-id), 0 when empty."""
        return self._first_id

    @property
    def node_count(self) -> int:
        return len(self._blocks)

    def entries_memory(self) -> int:
        """Bytes held by the stream object and its entries (field names shared by blocks counted
        once), Python object headers included. Costs the same however long the stream is."""
        blocks = self._blocks
        total = sys.getsizeof(self) + 2 * _LIST + 16 * len(blocks) + self._held
        if blocks and not blocks[-1].held:
            total += blocks[-1].footprint()
        return total

    def _seal(self, block: _Block) -> None:
        """``block`` stops being the tail: shrink it and measure it once for all."""
        block.seal()
        self._held -= block.held
        block.held = block.footprint()
        self._held += block.held

    def _drop(self, start: int, stop: int) -> None:
        """Remove ``_blocks[start:stop]``; a block left first of those sharing its field names
        takes over counting them."""
        blocks = self._blocks
        for i in range(start, stop):
            self._held -= blocks[i].held + blocks[i].names
        del blocks[start:stop]
        del self._firsts[start:stop]
        if start < len(blocks):
            block = blocks[start]
            if not block.names and (start == 0 or blocks[start - 1].fields is not block.fields):
                block.names = _names_size(block.fields)
                self._held += block.names

    # ----------------------------------------------------------------- writing

    def add(self, new: IdParts, pairs: list[bytes]) -> None:
        """Append an entry as ``new``; the caller has checked it is above ``last_id``
        (``parse_add_id``)."""
        ms, seq = new
        block = self._blocks[-1] if self._blocks else None
        if block is not None and self._full(block, pairs):
            self._seal(block)
            block = None
        if block is None:
            last = self._blocks[-1].fields if self._blocks else None
            # (equal master fields are shared between blocks)
            fields = last if last is not None and _same_fields(last, pairs) else tuple(pairs[0::2])
            block = _Block(new, fields)
            if fields is not last:
                block.names = _names_size(fields)
                self._held += block.names
            self._blocks.append(block)
            self._firsts.append(block.first)
        elif isinstance(block.data, bytes):
            # (the tail again after its successor was freed: it grows, so it is measured when asked)
            self._held -= block.held
            block.held = 0
            block.data = bytearray(block.data)
        data = block.data
        assert isinstance(data, bytearray)
        flags = 0
        start = len(data)
        ms_delta = ms - block.first_ms
        # flags, the two ID deltas, the element count and the field count if any, as in a listpack
        size = 2 + _lp_int(ms_delta) + _lp_int(_int64(seq - block.first_seq))
        if _same_fields(block.fields, pairs):
            flags = _SAMEFIELDS
            size += _lp_int(len(pairs) // 2 + 3) + _encode(data, pairs, 1, 2)
        else:
            size += _lp_int(len(pairs) // 2) + _lp_int(len(pairs) + 4) + _encode(data, pairs)
        block.ms = _push(block.ms, ms_delta)
        block.seq = _push(block.seq, seq)
        block.offsets = _push(block.offsets, start)
        _append_byte(block.flags, flags)
        block.live += 1
        block.size += size
        self.length += 1
        self.entries_added += 1
        self._last_ms, self._last_seq = ms, seq
        if self.length == 1:
            self._first_id = make_id(ms, seq)

    def _full(self, block: _Block, pairs: list[bytes]) -> bool:
        max_bytes = self.node_max_bytes
        if max_bytes <= 0 or max_bytes > _MAX_NODE_BYTES:
            max_bytes = _MAX_NODE_BYTES
        deleted = len(block.flags) - block.live
        adding = 0
        for item in pairs:
            adding += len(item)
        if block.size + _lp_int(block.live) + _lp_int(deleted) + adding >= max_bytes:
            return True
        return bool(self.node_max_entries) and len(block.flags) >= self.node_max_entries

    def delete(self, ids: Iterable[int]) -> int:
        """XDEL: flag entries deleted, free blocks left without live entries; returns how many went."""
        deleted = 0
        first_hit = False
        for entry_id in ids:
            i = bisect_right(self._firsts, entry_id) - 1
            if i < 0:
                continue
            block = self._blocks[i]
            j = block.index(entry_id)
            if j is None or block.flags[j] & _DELETED:
                continue
            if block.live == 1:
                self._drop(i, i + 1)
            else:
                block.flags[j] |= _DELETED
                block.live -= 1
            self.length -= 1
            deleted += 1
            first_hit = first_hit or entry_id == self._first_id
            self.max_deleted_id = max(self.max_deleted_id, entry_id)
        if deleted:
            if self.length == 0:
                self._first_id = 0
            elif first_hit:
                self._first_id = self._scan_first()
        return deleted

    def trim(self, trim: Trim) -> int:
        """XTRIM / XADD trimming (or ``maxbytes``, see ``Trim``); returns the number of entries
        removed.

        Whole blocks go from the head while the strategy allows it; ``approximate`` stops at the first
        block that cannot go entirely, exact trimming flags entries inside that block. A limit
        (approximate only) stops before a block whose live entries would take the count of removed
        entries past it.
        """
        if trim.strategy == "maxbytes":
            return self._trim_bytes(trim.threshold)
        if trim.approximate:
            limit = trim.limit
            if limit is None:
                limit = 100 * self.node_max_entries
                limit = 10000 if limit <= 0 else min(limit, 1_000_000)
        else:
            limit = 0
        maxlen = trim.strategy == "maxlen"
        threshold = trim.threshold
        removed_blocks = 0
        deleted = 0
        for block in self._blocks:
            if maxlen and self.length <= threshold:
                break
            if limit and deleted + block.live > limit:
                break
            if self.length - block.live >= threshold if maxlen else block.last_id() < threshold:
                removed_blocks += 1
                self.length -= block.live
                deleted += block.live
                continue
            if not trim.approximate:
                deleted += self._trim_inside(block, maxlen, threshold)
            break
        if removed_blocks:
            self._drop(0, removed_blocks)
        if self.length == 0:
            self._first_id = 0
        elif deleted:
            self._first_id = self._scan_first()
        return deleted

    def _trim_bytes(self, max_bytes: int) -> int:
        """Remove the oldest blocks, all but the newest if need be, until the entries hold at most
        ``max_bytes``; returns the number of entries removed."""
        blocks = self._blocks
        over = self.entries_memory() - max_bytes
        count = deleted = 0
        while over > 0 and count < len(blocks) - 1:  # (a first guess, made in one pass ...)
            over -= blocks[count].held + blocks[count].names
            deleted += blocks[count].live
            count += 1
        if count:
            self._drop(0, count)
        while self.entries_memory() > max_bytes and len(blocks) > 1:  # (... then made exact)
            deleted += blocks[0].live
            self._drop(0, 1)
        if deleted:
            self.length -= deleted
            self._first_id = self._scan_first() if self.length else 0
        return deleted

    def _trim_inside(self, block: _Block, maxlen: bool, threshold: int) -> int:
        # Like Redis, a block emptied here stays (with only tombstones) until trimming reaches it again.
        deleted = 0
        flags = block.flags
        for j, entry_id in enumerate(block.ids()):
            if (self.length <= threshold) if maxlen else (entry_id >= threshold):
                break
            if not flags[j] & _DELETED:
                flags[j] |= _DELETED
                block.live -= 1
                self.length -= 1
                deleted += 1
        return deleted

    # ----------------------------------------------------------------- reading

    def get(self, entry_id: int) -> list[bytes] | None:
        """The field/value list of a live entry, or None."""
        i = bisect_right(self._firsts, entry_id) - 1
        if i < 0:
            return None
        block = self._blocks[i]
        j = block.index(entry_id)
        if j is None or block.flags[j] & _DELETED:
            return None
        return block.pairs(j)

    def range(
        self, start: int, end: int, count: int | None = None, *, reverse: bool = False
    ) -> list[Entry]:
        """Live entries with ``start <= id <= end``, ascending or (``reverse``) descending.

        ``count`` None or not positive means no limit (Redis's internal convention; XRANGE's ``COUNT 0``
        null reply is the command's).
        """
        out: list[Entry] = []
        if start > end:
            return out
        entries = self._iter_reverse(start, end) if reverse else self._iter(start, end)
        for entry in entries:
            out.append(entry)
            if len(out) == count:
                break
        return out

    def after(self, entry_id: int, count: int | None) -> list[Entry]:
        """Live entries with IDs greater than ``entry_id``, ascending (XREAD)."""
        if entry_id >= MAX_ID:
            return []
        return self.range(entry_id + 1, MAX_ID, count)

    def has_after(self, entry_id: int) -> bool:
        """Whether a live entry has an ID greater than ``entry_id`` (whether XREAD from it finds
        anything)."""
        if entry_id >= self.last_id or not self._blocks:
            return False
        block = self._blocks[-1]
        if block.flags and not block.flags[-1] & _DELETED:  # (the last entry is live)
            return block.last_id() > entry_id
        last = self.last_entry()
        return last is not None and last[0] > entry_id

    def first_entry(self) -> Entry | None:
        return next(self._iter(0, MAX_ID), None)

    def last_entry(self) -> Entry | None:
        return next(self._iter_reverse(0, MAX_ID), None)

    def _iter(self, start: int, end: int) -> Iterator[Entry]:
        blocks = self._blocks
        for i in range(max(bisect_right(self._firsts, start) - 1, 0), len(blocks)):
            block = blocks[i]
            if block.first > end:
                return
            flags = block.flags
            for j, entry_id in enumerate(block.ids()):
                if entry_id < start or flags[j] & _DELETED:
                    continue
                if entry_id > end:
                    return
                yield entry_id, block.pairs(j)

    def _iter_reverse(self, start: int, end: int) -> Iterator[Entry]:
        i = bisect_right(self._firsts, end) - 1
        while i >= 0:
            block = self._blocks[i]
            flags = block.flags
            ids = block.ids()
            for j in range(len(ids) - 1, -1, -1):
                entry_id = ids[j]
                if entry_id > end or flags[j] & _DELETED:
                    continue
                if entry_id < start:
                    return
                yield entry_id, block.pairs(j)
            if block.first <= start:
                return
            i -= 1

    def _scan_first(self) -> int:
        entry = self.first_entry()
        return 0 if entry is None else entry[0]

    # ----------------------------------------------------------------- lag support (Redis 7.2)

    def range_has_tombstones(self, start: int, end: int = MAX_ID) -> bool:
        """Whether a deleted entry may lie in ``[start, end]`` (only max_deleted_id is known)."""
        if not self.length or not self.max_deleted_id:
            return False
        if self._first_id > self.max_deleted_id:
            return False
        return start <= self.max_deleted_id <= end

    def estimate_entries_read(self, entry_id: int) -> int | None:
        """The logical read counter of ``entry_id`` (entries added up to it), None when unknowable."""
        if not self.entries_added:
            return 0
        if not self.length and entry_id <= self.last_id:
            return self.entries_added
        if entry_id == self.last_id:
            return self.entries_added
        if entry_id > self.last_id:
            return None
        if not self.max_deleted_id or self.max_deleted_id < self._first_id:
            if entry_id < self._first_id:
                return self.entries_added - self.length
            if entry_id == self._first_id:
                return self.entries_added - self.length + 1
        return None
