"""Running Redis commands without a client: what the store replays its journal through.

A ``CommandExecutor`` runs one command at a time on a connection without a socket, with the same
command table as clients have, so each command runs exactly as it did for the client that sent it
first: signed in to the command's account (as a user made up for it, unless the connection's
``no_auth_user`` is of that account), with the command's database selected. It answers the
command's reply, or raises ``CommandRefused`` when that reply is an error. Bound to a broker
(``functools.partial(CommandExecutor, broker)``), the class is the ``Executor`` that
``node.data.store`` is handed: the store names the keyspaces to run in (the broker's own at start, a
scratch one when it takes changes back), and the broker holds those while a command runs.
"""

from __future__ import annotations

from node.broker import Broker
from node.config.options import UserConfig
from node.data.keyspaces import Keyspaces
from node.data.store import CommandRefused
from node.resp.commands.table import COMMANDS
from node.resp.connection import RespConnection
from node.resp.dispatch import CommandTable
from node.resp.writer import RESP2, RESP3

__all__ = ["CommandExecutor"]


class CommandExecutor:
    """Runs commands on ``broker``'s accounts, in ``keyspaces``."""

    def __init__(
        self,
        broker: Broker,
        keyspaces: Keyspaces,
        commands: CommandTable[RespConnection] = COMMANDS,
        *,
        protocol: int = 2,
    ) -> None:
        self._broker = broker
        self._keyspaces = keyspaces
        self._conn = RespConnection(broker, 0, commands)
        self._conn.writer = RESP3 if protocol == 3 else RESP2
        """(Replies in RESP ``protocol``: 2, as the journal's replay reads them, or 3.)"""
        self._users: dict[str, UserConfig] = {}

    def __call__(self, account: str, db: int, args: list[bytes]) -> bytes:
        """Run ``args`` in database ``db`` of ``account``; return the reply.

        Raises:
            CommandRefused: the reply is an error.
        """
        conn = self._conn
        if conn.account.name != account or conn.user is None:
            user = self._users.get(account)
            if user is None:
                user = self._users[account] = UserConfig(account=account)
            conn.switch_user(user)
        conn.db = db
        broker = self._broker
        own, broker.keyspaces = broker.keyspaces, self._keyspaces  # (what the handlers reach)
        try:
            conn.execute(args)
        finally:
            broker.keyspaces = own
        reply = conn.take_output()
        conn.output_sent(reply, len(reply))
        if reply[:1] == b"-":
            raise CommandRefused(bytes(reply))
        return bytes(reply)
