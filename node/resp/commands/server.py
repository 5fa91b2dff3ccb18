"""TIME, BGREWRITEAOF, SAVE, LASTSAVE and SHUTDOWN, as redis-server 7.2 answers them (COMMAND is
``introspection``'s, INFO ``info``'s, CONFIG ``config``'s).

The node's keys are kept in its append-only journal (``node.data.store``): SAVE makes every change
so far durable at once (written and fsynced), which is what redis-server's synchronous save
guarantees; LASTSAVE is when it last did (the node's start before that). SHUTDOWN saves so unless
told NOSAVE, then stops the whole node through the broker's ``stop`` (a node run without one
refuses, as redis-server refuses a shutdown it cannot carry out). Neither runs inside MULTI.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from node.data.durability import CommitFailed
from node.resp.commands.common import SYNTAX
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import OK, array, bulk, integer, simple

__all__ = ["COMMANDS", "last_save"]

log = logging.getLogger("pubmesh")

_MEMORY_ONLY: Final = "keys are kept in memory only (see store_dir)"
_SHUTDOWN_FAILED: Final = "Errors trying to SHUTDOWN. Check logs."
_SHUTDOWN_WORDS: Final = frozenset([b"nosave", b"save", b"now", b"force", b"abort"])


def last_save(conn: RespConnection) -> int:
    """When every change was last made durable by SAVE (Unix seconds), or the node's start."""
    store = conn.broker.keyspaces.store
    saved = store.last_save if store is not None else 0
    return saved or conn.broker.start_ns // 10**9


def _save_now(conn: RespConnection) -> str | None:
    """Write and fsync the journal; why that failed, or None."""
    store = conn.broker.keyspaces.store
    if store is None:
        return f"no file to save to: {_MEMORY_ONLY}"
    try:
        store.save()
    except (CommitFailed, OSError) as exc:
        return str(exc)
    return None


def _bgrewriteaof(conn: RespConnection, args: list[bytes]) -> None:
    store = conn.broker.keyspaces.store
    if store is None:
        conn.error(f"no append only file to rewrite: {_MEMORY_ONLY}")
    elif store.rewrite():
        conn.reply(simple(b"Background append only file rewriting started"))
    else:
        conn.error("Background append only file rewriting already in progress")


def _save(conn: RespConnection, args: list[bytes]) -> None:
    failure = _save_now(conn)
    if failure is None:
        conn.reply(OK)
    else:
        log.error("SAVE failed: %s", failure)
        conn.error(failure)


def _lastsave(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(integer(last_save(conn)))


def _shutdown(conn: RespConnection, args: list[bytes]) -> None:
    words = [arg.lower() for arg in args[1:]]
    if any(word not in _SHUTDOWN_WORDS for word in words):
        conn.error(SYNTAX)
        return
    abort = b"abort" in words
    if (abort and len(words) > 1) or (b"save" in words and b"nosave" in words):
        conn.error(SYNTAX)
        return
    if abort:  # (a shutdown here never waits on anything, so none is ever in progress)
        conn.error("No shutdown in progress.")
        return
    stop = conn.broker.stop
    if stop is None:
        log.warning("SHUTDOWN refused: this node is not run by anything that can stop it")
        conn.error(_SHUTDOWN_FAILED)
        return
    if b"nosave" not in words and conn.broker.keyspaces.store is not None:
        failure = _save_now(conn)
        if failure is not None and b"force" not in words:
            log.error("SHUTDOWN refused: saving failed: %s", failure)
            conn.error(_SHUTDOWN_FAILED)
            return
    log.info("User requested shutdown...")
    stop()


def _time(conn: RespConnection, args: list[bytes]) -> None:
    now = time.time_ns() // 1000
    conn.reply(array([bulk(b"%d" % (now // 10**6)), bulk(b"%d" % (now % 10**6))]))


COMMANDS: Final = (
    Command("time", 1, _time),
    Command("bgrewriteaof", 1, _bgrewriteaof, "admin noscript"),
    Command("save", 1, _save, "admin noscript no_multi"),
    Command("lastsave", 1, _lastsave),
    Command("shutdown", -1, _shutdown, "admin noscript no_multi"),
)
"""The server commands, in COMMAND's order."""
