"""The transaction commands (MULTI, EXEC, DISCARD, WATCH, UNWATCH), as redis-server 7.2 answers
them. The queue and the watched keys are the connection's ``Transaction`` (``node.resp.transaction``):
the connection queues what follows MULTI; EXEC runs each queued command with its reply captured
(``RespConnection.capture``) and answers them as one array."""

from __future__ import annotations

from typing import Final

from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import OK, array_header

__all__ = ["COMMANDS"]


def _multi(conn: RespConnection, args: list[bytes]) -> None:
    if conn.transaction.queued is not None:
        conn.error("MULTI calls can not be nested")
        return
    conn.transaction.start()
    conn.reply(OK)


def _exec(conn: RespConnection, args: list[bytes]) -> None:
    """Run the queued commands as one, their replies gathered into one array."""
    transaction = conn.transaction
    queued, dirty, failed = transaction.queued, transaction.dirty, transaction.failed
    if queued is None:
        conn.error("EXEC without MULTI")
        return
    transaction.discard()
    if failed:
        conn.error("-EXECABORT Transaction discarded because of previous errors.")
        return
    if dirty:
        conn.reply(conn.writer.null_array)
        return
    replies: list[bytes] = []
    for queued_args in queued:
        command = conn.table.by_name[queued_args[0].lower()]
        if command.subcommands is not None:
            command = command.subcommands[queued_args[1].lower()]
        conn.capture(command, queued_args, replies)
    conn.reply(array_header(len(queued)) + b"".join(replies))


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
    router = conn.broker.key_router
    if router is not None and router.watch(conn, args[1:]):
        return  # (keys led by another node: watched there)
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
