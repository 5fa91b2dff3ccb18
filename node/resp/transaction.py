"""One connection's MULTI/EXEC transaction, as redis-server 7.2 keeps one (``Transaction``).

What it holds: the commands queued since MULTI (``queued``; None outside a transaction), whether
one was refused while queuing (``failed``: EXEC then aborts with EXECABORT), whether one may add
data (``denyoom``: EXEC is refused past ``maxmemory``), and the keys WATCHed. The transaction is
those keys' ``Watcher`` (``node.data.keyspace``): a write to one of them makes it ``dirty``, and
its next EXEC answers a null array. WATCH lasts until EXEC, DISCARD, UNWATCH or RESET
(``unwatch``). Checking each request and running the queue are the connection's
(``node.resp.connection``); this record keeps the state and changes it only as told.
"""

from __future__ import annotations

from node.data.keyspace import Database

__all__ = ["Transaction"]


class Transaction:
    """One connection's MULTI queue and WATCHed keys (see the module's notes)."""

    __slots__ = ("_watching", "denyoom", "dirty", "failed", "queued")

    def __init__(self) -> None:
        self.queued: list[list[bytes]] | None = None
        """Commands queued since MULTI (None outside a transaction)."""
        self.failed = False
        """A command was refused since MULTI (the EXEC aborts)."""
        self.denyoom = False
        """A command that may add data was queued since MULTI."""
        self.dirty = False
        """A key WATCHed was written (the next EXEC fails)."""
        self._watching: list[tuple[Database, bytes]] = []

    def start(self) -> None:
        """MULTI: queue the commands that follow."""
        self.queued = []
        self.failed = self.denyoom = False

    def queue(self, args: list[bytes], denyoom: bool) -> None:
        """Queue a command (in a transaction); ``denyoom``: it may add data."""
        assert self.queued is not None
        self.queued.append(args)
        self.denyoom = self.denyoom or denyoom

    def refused(self) -> None:
        """A command was refused: the transaction being queued, if any, fails."""
        self.failed = self.queued is not None

    def discard(self) -> None:
        """End the transaction without running it (DISCARD, an EXEC refused or run, RESET), and
        stop watching."""
        self.queued = None
        self.failed = False
        self.unwatch()

    @property
    def watching(self) -> bool:
        """Whether any key is WATCHed."""
        return bool(self._watching)

    def watch(self, db: Database, keys: list[bytes]) -> None:
        """WATCH ``keys`` of ``db``."""
        for key in keys:
            db.watch(key, self)
            self._watching.append((db, key))

    def unwatch(self) -> None:
        """Stop watching every key (the transaction is clean again)."""
        for db, key in self._watching:
            db.unwatch(key, self)
        self._watching.clear()
        self.dirty = False
