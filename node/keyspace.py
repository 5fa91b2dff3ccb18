"""Keys, as redis-server keeps them: per account, sixteen numbered databases of named values.

The only values are streams (``node.streams``). A key may carry an expiry time; an expired key is
gone the moment anyone looks (and a periodic sweep reclaims those nobody looks at). Two kinds of
client wait on keys: WATCH (a write to a watched key spoils the watcher's transaction) and blocking
reads (a write to the key wakes them, in the order they blocked). Both are registered here so that
every write, whoever makes it, reaches them through one call: ``Database.touch``.

An expiry that removes a key is recorded in the journal as a DEL (as redis-server propagates one),
so that replaying the journal, during which nothing expires (``Keyspaces.loading``), never finds an
old value where a new one was written.

Woken readers are not served inside the write that woke them: they queue on the node-wide
``Keyspaces.ready`` and are served once the writing command has finished, as redis-server serves
blocked clients after the command that unblocked them.

**Memory.** ``Keyspaces.used_memory`` is what the keys hold, as MEMORY USAGE counts them (the key's
name and ``Stream.memory_usage``), plus the clients' output buffers. The keys' part is a running
total: a key written (``Database.touch``) or whose consumer groups changed (``Database.resized``)
is only noted, and counted again when the total is read (``Keyspaces.settle``). A write thus costs
a set insertion; reading the total costs one ``memory_usage`` per key changed since (a few
additions, however big the stream), and the total is exact whenever it is read: by each command
that may add data while a limit is set, by INFO, and by the node ten times a second. The output
buffers are summed over every client at those ten times a second while a limit is set
(``output_bytes``), and at once for INFO. Past ``maxmemory`` the node behaves as redis-server with
``maxmemory-policy noeviction``: commands that would add data are refused (``Keyspaces.oom``),
reads and deletions go on, and deleting brings the total down at once. Python does not give freed
memory back to the system promptly, so the process's resident size is reported beside it, not used
for the limit.
"""

from __future__ import annotations

import collections
import itertools
import sys
from collections.abc import Iterator
from typing import Protocol

from node.streams import Stream

__all__ = [
    "DATABASES",
    "OOM",
    "CommitFailed",
    "Database",
    "Journal",
    "Keyspace",
    "Keyspaces",
    "Persistence",
    "Waiter",
    "Watcher",
]

DATABASES = 16
"""Numbered databases per account (redis-server's default ``databases``)."""
_KEY = sys.getsizeof(b"")
"""What a key's name holds besides its bytes."""
OOM = "-OOM command not allowed when used memory > 'maxmemory'."
"""redis-server's refusal of a command that would add data past ``maxmemory``."""


class Watcher(Protocol):
    """A client that WATCHes keys: a write to one of them spoils its next EXEC."""

    dirty: bool


class Waiter(Protocol):
    """A client blocked on keys until one of them is written (or its timeout passes)."""

    def wake(self) -> None:
        """Called once the writing command has finished; the waiter retries its command."""
        ...


class CommitFailed(Exception):
    """The journal could not make a batch of changes durable. The changes have been taken back
    (the keys are again as the journal holds them), so nothing of that batch may be acknowledged;
    the journal refuses writes until it can write again (``Journal.refusal``)."""


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

    def info(self) -> list[tuple[str, int | str]]:
        """INFO's persistence fields."""
        ...

    def rewrite(self) -> bool:
        """Start compacting the journal in the background; False if that is under way already."""
        ...


class Database:
    """One numbered database of one account."""

    __slots__ = (
        "_blocked", "_expires", "_resized", "_sizes", "_watchers", "account", "index", "keys",
        "keyspaces",
    )  # fmt: skip

    def __init__(self, keyspaces: Keyspaces, account: str, index: int) -> None:
        self.keyspaces = keyspaces
        self.account = account
        self.index = index
        self.keys: dict[bytes, Stream] = {}
        self._expires: dict[bytes, int] = {}
        """Key -> when it expires, in milliseconds since the epoch."""
        self._watchers: dict[bytes, set[Watcher]] = {}
        self._blocked: dict[bytes, dict[Waiter, None]] = {}
        self._sizes: dict[bytes, int] = {}
        """Key -> the bytes it was last counted as (see ``Keyspaces.settle``)."""
        self._resized: set[bytes] = set()
        """Keys to count again."""

    # -- reading ---------------------------------------------------------------------------------

    def get(self, key: bytes, now: int) -> Stream | None:
        """The value at ``key``, unless it has expired (it is removed then)."""
        value = self.keys.get(key)
        if value is not None and self._expires and key in self._expires and self._expired(key, now):
            return None
        return value

    def _expired(self, key: bytes, now: int) -> bool:
        if self._expires[key] > now or self.keyspaces.loading:
            return False
        self._expire(key)
        return True

    def _expire(self, key: bytes) -> None:
        self.delete(key)
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
        return len(self._expires)

    def expires_at(self, key: bytes) -> int | None:
        return self._expires.get(key)

    # -- writing ---------------------------------------------------------------------------------

    def put(self, key: bytes, value: Stream) -> None:
        """Store a new value (its expiry, if the key had one, is gone with the old value)."""
        self._expires.pop(key, None)
        self.keys[key] = value
        self.touch(key)

    def delete(self, key: bytes) -> bool:
        """Remove a key; whether there was one."""
        if self.keys.pop(key, None) is None:
            return False
        self._expires.pop(key, None)
        self.touch(key)
        return True

    def set_expiry(self, key: bytes, when: int | None) -> None:
        """Make ``key`` expire at ``when`` (milliseconds since the epoch), or never (None)."""
        if when is None:
            self._expires.pop(key, None)
        else:
            self._expires[key] = when
        self.touch(key)

    def take_keys(self, other: Database) -> None:
        """Hold exactly ``other``'s keys and expiry times (see ``Keyspaces.take_keys``)."""
        self.keys = other.keys
        self._expires = other._expires
        self._sizes = other._sizes
        other.keys, other._expires, other._sizes = {}, {}, {}

    def flush(self) -> None:
        """Remove every key (FLUSHDB), spoiling every watcher and waking every blocked reader."""
        for key in list(self.keys):
            self.delete(key)

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
                size = _KEY + len(key) + value.memory_usage()
                change += size - sizes.get(key, 0)
                sizes[key] = size
        self._resized.clear()
        return change

    def touch(self, key: bytes) -> None:
        """``key`` was written: count its memory again (``resized``), spoil its watchers'
        transactions and wake its blocked readers."""
        if not self._resized:
            self.keyspaces.unsettled.append(self)
        self._resized.add(key)
        watchers = self._watchers.get(key)
        if watchers:
            for watcher in watchers:
                watcher.dirty = True
        blocked = self._blocked.pop(key, None)
        if blocked:
            self.keyspaces.ready.extend(blocked)

    def sweep(self, now: int, budget: int) -> int:
        """Remove up to ``budget`` expired keys; return how many went."""
        gone = [key for key, when in itertools.islice(self._expires.items(), budget) if when <= now]
        for key in gone:
            self._expire(key)
        if len(self._expires) > budget:  # (look at other keys next time)
            for key in list(itertools.islice(self._expires, budget)):
                self._expires[key] = self._expires.pop(key)
        return len(gone)

    # -- who waits on keys -----------------------------------------------------------------------

    def watch(self, key: bytes, watcher: Watcher) -> None:
        self._watchers.setdefault(key, set()).add(watcher)

    def unwatch(self, key: bytes, watcher: Watcher) -> None:
        watchers = self._watchers.get(key)
        if watchers is not None:
            watchers.discard(watcher)
            if not watchers:
                del self._watchers[key]

    def block(self, key: bytes, waiter: Waiter) -> None:
        self._blocked.setdefault(key, {})[waiter] = None

    def unblock(self, key: bytes, waiter: Waiter) -> None:
        waiters = self._blocked.get(key)
        if waiters is not None:
            waiters.pop(waiter, None)
            if not waiters:
                del self._blocked[key]


class Keyspace:
    """One account's databases, created as they are first used."""

    __slots__ = ("_databases", "keyspaces", "name")

    def __init__(self, keyspaces: Keyspaces, name: str) -> None:
        self.keyspaces = keyspaces
        self.name = name
        self._databases: dict[int, Database] = {}

    def database(self, index: int) -> Database:
        db = self._databases.get(index)
        if db is None:
            db = self._databases[index] = Database(self.keyspaces, self.name, index)
        return db

    def databases(self) -> dict[int, Database]:
        """The databases in use, by number."""
        return dict(self._databases)


class Keyspaces:
    """Every account's keys on this node, and the queue of blocked readers a write woke."""

    __slots__ = (
        "_accounts", "_dataset", "_serving", "journal", "loading", "maxmemory", "output_bytes",
        "peak", "ready", "store", "unsettled",
    )  # fmt: skip

    def __init__(self) -> None:
        self._accounts: dict[str, Keyspace] = {}
        self.journal: Journal | None = None
        """Where changes are recorded (None: keys live in memory only)."""
        self.store: Persistence | None = None
        """The store that keeps the journal (None: keys live in memory only)."""
        self.loading = False
        """The journal is being replayed: keys do not expire meanwhile."""
        self.ready: collections.deque[Waiter] = collections.deque()
        self._serving = False
        self.maxmemory = 0
        """Bytes of ``used_memory`` past which commands that add data are refused (0: no limit)."""
        self._dataset = 0
        self.unsettled: list[Database] = []
        """Databases with keys to count again (``Database.resized``)."""
        self.output_bytes = 0
        """Clients' output buffers, as last measured (``measure_output``)."""
        self.peak = 0
        """The most ``used_memory`` was seen to be."""

    def settle(self) -> None:
        """Count the keys changed since the last time again (see the module's notes)."""
        unsettled = self.unsettled
        if unsettled:
            for db in unsettled:
                self._dataset += db.settle()
            unsettled.clear()
            self.peak = max(self.peak, self._dataset + self.output_bytes)

    @property
    def dataset_bytes(self) -> int:
        """What the keys hold, as MEMORY USAGE counts them."""
        self.settle()
        return self._dataset

    @property
    def used_memory(self) -> int:
        """Bytes held: the keys and the clients' output buffers (as last measured)."""
        return self.dataset_bytes + self.output_bytes

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
        return OOM if self._dataset + self.output_bytes > limit else None

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
        """Wake the readers that writes made ready, in the order they blocked (a reader woken
        here may write and make others ready: they are served in the same loop)."""
        if self._serving:
            return
        self._serving = True
        try:
            ready = self.ready
            while ready:
                ready.popleft().wake()
        finally:
            self._serving = False

    def sweep(self, now: int, budget: int = 20) -> int:
        """Remove expired keys nobody asked for, a few per database; return how many went."""
        return sum(
            db.sweep(now, budget)
            for keyspace in list(self._accounts.values())
            for db in list(keyspace.databases().values())
        )
