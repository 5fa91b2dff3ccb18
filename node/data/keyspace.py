"""Keys, as redis-server keeps them: one numbered database of named values (``Database``); every
account's sixteen of them are held node-wide by ``node.data.keyspaces``.

A value is a stream (``node.data.streams``) or a string: ``bytes``, or a ``bytearray`` once APPEND
or SETRANGE changed it in place (redis-server's ``raw`` encoding, which such a change leaves). A
command that finds a value of another kind than it works on raises ``WrongType``
(``Database.stream``, ``Database.string``), which the connection answers with ``WRONGTYPE``. A key
may carry an expiry time; an expired key is gone the moment anyone looks, and a sweep reclaims those
nobody looks at as redis-server's active expiry does (``Database.sweep``). Two kinds of client wait
on keys: WATCH (a write to a watched key spoils the watcher's transaction) and blocking reads (a
write to the key wakes those it lets be served, in the order they blocked). Both are registered here
so that every write, whoever makes it, reaches them through one call: ``Database.touch``. The same
call tells the node's ``KeyTracker`` (client-side caching's invalidations) when there is one, and
``Database.notify`` announces what a write did as a keyspace notification
(``node.data.notifications``); with neither in use a write pays one test for each.

A command that reads a key looks it up with ``Database.read`` (or ``read_string``,
``read_stream``), as redis-server's read lookups: the lookup is counted as a hit or a miss
(``Shared.hits``, ``Shared.misses``: INFO's ``keyspace_hits`` and ``keyspace_misses``, one
addition each time) and a miss is announced as ``keymiss``; OBJECT's lookups
(``Database.inspect``) are counted but not announced. Writes, and the lookups redis-server does not
count (SCAN, KEYS, RANDOMKEY, MEMORY USAGE, renames and the like), use ``get``.

An expiry that removes a key is recorded in the journal as a DEL (as redis-server propagates one),
so that replaying the journal, during which nothing expires (``Shared.loading``), never finds an
old value where a new one was written. ``Shared.may_expire`` may keep a node from removing some
keys (replicated keys: only their group's leader removes them, and a replica waits for its DEL, as
a Redis replica waits for its master's): such a key, once its time is past, is absent to every
lookup but stays until the DEL comes.

Readers are not served inside the write that made them ready: the key queues on the node-wide
``Shared.ready`` and its readers are served once the writing command has finished, as
redis-server serves blocked clients after the command that unblocked them. A blocked reader says
what it waits for as a ``Condition``; readers waiting for equal conditions on a key form one queue,
so a write costs a check per queue and a wake-up per reader served, however many wait in vain.

What the databases share (those counters, the hooks a write calls, the queues of databases to
count again and of keys to serve) is one ``Shared`` record, which the node-wide ``Keyspaces``
extends; a database knows nothing else of it.
"""

from __future__ import annotations

import heapq
import random
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Protocol

from node.config.keyspace_events import EXPIRED, KEY_MISS, NEW
from node.data.durability import Journal
from node.data.notifications import Notifier
from node.data.streams import Stream

__all__ = [
    "ANY_WRITE",
    "DATABASES",
    "WRONGTYPE",
    "Condition",
    "Database",
    "KeyTracker",
    "Shared",
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


class Shared:
    """What every database of the node shares: the lookup and expiry counters, the hooks a write
    calls (the journal, the ``KeyTracker``, the notifier), whether the journal is being replayed,
    and the queues of databases whose keys to count again and of keys whose blocked readers to
    serve. ``Keyspaces``, which holds every database, extends this record; a concrete class rather
    than a protocol, so that the compiled database code reads and writes these fields directly."""

    __slots__ = (
        "_serving",
        "clock",
        "expired_keys",
        "hits",
        "journal",
        "loading",
        "may_expire",
        "misses",
        "notifier",
        "ready",
        "touching",
        "tracker",
        "unsettled",
    )

    def __init__(self) -> None:
        self.journal: Journal | None = None
        """Where changes are recorded (None: keys live in memory only)."""
        self.loading = False
        """The journal is being replayed: keys do not expire meanwhile."""
        self.may_expire: Callable[[bytes], bool] | None = None
        """Whether this node may remove the key as expired now (None: any key). A key it may not
        remove is absent to lookups once its time is past, but kept."""
        self.ready: dict[tuple[Database, bytes], None] = {}
        """Keys written since their blocked readers were last looked at, in the order written."""
        self._serving = False
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
        self.unsettled: list[Database] = []
        """Databases with keys to count again (``Database.resized``)."""
        self.notifier = Notifier()
        """``notify-keyspace-events``, and where events are published."""
        self.tracker: KeyTracker | None = None
        """Told of every change to a key while any client tracks keys (None: nobody does)."""

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

    def __init__(self, keyspaces: Shared, account: str, index: int) -> None:
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
        """Key -> ``Shared.clock`` when it was last read or written (OBJECT IDLETIME)."""

    # -- reading ---------------------------------------------------------------------------------

    def get(self, key: bytes, now: int) -> Value | None:
        """The value at ``key``, unless it has expired (it is removed then)."""
        value = self.keys.get(key)
        if value is not None and self._expires:
            place = self._expires.get(key)
            if place is not None and self._times[place] <= now and not self.keyspaces.loading:
                may_expire = self.keyspaces.may_expire
                if may_expire is None or may_expire(key):
                    self._expire(key)
                return None
        return value

    def read(self, key: bytes, now: int, touch: bool = True) -> Value | None:
        """``get``, for a command that reads the key: counted as a hit or a miss
        (``Shared.hits``, ``Shared.misses``), a miss announced as ``keymiss``; a key found
        is marked accessed now (``access``) unless not to ``touch`` it, or while nothing is
        (``Shared.touching``)."""
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
        marked, ``Shared.touching``), count its memory again (``resized``), spoil its watchers'
        transactions, and have its blocked readers looked at once the writing command has finished
        (``Shared.serve_ready``)."""
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
        may_expire = self.keyspaces.may_expire
        cursor = self._cursor
        gone = 0
        for _ in range(min(count, len(keys))):
            if cursor >= len(keys):
                cursor = 0
            if times[cursor] <= now and (may_expire is None or may_expire(keys[cursor])):
                self._expire(keys[cursor])  # (the last key moves here: it is looked at next)
                gone += 1
            else:
                cursor += 1
        self._cursor = cursor
        return gone

    def stale(self, now: int, sample: int) -> int:
        """How many of ``sample`` keys with an expiry, picked at random, have expired and may be
        removed here (nothing is removed)."""
        times, keys = self._times, self._expiring
        may_expire = self.keyspaces.may_expire
        size = len(times)
        expired = 0
        for _ in range(sample if size else 0):
            at = int(random.random() * size)
            if times[at] <= now and (may_expire is None or may_expire(keys[at])):
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
