"""Keeping Redis keys across restarts: an append-only file of every change, replayed at start and
rewritten in the background (``journal``), its record format (``records``), the commands that
rebuild the current state (``snapshot``) and the replay through the command handlers (``replay``),
which the store is handed as an ``Executor``."""

from node.data.store.journal import FILE_NAME, Store, StoreError
from node.data.store.records import COMMIT, CorruptRecord, Record, RecordReader, encode
from node.data.store.replay import CommandRefused, Execute, Executor

__all__ = [
    "COMMIT",
    "FILE_NAME",
    "CommandRefused",
    "CorruptRecord",
    "Execute",
    "Executor",
    "Record",
    "RecordReader",
    "Store",
    "StoreError",
    "encode",
]
