"""Running records through the Redis command handlers, to rebuild the keys at start.

The records are the commands that repeat each change exactly (``node.resp.commands.streams`` says how
they are written), so replaying them through the very handlers that made the changes rebuilds the same
state, with no second implementation of any command to keep in step. The store does not know the
handlers: it is handed an ``Executor`` (``node.resp.executor.CommandExecutor`` bound to the node's
broker), which runs each record for its account and database in the keyspaces it is given. While
replaying, the keyspaces' journal is detached (nothing is written again) and keys do not expire
(``Keyspaces.loading``): an expiry that passed before the crash was followed, if anyone noticed it, by a
recorded DEL; one that nobody noticed happens again once the node runs. For the same reason an expiry
time already past when its record is replayed is set, not carried out: a later record (PERSIST, another
PEXPIREAT) may still change it, as it did when the node ran.

A record was journaled only after its command succeeded, so a record the handlers refuse means the
file does not say what happened: replay stops there (``ReplayRefused``), naming where.

``replay_file`` rebuilds keys from a whole file, both at start and when changes that could not be
written are taken back (``node.data.store.journal``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from node.data.keyspaces import Keyspaces
from node.data.store.records import RecordReader

__all__ = [
    "CommandRefused",
    "Execute",
    "Executor",
    "ReplayRefused",
    "Replayed",
    "replay_file",
    "replaying",
]

_READ_CHUNK = 1 << 20

Execute = Callable[[str, int, list[bytes]], bytes]
"""Runs one Redis command (the arguments, its name first) in a database (the number) of an account
(the name), as a client signed in to that account would, and returns the reply.

Raises:
    CommandRefused: the reply is an error.
"""
Executor = Callable[[Keyspaces], Execute]
"""Makes an ``Execute`` that runs commands on the node's accounts, in the keyspaces it is given."""


class CommandRefused(Exception):
    """A command was answered with an error: ``reply``."""

    def __init__(self, reply: bytes) -> None:
        super().__init__(reply)
        self.reply = reply


class ReplayRefused(ValueError):
    """A record the command handlers refused: the file is damaged (or was written by a node that
    behaved otherwise). ``where`` names the file and the batch."""

    def __init__(self, where: str, command: str, reply: str) -> None:
        super().__init__(f"{where}: {command} was refused: {reply}")
        self.where = where


@attrs.frozen
class Replayed:
    """What ``replay_file`` read: ``records`` run, the file's whole batches ending at ``end``, and
    ``torn`` bytes after it (an incomplete last batch)."""

    records: int
    end: int
    torn: int


@contextlib.contextmanager
def replaying(keyspaces: Keyspaces) -> Iterator[None]:
    """Run records into ``keyspaces``: their journal detached (nothing is written again) and no
    key expiring meanwhile (``Keyspaces.loading``)."""
    journal, keyspaces.journal = keyspaces.journal, None
    keyspaces.loading = True
    try:
        yield
    finally:
        keyspaces.loading = False
        keyspaces.journal = journal


def replay_file(
    path: Path,
    keyspaces: Keyspaces,
    executor: Executor,
    *,
    limit: int | None = None,
) -> Replayed:
    """Run every whole batch of the file at ``path`` (of its first ``limit`` bytes, if given) into
    ``keyspaces`` (empty, or the node's own at start), through an ``Execute`` that ``executor``
    makes.

    Raises:
        CorruptRecord: a complete record failed its checks.
        ReplayRefused: the handlers refused a record.
        OSError: the file could not be read.
    """
    execute = executor(keyspaces)
    reader = RecordReader()
    records = 0
    with replaying(keyspaces):
        left = limit if limit is not None else -1
        with path.open("rb") as file:
            while chunk := file.read(_READ_CHUNK if left < 0 else min(left, _READ_CHUNK)):
                left -= len(chunk)
                for record in reader.feed(chunk):
                    records += 1
                    try:
                        execute(record.account, record.db, record.args)
                    except CommandRefused as exc:
                        where = f"{path} (batch ending at offset {reader.offset})"
                        command = record.args[0].decode("utf-8", "replace")
                        reply = exc.reply[:200].rstrip().decode("utf-8", "replace")
                        raise ReplayRefused(where, command, reply) from None
    return Replayed(records, reader.offset, reader.pending)
