"""One connection's MULTI/EXEC transaction, as redis-server 7.2 keeps one (``Transaction``).

What it holds: the commands queued since MULTI (``queued``; None outside a transaction), whether
one was refused while queuing (``failed``: EXEC then aborts with EXECABORT), whether one may add
data (``denyoom``: EXEC is refused past ``maxmemory``), and the keys WATCHed. The transaction is
those keys' ``Watcher`` (``node.data.keyspace``): a write to one of them makes it ``dirty``, and
its next EXEC answers a null array. WATCH lasts until EXEC, DISCARD, UNWATCH or RESET
(``unwatch``). Checking each request and running the queue are the connection's
(``node.resp.connection``); this record keeps the state and changes it only as told. Keys watched
on another node, where keys are replicated, are ``remote`` (``node.replicated.watching``): ending
the watch releases them there.
"""

from __future__ import annotations

from typing import Protocol

from node.data.keyspace import Database

__all__ = ["RemoteWatch", "Transaction"]


class RemoteWatch(Protocol):
    """Keys a connection WATCHes on other nodes (``node.replicated.watching.Watched``)."""

    def release(self) -> None:
        """The watch ends without an EXEC that uses it."""


class Transaction:
    """One connection's MULTI queue and WATCHed keys (see the module's notes)."""

    __slots__ = ("_watching", "denyoom", "dirty", "failed", "queued", "remote")

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
        self.remote: RemoteWatch | None = None
        """Keys WATCHed on other nodes, if any."""

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
        """Whether any key is WATCHed here."""
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
        if self.remote is not None:
            self.remote.release()
            self.remote = None
