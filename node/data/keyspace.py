"""Keys, as redis-server keeps them: per account, sixteen numbered databases of named values.

A value is a stream (``node.data.streams``) or a string: ``bytes``, or a ``bytearray`` once APPEND
or SETRANGE changed it in place (redis-server's ``raw`` encoding, which such a change leaves). A
command that finds a value of another kind than it works on raises ``WrongType``
(``Database.stream``, ``Database.string``), which the connection answers with ``WRONGTYPE``. A key
may carry an expiry time; an expired key is gone the moment anyone looks, and a sweep reclaims those
nobody looks at as redis-server's active expiry does (``Keyspaces.sweep``). Two kinds of client wait
on keys: WATCH (a write to a watched key spoils the watcher's transaction) and blocking reads (a
write to the key wakes those it lets be served, in the order they blocked). Both are registered here
so that every write, whoever makes it, reaches them through one call: ``Database.touch``. The same
call tells the node's ``KeyTracker`` (client-side caching's invalidations) when there is one, and
``Database.notify`` announces what a write did as a keyspace notification
(``node.data.notifications``); with neither in use a write pays one test for each.

A command that reads a key looks it up with ``Database.read`` (or ``read_string``,
``read_stream``), as redis-server's read lookups: the lookup is counted as a hit or a miss
(``Keyspaces.hits``, ``Keyspaces.misses``: INFO's ``keyspace_hits`` and ``keyspace_misses``, one
addition each time) and a miss is announced as ``keymiss``; OBJECT's lookups
(``Database.inspect``) are counted but not announced. Writes, and the lookups redis-server does not
count (SCAN, KEYS, RANDOMKEY, MEMORY USAGE, renames and the like), use ``get``.

An expiry that removes a key is recorded in the journal as a DEL (as redis-server propagates one),
so that replaying the journal, during which nothing expires (``Keyspaces.loading``), never finds an
old value where a new one was written.

Readers are not served inside the write that made them ready: the key queues on the node-wide
``Keyspaces.ready`` and its readers are served once the writing command has finished, as
redis-server serves blocked clients after the command that unblocked them. A blocked reader says
what it waits for as a ``Condition``; readers waiting for equal conditions on a key form one queue,
so a write costs a check per queue and a wake-up per reader served, however many wait in vain.

**Memory.** ``Keyspaces.used_memory`` is a fixed overhead (``Keyspaces.overhead``: the bytes of
the empty records the keys are kept in, measured once when they are made, so an empty node holds
some memory as redis-server always does), plus what the keys hold, as MEMORY USAGE counts them (the
key's name and ``Stream.memory_usage``, or a string's bytes and header: ``key_memory``), plus the
clients' output buffers. The keys' part is a running total: a key written (``Database.touch``) or
whose consumer groups changed (``Database.resized``) is only noted, and counted again when the total
is read (``Keyspaces.settle``). A write thus costs a set insertion; reading the total costs one
``memory_usage`` per key changed since (a few additions, however big the stream), and the total is
exact whenever it is read: by each command that may add data while a limit is set, by INFO, and by
the node ten times a second. The output buffers are summed over every client at those ten times a
second while a limit is set (``output_bytes``), and at once for INFO. Past ``maxmemory`` the node
behaves as redis-server with ``maxmemory-policy noeviction``: commands that would add data are
refused (``Keyspaces.oom``), reads and deletions go on, and deleting brings the total down at once.
Python does not give freed memory back to the system promptly, so the process's resident size is
reported beside it, not used for the limit.
"""

from __future__ import annotations

import heapq
import random
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Protocol

from node.config.keyspace_events import EXPIRED, KEY_MISS, NEW
from node.data.notifications import Notifier
from node.data.streams import Stream

__all__ = [
    "ANY_WRITE",
    "DATABASES",
    "OOM",
    "SWEEP_SAMPLE",
    "SWEEP_SECONDS",
    "SWEEP_STALE",
    "TRACKING_MAX_KEYS",
    "WRONGTYPE",
    "CommitFailed",
    "Condition",
    "Database",
    "Journal",
    "KeyTracker",
    "Keyspace",
    "Keyspaces",
    "Persistence",
    "Value",
    "Waiter",
    "Watcher",
    "WrongType",
    "key_memory",
]

DATABASES = 16
"""Numbered databases per account (redis-server's default ``databases``)."""
_KEY = sys.getsizeof(b"")
"""What a key's name holds besides its bytes (a string value's header is the same)."""
WRONGTYPE = "-WRONGTYPE Operation against a key holding the wrong kind of value"
"""redis-server's reply to a command on a key whose value is of another kind."""

Value = Stream | bytes | bytearray
"""What a key holds: a stream, or a string (see the module's notes)."""


class WrongType(Exception):
    """The key holds a value of another kind than the command works on (answered ``WRONGTYPE``)."""


def key_memory(key: bytes, value: Value) -> int:
    """The bytes a key and its value hold, as MEMORY USAGE counts them."""
    if isinstance(value, Stream):
        return _KEY + len(key) + value.memory_usage()
    return 2 * _KEY + len(key) + len(value)


OOM = "-OOM command not allowed when used memory > 'maxmemory'."
"""redis-server's refusal of a command that would add data past ``maxmemory``."""
SWEEP_SAMPLE = 20
"""Keys with an expiry a sweep looks at in one round, and the random probes that may follow it
(redis-server's keys per loop)."""
SWEEP_STALE = 0.1
"""A sweep goes on in a database while more than this share of a round, or of its probes, had
expired (redis-server's acceptable stale share)."""
SWEEP_SECONDS = 0.002
"""The CPU time one sweep may take: little, so that clients are not held up (``Keyspaces.sweep``)."""


TRACKING_MAX_KEYS = 1_000_000
"""redis-server's default ``tracking-table-max-keys``."""


def _stream(value: Value | None) -> Stream | None:
    if value is None or isinstance(value, Stream):
        return value
    raise WrongType


def _string(value: Value | None) -> bytes | bytearray | None:
    if isinstance(value, Stream):
        raise WrongType
    return value


class Watcher(Protocol):
    """A client that WATCHes keys: a write to one of them spoils its next EXEC."""

    dirty: bool


class Waiter(Protocol):
    """A client blocked on keys until a write to one of them lets it be served (or its timeout
    passes)."""

    def wake(self) -> None:
        """Called once the writing command has finished, when the waiter's condition on a key it
        blocked on is met; the waiter has been taken off that key and retries its command."""
        ...


class KeyTracker(Protocol):
    """Who must hear of every change to a key: the clients that cache values (CLIENT TRACKING)."""

    def changed(self, account: str, key: bytes) -> None:
        """``key`` of ``account`` (in whichever database) was written, deleted or expired."""
        ...

    def flushed(self, account: str) -> None:
        """Every key of a database of ``account`` went at once (FLUSHDB, FLUSHALL)."""
        ...


class CommitFailed(Exception):
    """The journal could not make a batch of changes durable. The changes have been taken back
    (the keys are again as the journal holds them), so nothing of that batch may be acknowledged;
    the journal refuses writes until it can write again (``Journal.refusal``)."""


class Condition(Protocol):
    """What waiters blocked on a key wait for. Equal conditions (they are hashable) wait for the
    same thing: while it is not met for the first of the waiters that share it, it is not met for
    any of them."""

    def met(self, db: Database, key: bytes) -> bool:
        """Whether a waiter on ``key`` of ``db`` could be served now (cheap, and changing nothing a
        client could see)."""
        ...


class _AnyWrite:
    """Met by any write to the key."""

    def met(self, db: Database, key: bytes) -> bool:
        return True


ANY_WRITE: Condition = _AnyWrite()
"""The condition of a waiter woken by every write to its key."""


class _Blocked:
    """The waiters blocked on one key: a queue per condition, each in the order they blocked
    (waiter -> its place in the database's order)."""

    __slots__ = ("conditions", "queues")

    def __init__(self) -> None:
        self.queues: dict[Condition, OrderedDict[Waiter, int]] = {}
        self.conditions: dict[Waiter, Condition] = {}


class Journal(Protocol):
    """Where changes to keys are recorded, to be replayed at the next start."""

    def append(self, account: str, db: int, args: list[bytes]) -> None:
        """Record one change as the command that repeats it."""
        ...

    def expire(self, account: str, db: int, key: bytes) -> None:
        """Record that ``key`` expired, as a DEL. Unlike other changes, one of these may wait
        while the journal cannot be written: losing it only means the key expires again."""
        ...

    @property
    def buffered(self) -> int:
        """Bytes of changes appended and not committed yet."""
        ...

    @property
    def refusal(self) -> str | None:
        """While the journal cannot be written: the error a write is refused with (None: writable)."""
        ...

    @property
    def discards(self) -> int:
        """How many times changes that could not be made durable were taken back since start."""
        ...

    @property
    def size_bytes(self) -> int:
        """How big the journal is on disk (monitoring)."""
        ...

    @property
    def fsync_lag_seconds(self) -> float:
        """How long the oldest change not yet made durable has waited (monitoring)."""
        ...

    def commit(self) -> None:
        """Make what was appended as durable as the fsync policy promises. Called after each batch
        of a client's requests, before their replies can leave, before readers a write woke are
        served, and before a stream acknowledges a captured message.

        Raises:
            CommitFailed: the batch could not be written; its changes were taken back.
        """
        ...


class Persistence(Protocol):
    """The store behind the journal, as INFO, CONFIG GET and BGREWRITEAOF see it."""

    @property
    def appendfsync(self) -> str:
        """The fsync policy: always, everysec or no."""
        ...

    @appendfsync.setter
    def appendfsync(self, policy: str) -> None: ...

    def info(self) -> list[tuple[str, int | str]]:
        """INFO's persistence fields."""
        ...

    def rewrite(self) -> bool:
        """Start compacting the journal in the background; False if that is under way already."""
        ...

    def save(self) -> None:
        """Write and fsync everything journaled so far (SAVE); raises ``CommitFailed`` or
        ``OSError`` if that fails."""
        ...

    @property
    def last_save(self) -> int:
        """When ``save`` last succeeded (Unix seconds; 0: never)."""
        ...


class Database:
    """One numbered database of one account.

    The keys that carry an expiry are also kept in a list, with their times in a parallel list: a
    key joins at the end and leaves by the last key moving into its place, so every operation on
    one key stays O(1). The sweep goes along the list with a cursor (``sweep``), so keys made
    together, which sit together in memory, are reclaimed together (several times faster than in
    random order); whether it should go on is told by random probes of the whole list
    (``stale``), a fair estimate however the expired keys are spread along it.
    """

    __slots__ = (
        "_blocked",
        "_cursor",
        "_expires",
        "_expiring",
        "_order",
        "_resized",
        "_sizes",
        "_times",
        "_watchers",
        "access",
        "account",
        "index",
        "keys",
        "keyspaces",
    )

    def __init__(self, keyspaces: Keyspaces, account: str, index: int) -> None:
        self.keyspaces = keyspaces
        self.account = account
        self.index = index
        self.keys: dict[bytes, Value] = {}
        self._expires: dict[bytes, int] = {}
        """Key -> its place in ``_expiring`` and ``_times``."""
        self._expiring: list[bytes] = []
        self._times: list[int] = []
        """When each key of ``_expiring`` expires, in milliseconds since the epoch."""
        self._cursor = 0
        """Where in ``_expiring`` the next sweep starts."""
        self._watchers: dict[bytes, set[Watcher]] = {}
        self._blocked: dict[bytes, _Blocked] = {}
        self._order = 0
        """The place the next waiter to block takes (the order they are served in)."""
        self._sizes: dict[bytes, int] = {}
        """Key -> the bytes it was last counted as (see ``Keyspaces.settle``)."""
        self._resized: set[bytes] = set()
        """Keys to count again."""
        self.access: dict[bytes, int] = {}
        """Key -> ``Keyspaces.clock`` when it was last read or written (OBJECT IDLETIME)."""

    # -- reading ---------------------------------------------------------------------------------

    def get(self, key: bytes, now: int) -> Value | None:
        """The value at ``key``, unless it has expired (it is removed then)."""
        value = self.keys.get(key)
        if value is not None and self._expires:
            place = self._expires.get(key)
            if place is not None and self._times[place] <= now and not self.keyspaces.loading:
                self._expire(key)
                return None
        return value

    def read(self, key: bytes, now: int, touch: bool = True) -> Value | None:
        """``get``, for a command that reads the key: counted as a hit or a miss
        (``Keyspaces.hits``, ``Keyspaces.misses``), a miss announced as ``keymiss``; a key found
        is marked accessed now (``access``) unless not to ``touch`` it, or while nothing is
        (``Keyspaces.touching``)."""
        value = self.get(key, now)
        if value is None:
            self.keyspaces.misses += 1
            self.notify(KEY_MISS, b"keymiss", key)
        else:
            keyspaces = self.keyspaces
            keyspaces.hits += 1
            if touch and keyspaces.touching:
                self.access[key] = keyspaces.clock
        return value

    def inspect(self, key: bytes, now: int) -> Value | None:
        """``get``, counted as ``read`` counts it but a miss not announced (OBJECT's lookups, as
        redis-server's)."""
        value = self.get(key, now)
        if value is None:
            self.keyspaces.misses += 1
        else:
            self.keyspaces.hits += 1
        return value

    def stream(self, key: bytes, now: int) -> Stream | None:
        """The stream at ``key`` (as ``get``).

        Raises:
            WrongType: the key holds a string.
        """
        return _stream(self.get(key, now))

    def read_stream(self, key: bytes, now: int) -> Stream | None:
        """The stream at ``key``, for a command that reads it (as ``read``; raises as ``stream``)."""
        return _stream(self.read(key, now))

    def string(self, key: bytes, now: int) -> bytes | bytearray | None:
        """The string at ``key`` (as ``get``).

        Raises:
            WrongType: the key holds a stream.
        """
        return _string(self.get(key, now))

    def read_string(self, key: bytes, now: int) -> bytes | bytearray | None:
        """The string at ``key``, for a command that reads it (as ``read``; raises as ``string``)."""
        return _string(self.read(key, now))

    def _expire(self, key: bytes) -> None:
        self.delete(key)
        self.keyspaces.expired_keys += 1
        self.notify(EXPIRED, b"expired", key)
        journal = self.keyspaces.journal
        if journal is not None:
            journal.expire(self.account, self.index, key)

    def __len__(self) -> int:
        return len(self.keys)

    def live_keys(self, now: int) -> Iterator[bytes]:
        """Every key that has not expired (expired ones met on the way are removed)."""
        for key in list(self.keys):
            if self.get(key, now) is not None:
                yield key

    def expiring(self) -> int:
        """How many keys carry an expiry time."""
        return len(self._expiring)

    def expires_at(self, key: bytes) -> int | None:
        place = self._expires.get(key)
        return None if place is None else self._times[place]

    # -- writing ---------------------------------------------------------------------------------

    def put(self, key: bytes, value: Value, *, keep_ttl: bool = False) -> None:
        """Store a new value (its expiry, if the key had one, is gone with the old value unless
        ``keep_ttl``)."""
        if not keep_ttl and self._expires:
            self._forget_expiry(key)
        if self.keyspaces.notifier.flags & NEW and key not in self.keys:
            self.notify(NEW, b"new", key)
        self.keys[key] = value
        self.touch(key)

    def delete(self, key: bytes) -> bool:
        """Remove a key; whether there was one."""
        if self.keys.pop(key, None) is None:
            return False
        self._forget_expiry(key)
        self.touch(key)
        self.access.pop(key, None)
        return True

    def set_expiry(self, key: bytes, when: int | None) -> None:
        """Make ``key`` (which exists) expire at ``when`` (milliseconds since the epoch), or never
        (None)."""
        if when is None:
            self._forget_expiry(key)
        else:
            place = self._expires.get(key)
            if place is not None:
                self._times[place] = when
            else:
                self._expires[key] = len(self._expiring)
                self._expiring.append(key)
                self._times.append(when)
        self.touch(key)

    def take_keys(self, other: Database) -> None:
        """Hold exactly ``other``'s keys and expiry times (see ``Keyspaces.take_keys``)."""
        self.keys, other.keys = other.keys, {}
        self._expires, other._expires = other._expires, {}
        self._expiring, other._expiring = other._expiring, []
        self._times, other._times = other._times, []
        self._sizes, other._sizes = other._sizes, {}
        self.access, other.access = other.access, {}
        self._cursor = 0

    def exchange(self, other: Database) -> None:
        """Hold ``other``'s keys and expiry times, and ``other`` these (SWAPDB; see
        ``Keyspace.swap``): watchers and blocked readers stay where they are. The counts go with
        the keys, so the keys changed since the total was last read must have been counted
        (``Keyspaces.settle``)."""
        for db in (self, other):
            for key, watchers in db._watchers.items():
                if key in self.keys or key in other.keys:
                    for watcher in watchers:
                        watcher.dirty = True
        self.keys, other.keys = other.keys, self.keys
        self._expires, other._expires = other._expires, self._expires
        self._expiring, other._expiring = other._expiring, self._expiring
        self._times, other._times = other._times, self._times
        self._sizes, other._sizes = other._sizes, self._sizes
        self.access, other.access = other.access, self.access
        self._cursor = other._cursor = 0
        ready = self.keyspaces.ready
        for db in (self, other):
            for key in db._blocked:
                ready[(db, key)] = None

    def _forget_expiry(self, key: bytes) -> None:
        place = self._expires.pop(key, None)
        if place is None:
            return
        last = self._expiring.pop()
        when = self._times.pop()
        if place < len(self._expiring):  # (the last key fills the gap)
            self._expiring[place] = last
            self._times[place] = when
            self._expires[last] = place

    def flush(self) -> None:
        """Remove every key (FLUSHDB), as if each were deleted; the ``KeyTracker`` hears of it
        once for all (redis-server sends no per-key invalidation, nor any notification)."""
        self.clear()
        tracker = self.keyspaces.tracker
        if tracker is not None:
            tracker.flushed(self.account)

    def clear(self) -> None:
        """Remove every key, as if each were deleted, but for the ``KeyTracker`` (``flush``)."""
        tracker = self.keyspaces.tracker
        self.keyspaces.tracker = None
        try:
            for key in list(self.keys):
                self.delete(key)
        finally:
            self.keyspaces.tracker = tracker

    def resized(self, key: bytes) -> None:
        """Count ``key``'s memory again when the total is next read (``touch`` does this for a
        write; a change to its consumer groups, which is no write to watchers and blocked readers,
        calls this alone)."""
        if not self._resized:
            self.keyspaces.unsettled.append(self)
        self._resized.add(key)

    def settle(self) -> int:
        """Count the keys ``resized`` since the last time again; how many more bytes they hold."""
        change = 0
        sizes = self._sizes
        for key in self._resized:
            value = self.keys.get(key)
            if value is None:
                change -= sizes.pop(key, 0)
            else:
                size = key_memory(key, value)
                change += size - sizes.get(key, 0)
                sizes[key] = size
        self._resized.clear()
        return change

    def touch(self, key: bytes) -> None:
        """``key`` was written: mark it accessed now (``access``; a new key even while nothing is
        marked, ``Keyspaces.touching``), count its memory again (``resized``), spoil its watchers'
        transactions, and have its blocked readers looked at once the writing command has finished
        (``Keyspaces.serve_ready``)."""
        keyspaces = self.keyspaces
        if keyspaces.touching or key not in self.access:
            self.access[key] = keyspaces.clock
        if not self._resized:
            self.keyspaces.unsettled.append(self)
        self._resized.add(key)
        watchers = self._watchers.get(key)
        if watchers:
            for watcher in watchers:
                watcher.dirty = True
        if key in self._blocked:
            self.keyspaces.ready[(self, key)] = None
        tracker = self.keyspaces.tracker
        if tracker is not None:
            tracker.changed(self.account, key)

    def notify(self, kind: int, event: bytes, key: bytes) -> None:
        """Announce ``event`` (of class ``kind``, ``node.data.notifications``) on ``key``, if
        ``notify-keyspace-events`` asks for it (not while the journal is replayed: those changes
        were announced when they were made)."""
        notifier = self.keyspaces.notifier
        if notifier.flags & kind and not self.keyspaces.loading:
            notifier.emit(self.account, self.index, event, key)

    def sweep(self, now: int, count: int) -> int:
        """Look at the next ``count`` keys with an expiry (a cursor goes round them all, so each
        is looked at once per round of the list) and remove those that have expired; return how
        many went."""
        keys, times = self._expiring, self._times
        cursor = self._cursor
        gone = 0
        for _ in range(min(count, len(keys))):
            if cursor >= len(keys):
                cursor = 0
            if times[cursor] <= now:
                self._expire(keys[cursor])  # (the last key moves here: it is looked at next)
                gone += 1
            else:
                cursor += 1
        self._cursor = cursor
        return gone

    def stale(self, now: int, sample: int) -> int:
        """How many of ``sample`` keys with an expiry, picked at random, have expired (nothing is
        removed)."""
        times = self._times
        size = len(times)
        expired = 0
        for _ in range(sample if size else 0):
            if times[int(random.random() * size)] <= now:
                expired += 1
        return expired

    # -- who waits on keys -----------------------------------------------------------------------

    def watch(self, key: bytes, watcher: Watcher) -> None:
        self._watchers.setdefault(key, set()).add(watcher)

    def unwatch(self, key: bytes, watcher: Watcher) -> None:
        watchers = self._watchers.get(key)
        if watchers is not None:
            watchers.discard(watcher)
            if not watchers:
                del self._watchers[key]

    def block(self, key: bytes, waiter: Waiter, until: Condition = ANY_WRITE) -> None:
        """Have ``waiter`` woken when a write to ``key`` meets ``until``, after those that blocked
        before it (blocking again on a key it waits on already changes nothing)."""
        blocked = self._blocked.get(key)
        if blocked is None:
            blocked = self._blocked[key] = _Blocked()
        elif waiter in blocked.conditions:
            return
        blocked.conditions[waiter] = until
        queue = blocked.queues.get(until)
        if queue is None:
            queue = blocked.queues[until] = OrderedDict()
        queue[waiter] = self._order
        self._order += 1

    def unblock(self, key: bytes, waiter: Waiter) -> None:
        blocked = self._blocked.get(key)
        if blocked is None:
            return
        until = blocked.conditions.pop(waiter, None)
        if until is None:
            return
        queue = blocked.queues[until]
        del queue[waiter]
        if not queue:
            del blocked.queues[until]
            if not blocked.queues:
                del self._blocked[key]

    def serve(self, key: bytes) -> None:
        """Wake the waiters on ``key`` whose condition is met, in the order they blocked; each is
        taken off the key first. A queue is left as soon as its condition is not met for its first
        waiter (the others are not looked at), and so are the waiters that block meanwhile: the
        next write to the key looks at them."""
        blocked = self._blocked.get(key)
        if blocked is None:
            return
        end = self._order
        # Each queue's first waiter's place (all places differ), the earliest first.
        heads = [(next(iter(queue.values())), until) for until, queue in blocked.queues.items()]
        heapq.heapify(heads)
        while heads:
            place, until = heapq.heappop(heads)
            head = self._first(key, until)
            if head is None:
                continue
            waiter, first = head
            if first != place:  # (the waiter that was first left meanwhile)
                if first < end:
                    heapq.heappush(heads, (first, until))
                continue
            if not until.met(self, key):
                continue
            self.unblock(key, waiter)
            waiter.wake()
            head = self._first(key, until)
            if head is not None and head[1] < end:
                heapq.heappush(heads, (head[1], until))

    def _first(self, key: bytes, until: Condition) -> tuple[Waiter, int] | None:
        """The first waiter of a queue on ``key``, and its place."""
        blocked = self._blocked.get(key)
        queue = blocked.queues.get(until) if blocked is not None else None
        return next(iter(queue.items())) if queue else None


class Keyspace:
    """One account's databases, created as they are first used, and its function libraries."""

    __slots__ = ("_databases", "keyspaces", "libraries", "name")

    def __init__(self, keyspaces: Keyspaces, name: str) -> None:
        self.keyspaces = keyspaces
        self.name = name
        self._databases: dict[int, Database] = {}
        self.libraries: dict[bytes, bytes] = {}
        """The code of each function library loaded (FUNCTION LOAD), by name: kept with the keys
        so that a rewrite of the journal keeps them too."""

    def database(self, index: int) -> Database:
        db = self._databases.get(index)
        if db is None:
            db = self._databases[index] = Database(self.keyspaces, self.name, index)
        return db

    def databases(self) -> dict[int, Database]:
        """The databases in use, by number."""
        return dict(self._databases)

    def swap(self, first: int, second: int) -> None:
        """SWAPDB: databases ``first`` and ``second`` exchange their keys, with their expiry
        times, as redis-server swaps them: a client watching a key either database holds has its
        transaction spoiled; the blocked readers of both are looked at again once the command has
        finished (what they wait on may have come or gone); clients tracking keys are told
        nothing (redis-server sends no invalidation for a swap)."""
        if first != second:
            self.keyspaces.settle()
            self.database(first).exchange(self.database(second))

    def flush(self) -> None:
        """Remove every key of every database (FLUSHALL); the ``KeyTracker`` hears of it once."""
        for db in self._databases.values():
            db.clear()
        tracker = self.keyspaces.tracker
        if tracker is not None:
            tracker.flushed(self.name)


class Keyspaces:
    """Every account's keys on this node, and the queue of blocked readers a write woke."""

    __slots__ = (
        "_accounts",
        "_dataset",
        "_next_sweep",
        "_serving",
        "behind",
        "clock",
        "expired_keys",
        "hits",
        "journal",
        "loading",
        "maxmemory",
        "misses",
        "notifier",
        "output_bytes",
        "overhead",
        "peak",
        "ready",
        "store",
        "touching",
        "tracker",
        "tracking_max_keys",
        "unsettled",
    )

    def __init__(self) -> None:
        self._accounts: dict[str, Keyspace] = {}
        self.journal: Journal | None = None
        """Where changes are recorded (None: keys live in memory only)."""
        self.store: Persistence | None = None
        """The store that keeps the journal (None: keys live in memory only)."""
        self.loading = False
        """The journal is being replayed: keys do not expire meanwhile."""
        self.ready: dict[tuple[Database, bytes], None] = {}
        """Keys written since their blocked readers were last looked at, in the order written."""
        self._serving = False
        self.behind = False
        """The last sweep ran out of time with expired keys likely left."""
        self._next_sweep = 0
        """Where, in the list of databases with expiring keys, the next sweep starts."""
        self.maxmemory = 0
        self.clock = int(time.time())
        """Whole seconds since the epoch, as of the last sweep (ten times a second): the time keys
        are marked accessed at (``Database.access``), as redis-server's LRU clock."""
        self.touching = True
        """Whether reads and writes mark keys accessed (False while a CLIENT NO-TOUCH client's
        command runs)."""
        self.expired_keys = 0
        """Keys removed because their time ran out, since start (INFO's ``expired_keys``)."""
        self.hits = 0
        """Reads that found their key (``Database.read``; INFO's ``keyspace_hits``)."""
        self.misses = 0
        """Reads that did not (INFO's ``keyspace_misses``); both are zeroed by CONFIG RESETSTAT."""
        """Bytes of ``used_memory`` past which commands that add data are refused (0: no limit)."""
        self._dataset = 0
        self.unsettled: list[Database] = []
        """Databases with keys to count again (``Database.resized``)."""
        self.output_bytes = 0
        """Clients' output buffers, as last measured (``measure_output``)."""
        self.peak = 0
        """The most ``used_memory`` was seen to be."""
        self.notifier = Notifier()
        """``notify-keyspace-events``, and where events are published."""
        self.tracker: KeyTracker | None = None
        """Told of every change to a key while any client tracks keys (None: nobody does)."""
        self.tracking_max_keys = TRACKING_MAX_KEYS
        """Keys the tracker may remember at most (``tracking-table-max-keys``; 0: no limit)."""
        self.overhead = sys.getsizeof(self) + sum(
            sys.getsizeof(part) for part in (self._accounts, self.ready, self.unsettled, self.notifier)
        )
        """Bytes ``used_memory`` counts besides the keys and the output buffers: this record's and
        its empty containers', as measured when it was made (see the module's notes)."""

    def settle(self) -> None:
        """Count the keys changed since the last time again (see the module's notes)."""
        unsettled = self.unsettled
        if unsettled:
            for db in unsettled:
                self._dataset += db.settle()
            unsettled.clear()
            self.peak = max(self.peak, self.overhead + self._dataset + self.output_bytes)

    @property
    def dataset_bytes(self) -> int:
        """What the keys hold, as MEMORY USAGE counts them."""
        self.settle()
        return self._dataset

    @property
    def used_memory(self) -> int:
        """Bytes held: the fixed ``overhead``, the keys and the clients' output buffers (as last
        measured)."""
        return self.overhead + self.dataset_bytes + self.output_bytes

    def measure_output(self, output_bytes: int) -> None:
        """The clients' output buffers now hold ``output_bytes``."""
        self.output_bytes = output_bytes
        self.peak = max(self.peak, self.used_memory)

    @property
    def oom(self) -> str | None:
        """While ``used_memory`` is past ``maxmemory``: the error commands that would add data
        are refused with (else None; never while the journal is replayed)."""
        limit = self.maxmemory
        if not limit or self.loading:
            return None
        if self.unsettled:
            self.settle()
        return OOM if self.overhead + self._dataset + self.output_bytes > limit else None

    def keyspace(self, account: str) -> Keyspace:
        keyspace = self._accounts.get(account)
        if keyspace is None:
            keyspace = self._accounts[account] = Keyspace(self, account)
        return keyspace

    def database(self, account: str, index: int) -> Database:
        return self.keyspace(account).database(index)

    def accounts(self) -> dict[str, Keyspace]:
        return dict(self._accounts)

    def commit(self) -> None:
        """Commit the journal, if there is one (see ``Journal.commit``).

        Raises:
            CommitFailed: see ``Journal.commit``.
        """
        if self.journal is not None:
            self.journal.commit()

    @property
    def refusal(self) -> str | None:
        """The error writes are refused with while the journal cannot be written (else None)."""
        journal = self.journal
        return journal.refusal if journal is not None else None

    def take_keys(self, other: Keyspaces) -> None:
        """Hold exactly the keys (values and expiry times) that ``other`` holds, leaving who
        watches or waits on them as they are: the keys are put back as the journal has them after
        changes that could not be made durable were taken back."""
        other.settle()  # (the counts go with the keys; what is still to count here still is)
        for name in set(self._accounts) | set(other._accounts):
            mine, theirs = self.keyspace(name), other.keyspace(name)
            for index in set(mine._databases) | set(theirs._databases):
                mine.database(index).take_keys(theirs.database(index))
        self._dataset, other._dataset = other._dataset, 0

    def serve_ready(self) -> None:
        """Serve the readers that writes made ready (``Database.serve``), key by key in the order
        the keys were written (a reader served here may write and make others ready: they are
        served in the same loop)."""
        if self._serving:
            return
        self._serving = True
        try:
            while self.ready:
                ready, self.ready = self.ready, {}
                for db, key in ready:
                    db.serve(key)
        finally:
            self._serving = False

    def sweep(self, now: int, seconds: float = SWEEP_SECONDS) -> int:
        """Reclaim expired keys nobody asked for, as redis-server's active expiry does; return how
        many went.

        In each database with keys that carry an expiry, the sweep looks at ``SWEEP_SAMPLE`` of
        them at a time, the next ones along the database's list, and goes on while more than
        ``SWEEP_STALE`` of them had expired, or else of as many random probes of the whole list
        (the keys along the list may all be long-lived while others have expired), for ``seconds``
        of CPU time at most (this thread's: on a busy machine, time spent waiting for a core is not
        counted). ``behind`` then tells whether time ran out first (expired keys are likely left:
        sweep again soon); the next sweep starts where this one stopped.
        """
        self.clock = now // 1000
        databases = [
            db
            for keyspace in self._accounts.values()
            for db in keyspace.databases().values()
            if db.expiring()
        ]
        self.behind = False
        if not databases or self.loading:
            return 0
        deadline = time.thread_time() + seconds
        first = self._next_sweep % len(databases)
        gone = 0
        for n in range(len(databases)):
            db = databases[(first + n) % len(databases)]
            enough = SWEEP_SAMPLE * SWEEP_STALE
            while True:
                expired = db.sweep(now, SWEEP_SAMPLE)
                gone += expired
                if expired <= enough and db.stale(now, SWEEP_SAMPLE) <= enough:
                    break
                if time.thread_time() >= deadline:
                    self._next_sweep = (first + n) % len(databases)
                    self.behind = True
                    return gone
        return gone
