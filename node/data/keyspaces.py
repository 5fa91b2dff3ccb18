"""Every account's keys on this node (``Keyspaces``): per account, sixteen numbered databases
(``Keyspace``, each ``node.data.keyspace.Database`` made as it is first used) and its function
libraries; the node-wide memory total and ``maxmemory``; the pacing of the active expiry over every
database (``Keyspaces.sweep``: redis-server's); the journal's commit and refusal; and the store
behind it (``Keyspaces.store``). What the databases themselves share and touch on every read and
write (counters, hooks, the queue of readers to serve) is ``node.data.keyspace.Shared``, which
``Keyspaces`` extends: a database sees only that record, never this module.

**Memory.** ``Keyspaces.used_memory`` is a fixed overhead (``Keyspaces.overhead``: the bytes of
the empty records the keys are kept in, measured once when they are made, so an empty node holds
some memory as redis-server always does), plus what the keys hold, as MEMORY USAGE counts them (the
key's name and ``Stream.memory_usage``, or a string's bytes and header: ``key_memory``), plus the
clients' output buffers. The keys' part is a running total: a key written (``Database.touch``) or
whose consumer groups changed (``Database.resized``) is only noted, and counted again when the total
is read (``Keyspaces.settle``). A write thus costs a set insertion; reading the total costs one
``memory_usage`` per key changed since (a few additions, however big the stream), and the total is
exact whenever it is read: by each command that may add data while a limit is set, by INFO, and by
the node ten times a second. A Redis connection also settles the count after each batch of requests
it ran, while the keys they wrote are still in the processor's caches, so the periodic count finds
little left: counted there, a write to each of many keys made it a pause of tens of milliseconds.
The output buffers are summed over every client at those ten times a second while a limit is set
(``output_bytes``), and at once for INFO. Past ``maxmemory`` the node behaves as redis-server with
``maxmemory-policy noeviction``: commands that would add data are refused (``Keyspaces.oom``), reads
and deletions go on, and deleting brings the total down at once. Python does not give freed memory
back to the system promptly, so the process's resident size is reported beside it, not used for the
limit.
"""

from __future__ import annotations

import sys
import time

from node.data.durability import Persistence
from node.data.keyspace import Database, Shared

__all__ = [
    "OOM",
    "SWEEP_SAMPLE",
    "SWEEP_SECONDS",
    "SWEEP_STALE",
    "TRACKING_MAX_KEYS",
    "Keyspace",
    "Keyspaces",
]

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


class Keyspaces(Shared):
    """Every account's keys on this node, and the queue of blocked readers a write woke."""

    __slots__ = (
        "_accounts",
        "_dataset",
        "_next_sweep",
        "behind",
        "maxmemory",
        "output_bytes",
        "overhead",
        "peak",
        "store",
        "tracking_max_keys",
    )

    def __init__(self) -> None:
        super().__init__()
        self._accounts: dict[str, Keyspace] = {}
        self.store: Persistence | None = None
        """The store that keeps the journal (None: keys live in memory only)."""
        self.behind = False
        """The last sweep ran out of time with expired keys likely left."""
        self._next_sweep = 0
        """Where, in the list of databases with expiring keys, the next sweep starts."""
        self.maxmemory = 0
        """Bytes of ``used_memory`` past which commands that add data are refused (0: no limit)."""
        self._dataset = 0
        self.output_bytes = 0
        """Clients' output buffers, as last measured (``measure_output``)."""
        self.peak = 0
        """The most ``used_memory`` was seen to be."""
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
