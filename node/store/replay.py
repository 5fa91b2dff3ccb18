"""Running records through the Redis command handlers, to rebuild the keys at start.

The records are the commands that repeat each change exactly (``node.resp.streams`` says how they
are written), so replaying them through the very handlers that made the changes rebuilds the same
state, with no second implementation of any command to keep in step. They run on a connection
without a socket, signed in as a user of the record's account, its database selected per record.
While replaying, the keyspaces' journal is detached (nothing is written again) and keys do not
expire (``Keyspaces.loading``): an expiry that passed before the crash was followed, if anyone
noticed it, by a recorded DEL; one that nobody noticed happens again once the node runs.
"""

from __future__ import annotations

import logging

from node.broker import Broker
from node.config import UserConfig
from node.resp.connection import RespConnection
from node.store.records import Record

__all__ = ["Replayer"]

log = logging.getLogger("pubmesh")


class Replayer:
    """Runs records on one internal connection; counts those the handlers refused."""

    def __init__(self, broker: Broker) -> None:
        self._conn = RespConnection(broker, 0)
        self._users: dict[str, UserConfig] = {}
        self.records = 0
        self.refused = 0

    def run(self, record: Record, where: str) -> None:
        """Run one record (``where`` names it in a log line if it is refused)."""
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
            self.refused += 1
            reply = bytes(conn.outbound[:200]).rstrip().decode("utf-8", "replace")
            log.warning("Replaying %s: %s refused it: %s", where, record.args[0].decode(), reply)
        conn.outbound.clear()
