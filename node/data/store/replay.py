"""Running records through the Redis command handlers, to rebuild the keys at start.

The records are the commands that repeat each change exactly (``node.resp.commands.streams`` says how
they are written), so replaying them through the very handlers that made the changes rebuilds the same
state, with no second implementation of any command to keep in step. They run on a connection
without a socket, signed in as a user of the record's account, its database selected per record.
While replaying, the keyspaces' journal is detached (nothing is written again) and keys do not
expire (``Keyspaces.loading``): an expiry that passed before the crash was followed, if anyone
noticed it, by a recorded DEL; one that nobody noticed happens again once the node runs. For the
same reason an expiry time already past when its record is replayed is set, not carried out: a
later record (PERSIST, another PEXPIREAT) may still change it, as it did when the node ran.

A record was journaled only after its command succeeded, so a record the handlers refuse means the
file does not say what happened: replay stops there (``ReplayRefused``), naming where.

``replay_file`` rebuilds keys from a whole file, both at start and when changes that could not be
written are taken back (``node.data.store.journal``).
"""

from __future__ import annotations

from pathlib import Path

import attrs

from node.broker import Broker
from node.config.options import UserConfig
from node.data.keyspace import Keyspaces
from node.data.store.records import Record, RecordReader
from node.resp.connection import RespConnection

__all__ = ["ReplayRefused", "Replayed", "Replayer", "replay_file"]

_READ_CHUNK = 1 << 20


class ReplayRefused(ValueError):
    """A record the command handlers refused: the file is damaged (or was written by a node that
    behaved otherwise). ``where`` names the file and the batch."""

    def __init__(self, where: str, command: str, reply: str) -> None:
        super().__init__(f"{where}: {command} was refused: {reply}")
        self.where = where


class Replayer:
    """Runs records on one internal connection."""

    def __init__(self, broker: Broker) -> None:
        self._conn = RespConnection(broker, 0)
        self._users: dict[str, UserConfig] = {}
        self.records = 0

    def run(self, record: Record, where: str) -> None:
        """Run one record (``where`` names it if it is refused).

        Raises:
            ReplayRefused: the handlers answered it with an error.
        """
        conn = self._conn
        if conn.account.name != record.account or conn.user is None:
            user = self._users.get(record.account)
            if user is None:
                user = self._users[record.account] = UserConfig(account=record.account)
            conn.user = user
            conn.account = conn.broker.account(record.account)
        conn.db = record.db
        conn._execute(record.args)
        self.records += 1
        if conn.outbound[:1] == b"-":
            reply = bytes(conn.outbound[:200]).rstrip().decode("utf-8", "replace")
            conn.outbound.clear()
            raise ReplayRefused(where, record.args[0].decode("utf-8", "replace"), reply)
        conn.outbound.clear()


@attrs.frozen
class Replayed:
    """What ``replay_file`` read: ``records`` run, the file's whole batches ending at ``end``, and
    ``torn`` bytes after it (an incomplete last batch)."""

    records: int
    end: int
    torn: int


def replay_file(
    path: Path, broker: Broker, keyspaces: Keyspaces, *, limit: int | None = None
) -> Replayed:
    """Run every whole batch of the file at ``path`` (of its first ``limit`` bytes, if given) into
    ``keyspaces`` (empty, or the broker's own at start), as ``broker``'s accounts.

    Raises:
        CorruptRecord: a complete record failed its checks.
        ReplayRefused: the handlers refused a record.
        OSError: the file could not be read.
    """
    replayer = Replayer(broker)
    reader = RecordReader()
    own, broker.keyspaces = broker.keyspaces, keyspaces  # (what the handlers reach)
    journal, keyspaces.journal = keyspaces.journal, None
    keyspaces.loading = True
    try:
        left = limit if limit is not None else -1
        with path.open("rb") as file:
            while chunk := file.read(_READ_CHUNK if left < 0 else min(left, _READ_CHUNK)):
                left -= len(chunk)
                for record in reader.feed(chunk):
                    replayer.run(record, f"{path} (batch ending at offset {reader.offset})")
    finally:
        keyspaces.loading = False
        keyspaces.journal = journal
        broker.keyspaces = own
    return Replayed(replayer.records, reader.offset, reader.pending)
