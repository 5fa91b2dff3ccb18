"""The transaction commands (MULTI, EXEC, DISCARD, WATCH, UNWATCH), as redis-server 7.2 answers
them. The queue and the watched keys are the connection's ``Transaction`` (``node.resp.transaction``):
the connection queues what follows MULTI, and runs the queue as EXEC's
(``RespConnection.exec_queued``)."""

from __future__ import annotations

from typing import Final

from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import OK

__all__ = ["COMMANDS"]


def _multi(conn: RespConnection, args: list[bytes]) -> None:
    if conn.transaction.queued is not None:
        conn.error("MULTI calls can not be nested")
        return
    conn.transaction.start()
    conn.reply(OK)


def _exec(conn: RespConnection, args: list[bytes]) -> None:
    if conn.transaction.queued is None:
        conn.error("EXEC without MULTI")
        return
    conn.exec_queued()


def _discard(conn: RespConnection, args: list[bytes]) -> None:
    if conn.transaction.queued is None:
        conn.error("DISCARD without MULTI")
        return
    conn.transaction.discard()
    conn.reply(OK)


def _watch(conn: RespConnection, args: list[bytes]) -> None:
    if conn.transaction.queued is not None:
        conn.error("WATCH inside MULTI is not allowed")
        return
    conn.transaction.watch(conn.database, args[1:])
    conn.reply(OK)


def _unwatch(conn: RespConnection, args: list[bytes]) -> None:
    conn.transaction.unwatch()
    conn.reply(OK)


COMMANDS: Final = (
    Command("multi", 1, _multi, "unqueued noscript"),
    Command("exec", 1, _exec, "on_keys ends_multi noscript"),
    Command("discard", 1, _discard, "ends_multi noscript"),
    Command("watch", -2, _watch, "unqueued noscript", keys=(1, -1, 1)),
    Command("unwatch", 1, _unwatch, "noscript"),
)
"""The transaction commands, in COMMAND's order."""
