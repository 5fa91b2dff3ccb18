"""What the keys ask of the store that keeps them across restarts: a ``Journal`` that records each
change as the command that repeats it and makes a batch of them durable (``Journal.commit``), or
raises ``CommitFailed`` after taking the batch back; and ``Persistence``, the store as INFO, CONFIG
GET and BGREWRITEAOF see it. ``node.data.store`` implements both; ``node.data.keyspace`` calls them.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["CommitFailed", "Journal", "Persistence"]


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
