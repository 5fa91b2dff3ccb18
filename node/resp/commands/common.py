"""What the command families share: the error texts several of them use, the clock keys and
stream IDs are measured in, HELP replies, and the Redis connections a command can see."""

from __future__ import annotations

from time import time_ns
from typing import Final

from node.data.keyspace import Database
from node.resp.connection import Handler, RespConnection
from node.resp.writer import array, simple

__all__ = ["NOT_INTEGER", "REDIS_VERSION", "SYNTAX", "help_reply", "now_ms", "resp_clients"]

REDIS_VERSION: Final = "7.2.0"
"""The redis-server version whose behaviour this front door follows (HELLO and INFO report it)."""
NOT_INTEGER: Final = "value is not an integer or out of range"
SYNTAX: Final = "syntax error"


def now_ms() -> int:
    """Wall-clock milliseconds, the time expiry and stream IDs are measured in."""
    return time_ns() // 1_000_000


def expiry_clock(db: Database) -> int:
    """``now_ms()`` for a read of ``db``'s keys, unless none of them has an expiry time: then the
    time cannot matter, and the clock is not read (0). (Most databases hold no expiring key, and
    the clock read was 4% of a pipelined GET's time.)"""
    return now_ms() if db.expiring() else 0


def help_reply(lines: list[bytes]) -> Handler:
    """A HELP subcommand: the lines, each a simple string."""

    def reply(conn: RespConnection, args: list[bytes]) -> None:
        conn.reply(array(simple(line) for line in lines))

    return reply


def resp_clients(conn: RespConnection) -> list[RespConnection]:
    """The Redis connections of this node in the same account (what PUBSUB and CLIENT see)."""
    return [
        c
        for c in conn.broker.clients.values()
        if isinstance(c, RespConnection) and c.account is conn.account
    ]
