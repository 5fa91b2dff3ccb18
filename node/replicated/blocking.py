"""Blocking reads (``XREAD``/``XREADGROUP ... BLOCK``) of keys led by another node.

No node waits on another's behalf. The node a client sent the read to asks the leader once, with
the read as sent (``probe``): the leader runs it without its ``BLOCK`` (once linearizable, and an
``XREADGROUP``'s delivery committed before it answers, as any forwarded command), with each ``$``
turned into the ID the stream ends at there. If that serves the read, its reply is the answer;
else the answer is ``again``: the read to wait with (``$`` resolved, ``BLOCK`` kept). The client's
node then blocks the client as it blocks any reader, on its own replica of the keys: the timeout
(``BLOCK 0``: none), ``CLIENT UNBLOCK``, the client's going, held input and the memory a waiter
takes are those of any blocked read. Every committed entry its replica applies that writes one
of the keys wakes it, and the woken read asks the group's leader again (whichever node leads it
then; it blocks again if the leader has nothing for it yet). So a leader holds nothing for
readers of other nodes, and a route that closes leaves no wait behind: a probe is answered, or
the cluster's error, within the time any forwarded command takes.

``again``'s reply is a byte no RESP reply starts with, then the read's arguments, each as its
length in decimal, a newline, and its bytes.
"""

from __future__ import annotations

from node.data.keyspace import ANY_WRITE, Database
from node.data.keyspaces import Keyspaces
from node.data.store import Execute
from node.data.streams import Stream, format_id
from node.integers import string2ll
from node.replicated.forwarded import CLUSTERDOWN, carry_out, request_keys
from node.resp.commands.common import now_ms
from node.resp.connection import RespConnection
from node.resp.writer import error

__all__ = [
    "AGAIN",
    "again",
    "answer_or_wait",
    "block_at",
    "carry_out_request",
    "resolved",
    "unblocked",
    "unpack_again",
]

AGAIN = b"\x00"
_READS = frozenset([b"xread", b"xreadgroup"])
_NULLS = (b"*-1\r\n", b"_\r\n")
"""A read that served nothing, in RESP2 and RESP3."""


def block_at(args: list[bytes]) -> int:
    """Where a stream read's ``BLOCK`` option is (-1: none, or not a stream read)."""
    if args[0].lower() not in _READS:
        return -1
    at = 1
    while at < len(args):
        option = args[at].upper()
        if option == b"STREAMS":
            return -1
        if option == b"BLOCK":
            return at
        at += 3 if option == b"GROUP" else 2 if option == b"COUNT" else 1
    return -1


def unblocked(args: list[bytes]) -> list[bytes]:
    """The read without its ``BLOCK`` options (one with a timeout that is not a valid one is
    left as it is: it answers the timeout's error, as it would anywhere)."""
    out = list(args)
    while (at := block_at(out)) > 0:
        timeout = out[at + 1] if at + 1 < len(out) else b""
        valid = string2ll(timeout)
        if valid is None or valid < 0:
            return list(args)
        del out[at : at + 2]
    return out


def resolved(db: Database, args: list[bytes]) -> list[bytes]:
    """An ``XREAD``'s arguments with each ``$`` as the ID its stream in ``db`` ends at (a key that
    holds no stream: ``0-0``; what the read then answers is the read's own)."""
    if args[0].lower() != b"xread":
        return list(args)
    upper = [arg.upper() for arg in args]
    if b"STREAMS" not in upper:
        return list(args)
    streams = upper.index(b"STREAMS") + 1
    half = (len(args) - streams) // 2
    out = list(args)
    now = now_ms()
    for n in range(half):
        at = streams + half + n
        if args[at] == b"$":
            stream = db.get(args[streams + n], now)
            out[at] = format_id(stream.last_id if isinstance(stream, Stream) else 0)
    return out


def carry_out_request(
    execute: Execute, keyspaces: Keyspaces, account: str, db: int, args: list[bytes]
) -> bytes:
    """``forwarded.carry_out``, but a read that may block answers at once: its reply if it was
    served, else ``again``'s."""
    if block_at(args) <= 0:
        return carry_out(execute, account, db, args)
    waiting = resolved(keyspaces.database(account, db), args)
    return again(waiting, carry_out(execute, account, db, unblocked(waiting)))


def again(args: list[bytes], reply: bytes) -> bytes:
    """The probe's answer: ``reply`` if it served the read, else ``AGAIN`` with ``args``."""
    if reply not in _NULLS:
        return reply
    return AGAIN + b"".join(b"%d\n%s" % (len(arg), arg) for arg in args)


def unpack_again(reply: bytes) -> list[bytes] | None:
    """The read to wait with, from an ``again`` answer (None: it is not one, or damaged)."""
    if reply[:1] != AGAIN:
        return None
    args: list[bytes] = []
    at = 1
    while at < len(reply):
        newline = reply.find(b"\n", at, at + 12)
        size = reply[at:newline]
        if newline < 0 or not size.isdigit():
            return None
        end = newline + 1 + int(size)
        if end > len(reply):
            return None
        args.append(reply[newline + 1 : end])
        at = end
    return args if args and block_at(args) > 0 else None


def answer_or_wait(conn: RespConnection, reply: bytes, deadline: float) -> None:
    """Given the leader's answer to a read ``conn`` sent: its reply (or the cluster's error), or
    block ``conn`` on its keys here until ``deadline`` (-1: its own timeout from now), to ask
    again when a write to one of them is applied."""
    waiting = unpack_again(reply)
    if waiting is None:
        conn.reply(reply if reply[:1] not in (AGAIN, b"") else error(CLUSTERDOWN))
        return
    if conn.closing is not None:
        return
    at = block_at(waiting) + 1
    timeout = string2ll(waiting[at]) if at < len(waiting) else None
    if timeout is None or timeout < 0:
        conn.reply(error(CLUSTERDOWN))
        return
    blocking = conn.blocking
    if deadline >= 0:
        blocking.retry_deadline = deadline  # (``block`` keeps a retry's deadline)
    try:
        waits = [(key, ANY_WRITE) for key in request_keys(waiting)]
        conn.block(waits, timeout_ms=timeout, retry=waiting)
    finally:
        blocking.retry_deadline = -1.0
