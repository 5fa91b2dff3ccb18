"""A journal that keeps the records of the changes a command makes, for a replica group to commit.

On a node whose keys are replicated, ``Keyspaces.journal`` is a ``Capture``: the command handlers
record each change through it (``RespConnection.log_write``) exactly as they would into the store's
append-only file, and the command path (``node.replicated.path``) takes the records a command made
(``take``) and proposes them to the group that holds its keys. Durability is the group's (its Raft
log is fsynced before an entry commits), so ``commit`` has nothing to do. An expiry is recorded as
the DEL that removes the key: only a group's leader removes its keys as expired, and its replicas
remove them when that DEL is applied (``KeyRouter``: a replica's clock never decides).
"""

from __future__ import annotations

from cluster.placement import Layout
from node.data.store.records import COMMIT, RecordReader, encode

__all__ = ["Capture", "by_group"]


class Capture:
    """Records appended since the last ``take`` (a ``node.data.keyspace.Journal``)."""

    def __init__(self) -> None:
        self._records = bytearray()

    def append(self, account: str, db: int, args: list[bytes]) -> None:
        self._records += encode(account, db, args)

    def expire(self, account: str, db: int, key: bytes) -> None:
        self._records += encode(account, db, [b"DEL", key])

    def take(self) -> bytes:
        """The records appended since the last call."""
        records = bytes(self._records)
        self._records.clear()
        return records

    @property
    def buffered(self) -> int:
        return len(self._records)

    @property
    def refusal(self) -> str | None:
        return None

    @property
    def discards(self) -> int:
        return 0

    @property
    def size_bytes(self) -> int:
        return 0

    @property
    def fsync_lag_seconds(self) -> float:
        return 0.0

    def commit(self) -> None:
        """Nothing: the group that commits the records makes them durable."""


def by_group(layout: Layout, records: bytes) -> dict[str, bytes]:
    """Records (each on one key, as removals are) by the group that holds their key."""
    parts: dict[str, list[bytes]] = {}
    for record in RecordReader().feed(records + COMMIT):
        name = layout.group_of(record.args[1]).name
        parts.setdefault(name, []).append(encode(record.account, record.db, record.args))
    return {name: b"".join(part) for name, part in parts.items()}
