"""Consumer groups with Redis 7.2 semantics: PELs sharing NACKs, delivery counts, claims and lag.

A NACK is one object referenced from both the group PEL and its owner's PEL, as Redis shares the pointer:
changing the owner moves the key between consumer PELs and updates the back-reference.

Times are milliseconds since the epoch passed in as ``now``. Consumers are created and their seen-time
set by ``consumer(name, now)`` (what XREADGROUP, XCLAIM and XAUTOCLAIM do first); active-time moves on a
successful ``>`` delivery (not with NOACK) or claim, never on a history read.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from itertools import islice
from typing import Literal, overload

import attrs
from sortedcontainers import SortedDict

from node.data.streams.entries import Entries, Entry
from node.data.streams.ids import MAX_ID

HistoryEntry = tuple[int, list[bytes] | None]


def _without(pending: SortedDict[int, Nack], gone: dict[int, Nack]) -> SortedDict[int, Nack]:
    """``pending`` less the keys of ``gone``: removed one by one when they are few, else a new PEL
    built from what is left (one sort in C instead of a bisect and a list deletion per key)."""
    if len(gone) * 8 < len(pending):
        for entry_id in gone:
            del pending[entry_id]
        return pending
    return SortedDict({k: pending[k] for k in pending if k not in gone})


class Nack:
    __slots__ = ("consumer", "delivery_count", "delivery_time")

    def __init__(self, consumer: Consumer, delivery_time: int, delivery_count: int = 1) -> None:
        self.consumer = consumer
        self.delivery_time = delivery_time
        self.delivery_count = delivery_count


_NOTHING: SortedDict[int, Nack] = SortedDict()
"""The pending entries of every consumer with none yet: never written (``Consumer.holding``)."""


class Consumer:
    """A consumer of a group; its pending entries (a ``SortedDict``, ~1.6 KB even empty) are
    made for its first, so that a consumer that only waits (a blocked XREADGROUP per client)
    costs little."""

    __slots__ = ("_pending", "active_time", "name", "seen_time")

    def __init__(self, name: bytes, now: int) -> None:
        self.name = name
        self.seen_time = now
        self.active_time = -1
        self._pending: SortedDict[int, Nack] | None = None

    @property
    def pending(self) -> SortedDict[int, Nack]:
        """Its pending entries by ID, to read or to delete from (``holding`` to add to)."""
        return _NOTHING if self._pending is None else self._pending

    @pending.setter
    def pending(self, entries: SortedDict[int, Nack]) -> None:
        self._pending = entries or None

    def holding(self) -> SortedDict[int, Nack]:
        """Its pending entries, to add to."""
        if self._pending is None:
            self._pending = SortedDict()
        return self._pending


@attrs.frozen
class ConsumerInfo:
    """XINFO CONSUMERS: idle = now - seen-time (not negative), inactive = now - active-time or -1."""

    name: bytes
    pending: int
    idle: int
    inactive: int
    seen_time: int
    active_time: int


@attrs.frozen
class GroupInfo:
    """XINFO GROUPS: ``entries_read`` and ``lag`` are None where Redis replies nil."""

    name: bytes
    consumers: int
    pending: int
    last_id: int
    entries_read: int | None
    lag: int | None


class ConsumerGroup:
    """One group of a stream; operations take the stream because entries live there."""

    def __init__(self, name: bytes, last_id: int, entries_read: int | None) -> None:
        self.name = name
        self.last_id = last_id
        self.entries_read = entries_read
        self.pel: SortedDict[int, Nack] = SortedDict()
        self.consumers: dict[bytes, Consumer] = {}

    def copy(self) -> ConsumerGroup:
        """An independent group in the same state: its consumers, their times and the pending
        entries, each shared by the group and its consumer as here."""
        twin = ConsumerGroup(self.name, self.last_id, self.entries_read)
        for name, consumer in self.consumers.items():
            copied = twin.consumers[name] = Consumer(name, consumer.seen_time)
            copied.active_time = consumer.active_time
        for entry_id, nack in self.pel.items():
            owner = twin.consumers[nack.consumer.name]
            copied_nack = Nack(owner, nack.delivery_time, nack.delivery_count)
            twin.pel[entry_id] = owner.holding()[entry_id] = copied_nack
        return twin

    # ----------------------------------------------------------------- consumers

    def create_consumer(self, name: bytes, now: int) -> bool:
        """XGROUP CREATECONSUMER; False if it exists (its seen-time is left alone then)."""
        if name in self.consumers:
            return False
        self.consumers[name] = Consumer(name, now)
        return True

    def consumer(self, name: bytes, now: int) -> Consumer:
        """Get or create a consumer and mark it seen, as XREADGROUP/XCLAIM/XAUTOCLAIM do."""
        consumer = self.consumers.get(name)
        if consumer is None:
            consumer = self.consumers[name] = Consumer(name, now)
        consumer.seen_time = now
        return consumer

    def _resolve(self, consumer: Consumer | bytes, now: int) -> Consumer:
        return self.consumer(consumer, now) if isinstance(consumer, bytes) else consumer

    def delete_consumer(self, name: bytes) -> int:
        """XGROUP DELCONSUMER: the consumer's pending count; its entries leave the group PEL too."""
        consumer = self.consumers.pop(name, None)
        if consumer is None:
            return 0
        for entry_id in consumer.pending:
            del self.pel[entry_id]
        return len(consumer.pending)

    # ----------------------------------------------------------------- reading

    def read_new(
        self, stream: Entries, consumer: Consumer | bytes, count: int | None, noack: bool, now: int
    ) -> list[Entry]:
        """XREADGROUP ``>``: entries after the group's last ID; advances it and entries_read.

        Each delivered entry gets a fresh NACK (count 1) unless ``noack``; an existing NACK (possible
        after SETID) moves to this consumer with its count reset to 1. ``count`` None or not positive:
        no limit. An empty result is where the command would block.
        """
        consumer = self._resolve(consumer, now)
        entries = stream.after(self.last_id, count)
        fresh: dict[int, Nack] = {}
        pel = self.pel
        for entry_id, _ in entries:
            if self.entries_read is not None and not stream.range_has_tombstones(entry_id):
                self.entries_read += 1
            elif stream.entries_added:
                self.entries_read = stream.estimate_entries_read(entry_id)
            self.last_id = entry_id
            if noack:
                continue
            nack = pel.get(entry_id)
            if nack is None:
                fresh[entry_id] = Nack(consumer, now)
                continue
            del nack.consumer.pending[entry_id]
            nack.consumer = consumer
            nack.delivery_time = now
            nack.delivery_count = 1
            consumer.holding()[entry_id] = nack
        if fresh:
            # (one update per PEL: a batch of increasing IDs is merged in C, not bisected one by one)
            pel.update(fresh)
            consumer.holding().update(fresh)
        if entries and not noack:
            consumer.active_time = now
        return entries

    def read_history(
        self, stream: Entries, consumer: Consumer | bytes, after: int, count: int | None, now: int
    ) -> list[HistoryEntry]:
        """XREADGROUP with an explicit ID: this consumer's pending entries with IDs above ``after``.

        An entry gone from the stream comes back as ``(id, None)`` and keeps its NACK untouched; the
        others get delivery_count + 1 and delivery_time = now. Redis treats the ID
        18446744073709551615-18446744073709551615 as ``>``: the caller routes it to ``read_new``.
        """
        consumer = self._resolve(consumer, now)
        if after >= MAX_ID:
            return []
        out: list[HistoryEntry] = []
        pending = consumer.pending
        limit = count if count is not None and count > 0 else None
        for entry_id in islice(pending.irange(minimum=after + 1), limit):
            pairs = stream.get(entry_id)
            if pairs is not None:
                nack = pending[entry_id]
                nack.delivery_time = now
                nack.delivery_count += 1
            out.append((entry_id, pairs))
        return out

    def ack(self, ids: Iterable[int]) -> int:
        """XACK: how many of ``ids`` were pending (duplicates count once)."""
        pel = self.pel
        gone: dict[int, Nack] = {}
        for entry_id in ids:
            nack = pel.get(entry_id)
            if nack is not None:
                gone[entry_id] = nack
        if not gone:
            return 0
        self.pel = _without(pel, gone)
        owners: dict[Consumer, dict[int, Nack]] = {}
        for entry_id, nack in gone.items():
            owners.setdefault(nack.consumer, {})[entry_id] = nack
        for owner, theirs in owners.items():
            owner.pending = _without(owner.pending, theirs)
        return len(gone)

    # ----------------------------------------------------------------- XPENDING

    def pending_summary(self) -> tuple[int, int | None, int | None, list[tuple[bytes, int]]]:
        """(count, smallest ID, greatest ID, [(consumer, pending)] by name for consumers with any)."""
        if not self.pel:
            return 0, None, None, []
        per_consumer = [
            (name, len(consumer.pending))
            for name, consumer in sorted(self.consumers.items())
            if consumer.pending
        ]
        return len(self.pel), self.pel.peekitem(0)[0], self.pel.peekitem(-1)[0], per_consumer

    def pending_range(
        self,
        start: int,
        end: int,
        count: int,
        *,
        consumer: bytes | None,
        min_idle: int | None,
        now: int,
    ) -> list[tuple[int, bytes, int, int]]:
        """Extended XPENDING: (id, consumer, idle ms, delivery count) for up to ``count`` NACKs."""
        pel = self.pel
        if consumer is not None:
            owner = self.consumers.get(consumer)
            if owner is None:
                return []
            pel = owner.pending
        out: list[tuple[int, bytes, int, int]] = []
        if count <= 0:
            return out
        for entry_id in pel.irange(start, end):
            nack = pel[entry_id]
            idle = now - nack.delivery_time
            if min_idle and idle < min_idle:
                continue
            out.append((entry_id, nack.consumer.name, max(idle, 0), nack.delivery_count))
            if len(out) == count:
                break
        return out

    # ----------------------------------------------------------------- claiming

    def _take(self, entry_id: int, nack: Nack, consumer: Consumer) -> None:
        if nack.consumer is not consumer:
            del nack.consumer.pending[entry_id]
            nack.consumer = consumer
            consumer.holding()[entry_id] = nack

    def _drop(self, entry_id: int, nack: Nack) -> None:
        del self.pel[entry_id]
        del nack.consumer.pending[entry_id]

    @overload
    def claim(
        self,
        stream: Entries,
        consumer: Consumer | bytes,
        min_idle: int,
        ids: Iterable[int],
        now: int,
        *,
        idle: int | None = ...,
        time: int | None = ...,
        retrycount: int | None = ...,
        force: bool = ...,
        justid: Literal[True],
        lastid: int | None = ...,
    ) -> list[int]: ...

    @overload
    def claim(
        self,
        stream: Entries,
        consumer: Consumer | bytes,
        min_idle: int,
        ids: Iterable[int],
        now: int,
        *,
        idle: int | None = ...,
        time: int | None = ...,
        retrycount: int | None = ...,
        force: bool = ...,
        justid: Literal[False] = ...,
        lastid: int | None = ...,
    ) -> list[Entry]: ...

    @overload
    def claim(
        self,
        stream: Entries,
        consumer: Consumer | bytes,
        min_idle: int,
        ids: Iterable[int],
        now: int,
        *,
        idle: int | None = ...,
        time: int | None = ...,
        retrycount: int | None = ...,
        force: bool = ...,
        justid: bool,
        lastid: int | None = ...,
    ) -> list[int] | list[Entry]: ...

    def claim(
        self,
        stream: Entries,
        consumer: Consumer | bytes,
        min_idle: int,
        ids: Iterable[int],
        now: int,
        *,
        idle: int | None = None,
        time: int | None = None,
        retrycount: int | None = None,
        force: bool = False,
        justid: bool = False,
        lastid: int | None = None,
    ) -> list[int] | list[Entry]:
        """XCLAIM (7.0+): move pending entries idle for at least ``min_idle`` ms to ``consumer``.

        IDs whose entries left the stream are dropped from the PEL and omitted. ``force`` creates a NACK
        for an unpending ID only if its entry exists. ``idle``/``time`` (pass the one given last) set the
        delivery time, clamped to ``[0, now]``; ``retrycount`` (when >= 0) sets the count, else it grows
        by one unless ``justid``. ``lastid`` raises the group's last ID if greater (XCLAIM's LASTID).
        """
        if lastid is not None and lastid > self.last_id:
            self.last_id = lastid
        min_idle = max(min_idle, 0)
        if time is not None:
            delivery_time = time
        elif idle is not None:
            delivery_time = now - idle
        else:
            delivery_time = now
        if delivery_time < 0 or delivery_time > now:
            delivery_time = now
        owner = self._resolve(consumer, now)
        claimed_ids: list[int] = []
        claimed: list[Entry] = []
        for entry_id in ids:
            nack = self.pel.get(entry_id)
            pairs = stream.get(entry_id)
            if pairs is None:
                if nack is not None:
                    self._drop(entry_id, nack)
                continue
            if nack is None:
                if not force:
                    continue
                nack = self.pel[entry_id] = Nack(owner, now)
                owner.holding()[entry_id] = nack
            elif min_idle and now - nack.delivery_time < min_idle:
                continue
            self._take(entry_id, nack, owner)
            nack.delivery_time = delivery_time
            if retrycount is not None and retrycount >= 0:
                nack.delivery_count = retrycount
            elif not justid:
                nack.delivery_count += 1
            owner.active_time = now
            if justid:
                claimed_ids.append(entry_id)
            else:
                claimed.append((entry_id, pairs))
        return claimed_ids if justid else claimed

    def autoclaim(
        self,
        stream: Entries,
        consumer: Consumer | bytes,
        min_idle: int,
        start: int,
        count: int,
        now: int,
        *,
        justid: bool,
    ) -> tuple[int, list[int] | list[Entry], list[int]]:
        """XAUTOCLAIM: (next cursor or 0 when the scan ended, claimed, IDs dropped as deleted).

        Scans the group PEL from ``start``, examining at most ``count * 10`` NACKs; deleted entries are
        dropped from the PEL and count against ``count`` like claims do.
        """
        min_idle = max(min_idle, 0)
        owner = self._resolve(consumer, now)
        pel = self.pel
        claimed_ids: list[int] = []
        claimed: list[Entry] = []
        deleted: list[int] = []
        attempts = count * 10
        pos = pel.bisect_left(start)
        while attempts and count and pos < len(pel):
            attempts -= 1
            entry_id, nack = pel.peekitem(pos)
            pairs = stream.get(entry_id)
            if pairs is None:
                self._drop(entry_id, nack)
                deleted.append(entry_id)
                count -= 1
                continue
            pos += 1
            if min_idle and now - nack.delivery_time < min_idle:
                continue
            self._take(entry_id, nack, owner)
            nack.delivery_time = now
            if not justid:
                nack.delivery_count += 1
            if justid:
                claimed_ids.append(entry_id)
            else:
                claimed.append((entry_id, pairs))
            count -= 1
            owner.active_time = now
        cursor = pel.peekitem(pos)[0] if pos < len(pel) else 0
        return cursor, (claimed_ids if justid else claimed), deleted

    # ----------------------------------------------------------------- position and lag

    def set_id(self, last_id: int, entries_read: int | None) -> None:
        """XGROUP SETID (``$`` already resolved to the stream's last ID); the PEL is left alone."""
        self.last_id = last_id
        self.entries_read = entries_read

    def lag(self, stream: Entries) -> int | None:
        """Entries not yet delivered to the group, None where Redis 7.2 cannot tell (nil)."""
        if not stream.entries_added:
            return 0
        if self.entries_read is not None and not stream.range_has_tombstones(self.last_id):
            return stream.entries_added - self.entries_read
        estimate = stream.estimate_entries_read(self.last_id)
        return None if estimate is None else stream.entries_added - estimate

    # ----------------------------------------------------------------- XINFO

    def info(self, stream: Entries) -> GroupInfo:
        return GroupInfo(
            name=self.name,
            consumers=len(self.consumers),
            pending=len(self.pel),
            last_id=self.last_id,
            entries_read=self.entries_read,
            lag=self.lag(stream),
        )

    def consumer_infos(self, now: int) -> list[ConsumerInfo]:
        """XINFO CONSUMERS rows in Redis's order (byte order of names)."""
        return [
            ConsumerInfo(
                name=c.name,
                pending=len(c.pending),
                idle=max(now - c.seen_time, 0),
                inactive=-1 if c.active_time == -1 else now - c.active_time,
                seen_time=c.seen_time,
                active_time=c.active_time,
            )
            for _, c in sorted(self.consumers.items())
        ]

    def memory_usage(self) -> int:
        """Rough bytes: per NACK the object, its two dict slots and keys; per consumer its object."""
        return (
            sys.getsizeof(self)
            + 400
            + len(self.pel) * _PER_NACK
            + sum(_PER_CONSUMER + len(name) for name in self.consumers)
        )


def _sizes() -> tuple[int, int]:
    """What ``ConsumerGroup.memory_usage`` counts per NACK and per consumer."""
    sample = Consumer(b"", 0)  # (made, not __new__: compiled classes need their __init__)
    per_nack = sys.getsizeof(Nack(sample, 0)) + 2 * (sys.getsizeof(1 << 100) + 60)
    return per_nack, sys.getsizeof(sample) + 400


_PER_NACK, _PER_CONSUMER = _sizes()
