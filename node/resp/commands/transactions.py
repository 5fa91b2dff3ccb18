"""The transaction commands (MULTI, EXEC, DISCARD, WATCH, UNWATCH), as redis-server 7.2 answers
them. The queue and the watched keys are the connection's: it queues what follows MULTI, and runs
the queue as EXEC's (``RespConnection.exec_queued``)."""

from __future__ import annotations

from typing import Final

from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import OK

__all__ = ["COMMANDS"]


def _multi(conn: RespConnection, args: list[bytes]) -> None:
    if conn.queued is not None:
        conn.error("MULTI calls can not be nested")
        return
    conn.start_transaction()
    conn.reply(OK)


def _exec(conn: RespConnection, args: list[bytes]) -> None:
    if conn.queued is None:
        conn.error("EXEC without MULTI")
        return
    conn.exec_queued()


def _discard(conn: RespConnection, args: list[bytes]) -> None:
    if conn.queued is None:
        conn.error("DISCARD without MULTI")
        return
    conn.queued = None
    conn.unwatch()
    conn.reply(OK)


def _watch(conn: RespConnection, args: list[bytes]) -> None:
    if conn.queued is not None:
        conn.error("WATCH inside MULTI is not allowed")
        return
    conn.watch(args[1:])
    conn.reply(OK)


def _unwatch(conn: RespConnection, args: list[bytes]) -> None:
    conn.unwatch()
    conn.reply(OK)


COMMANDS: Final = (
    Command("multi", 1, _multi, "unqueued noscript"),
    Command("exec", 1, _exec, "on_keys ends_multi noscript"),
    Command("discard", 1, _discard, "ends_multi noscript"),
    Command("watch", -2, _watch, "unqueued noscript", keys=(1, -1, 1)),
    Command("unwatch", 1, _unwatch, "noscript"),
)
"""The transaction commands, in COMMAND's order."""
