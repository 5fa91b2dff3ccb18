"""TIME and BGREWRITEAOF, as redis-server 7.2 answers them (COMMAND is ``introspection``'s, INFO
``info``'s, CONFIG ``config``'s)."""

from __future__ import annotations

import time
from typing import Final

from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import array, bulk, simple

__all__ = ["COMMANDS"]


def _bgrewriteaof(conn: RespConnection, args: list[bytes]) -> None:
    store = conn.broker.keyspaces.store
    if store is None:
        conn.error("no append only file to rewrite: keys are kept in memory only (see store_dir)")
    elif store.rewrite():
        conn.reply(simple(b"Background append only file rewriting started"))
    else:
        conn.error("Background append only file rewriting already in progress")


def _time(conn: RespConnection, args: list[bytes]) -> None:
    now = time.time_ns() // 1000
    conn.reply(array([bulk(b"%d" % (now // 10**6)), bulk(b"%d" % (now % 10**6))]))


COMMANDS: Final = (
    Command("time", 1, _time),
    Command("bgrewriteaof", 1, _bgrewriteaof, "admin noscript"),
)
"""The server commands, in COMMAND's order."""
