"""The stream reads (XREAD, XREADGROUP), as redis-server 7.2 parses and answers them: what is
there is served at once; otherwise, with BLOCK, the connection waits for a write to one of the keys
(``RespConnection.block``) and runs the read again then. A group read journals what it changed in
the group (``streams.log_claims``, ``log_position``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from node.config.keyspace_events import STREAM
from node.data.keyspace import Condition, Database
from node.data.streams import MAX_ID, ConsumerGroup, Stream, StreamError, format_id, parse_id
from node.integers import string2ll
from node.resp.commands.common import NOT_INTEGER, SYNTAX, now_ms
from node.resp.commands.streams import (
    Fields,
    entries_reply,
    fail,
    log_claims,
    log_position,
    nogroup,
)
from node.resp.connection import Handler, RespConnection
from node.resp.dispatch import Command
from node.resp.writer import array, as_text, bulk

__all__ = ["COMMANDS"]


_NEW = -1
"""The ``>`` ID of XREADGROUP, as a position (no real ID is negative)."""


class _ReadArgs:
    __slots__ = ("block", "consumer", "count", "group", "keys", "noack", "positions", "streams_at")

    def __init__(self) -> None:
        self.block: int | None = None
        self.count: int | None = None
        self.group: bytes | None = None
        self.consumer = b""
        self.noack = False
        self.streams_at = 0
        self.keys: list[bytes] = []
        self.positions: list[int] = []


def _parse_read(conn: RespConnection, args: list[bytes], group_read: bool) -> _ReadArgs | None:
    parsed = _ReadArgs()
    name = "xreadgroup" if group_read else "xread"
    i = 1
    while i < len(args):
        more = len(args) - i - 1
        option = args[i].lower()
        if option == b"block" and more:
            if conn.scripted:
                conn.error(f"{as_text(args[0])} command is not allowed with BLOCK option from scripts")
                return None
            number = string2ll(args[i + 1])
            if number is None:
                conn.error("timeout is not an integer or out of range")
                return None
            if number < 0:
                conn.error("timeout is negative")
                return None
            parsed.block = number
            i += 2
        elif option == b"count" and more:
            number = string2ll(args[i + 1])
            if number is None:
                conn.error(NOT_INTEGER)
                return None
            parsed.count = number if number > 0 else None
            i += 2
        elif option == b"streams" and more:
            parsed.streams_at = i + 1
            if (len(args) - parsed.streams_at) % 2:
                symbol = ">" if group_read else "$"
                conn.error(
                    f"Unbalanced '{name}' list of streams: for each stream key an ID or "
                    f"'{symbol}' must be specified."
                )
                return None
            break
        elif option == b"group" and more >= 2:
            if not group_read:
                conn.error("The GROUP option is only supported by XREADGROUP. You called XREAD instead.")
                return None
            parsed.group, parsed.consumer = args[i + 1], args[i + 2]
            i += 3
        elif option == b"noack":
            if not group_read:
                conn.error("The NOACK option is only supported by XREADGROUP. You called XREAD instead.")
                return None
            parsed.noack = True
            i += 1
        else:
            conn.error(SYNTAX)
            return None
    if not parsed.streams_at:
        conn.error(SYNTAX)
        return None
    if group_read and parsed.group is None:
        conn.error("Missing GROUP option for XREADGROUP")
        return None
    half = (len(args) - parsed.streams_at) // 2
    parsed.keys = args[parsed.streams_at : parsed.streams_at + half]
    return parsed


def _read(group_read: bool) -> Handler:
    """XREAD and XREADGROUP: serve what is there, or block until a write to one of the keys."""

    def handler(conn: RespConnection, args: list[bytes]) -> None:
        parsed = _parse_read(conn, args, group_read)
        if parsed is None:
            return
        db, now = conn.database, now_ms()
        ids_at = parsed.streams_at + len(parsed.keys)
        groups: list[ConsumerGroup | None] = []
        for key, arg in zip(parsed.keys, args[ids_at:], strict=True):
            stream = db.read_stream(key, now)
            group = None
            if parsed.group is not None:
                group = stream.groups.get(parsed.group) if stream is not None else None
                if group is None:
                    conn.error(nogroup(key, parsed.group, " in XREADGROUP with GROUP option"))
                    return
            groups.append(group)
            if arg == b"$":
                if group_read:
                    conn.error(
                        "The $ ID is meaningless in the context of XREADGROUP: you want to read the "
                        "history of this consumer by specifying a proper ID, or use the > ID to get "
                        "new messages. The $ ID would just return an empty result set."
                    )
                    return
                parsed.positions.append(stream.last_id if stream is not None else 0)
            elif arg == b">":
                if not group_read:
                    conn.error(
                        "The > ID can be specified only when calling XREADGROUP using the GROUP "
                        "<group> <consumer> option."
                    )
                    return
                parsed.positions.append(_NEW)
            else:
                try:
                    position = parse_id(arg)
                except StreamError as exc:
                    fail(conn, exc)
                    return
                parsed.positions.append(_NEW if position == MAX_ID and group_read else position)
        served = _serve(conn, parsed, groups, now)
        if served:
            writer = conn.writer
            if writer.version == 2:
                body = b"".join(array([bulk(k), entries_reply(writer, e)]) for k, e in served)
                conn.reply(b"*%d\r\n%b" % (len(served), body))
            else:
                conn.reply(writer.map((bulk(k), entries_reply(writer, e)) for k, e in served))
        elif parsed.block is not None and conn.may_block:
            # ("$" becomes the ID it stood for, so a retry waits for what comes after it.)
            retry = list(args)
            for n, arg in enumerate(args[ids_at:]):
                if arg == b"$":
                    retry[ids_at + n] = format_id(parsed.positions[n])
            conn.block(_waits(parsed), timeout_ms=parsed.block, retry=retry)
        else:
            conn.reply(conn.writer.null_array)

    return handler


class _Undelivered:
    """What an XREADGROUP ``>`` reader waits for: an entry its group has not delivered yet, or the
    group (or the key) gone, which the read answers with NOGROUP. Readers of one group share it:
    the first of them served takes what was new."""

    __slots__ = ("group",)

    def __init__(self, group: bytes) -> None:
        self.group = group

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Undelivered) and other.group == self.group

    def __hash__(self) -> int:
        return hash(self.group)

    def met(self, db: Database, key: bytes) -> bool:
        stream = db.get(key, now_ms())
        if not isinstance(stream, Stream):  # (gone, or now a string: the retry answers)
            return True
        group = stream.groups.get(self.group)
        return group is None or stream.has_after(group.last_id)


class _After:
    """What an XREAD reader waits for: an entry after the ID it reads from (``$`` resolved when it
    blocked). Readers from one ID share it."""

    __slots__ = ("position",)

    def __init__(self, position: int) -> None:
        self.position = position

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _After) and other.position == self.position

    def __hash__(self) -> int:
        return hash(self.position)

    def met(self, db: Database, key: bytes) -> bool:
        stream = db.get(key, now_ms())  # (a string there keeps the reader waiting)
        return isinstance(stream, Stream) and stream.has_after(self.position)


def _waits(parsed: _ReadArgs) -> list[tuple[bytes, Condition]]:
    """Each key a blocking read waits on, and what for (a group read blocks only on ``>``)."""
    if parsed.group is not None:
        until: Condition = _Undelivered(parsed.group)
        return [(key, until) for key in parsed.keys]
    return [(key, _After(position)) for key, position in zip(parsed.keys, parsed.positions, strict=True)]


def _serve(
    conn: RespConnection, parsed: _ReadArgs, groups: list[ConsumerGroup | None], now: int
) -> list[tuple[bytes, Sequence[tuple[int, Fields | None]]]]:
    """What each stream has for the reader, in argument order (streams with nothing left out)."""
    db = conn.database
    served: list[tuple[bytes, Sequence[tuple[int, Fields | None]]]] = []
    for key, position, group in zip(parsed.keys, parsed.positions, groups, strict=True):
        stream = db.read_stream(key, now)
        if stream is None:
            continue
        if group is None:
            if stream.has_after(position):
                served.append((key, stream.after(position, parsed.count)))
            continue
        assert parsed.group is not None
        created = parsed.consumer not in group.consumers
        consumer = group.consumer(parsed.consumer, now)
        consumer.seen_time = now
        if created:  # (whether or not it is given anything)
            conn.log_write([b"XGROUP", b"CREATECONSUMER", key, parsed.group, parsed.consumer])
            db.notify(STREAM, b"xgroup-createconsumer", key)
        if position != _NEW:
            history = group.read_history(stream, consumer, position, parsed.count, now)
            served.append((key, history))
            log_claims(conn, key, parsed.group, group, (i for i, f in history if f is not None))
        elif stream.has_after(group.last_id):
            fresh = group.read_new(stream, consumer, parsed.count, parsed.noack, now)
            if fresh:
                served.append((key, fresh))
                if not parsed.noack:
                    log_claims(conn, key, parsed.group, group, (i for i, _ in fresh))
                log_position(conn, key, parsed.group, group)
        db.resized(key)  # (the consumer, or what it was given, is pending in the group now)
    return served


COMMANDS: Final = (
    Command("xread", -4, _read(group_read=False), "readonly"),
    Command("xreadgroup", -7, _read(group_read=True), "write"),
)
"""The stream reads, in COMMAND's order."""
