"""The stream commands on entries (XADD, XTRIM, XRANGE, XREVRANGE, XLEN, XDEL, XSETID), as
redis-server 7.2 parses and answers them, over the data structures of ``node.data.streams``; and
what the stream command modules share: entries written as replies, core errors, and the records
that journal a consumer group's state (``log_claims``, ``log_position``).

Reading (XREAD, XREADGROUP) is ``stream_reads``'s, consumer groups and XINFO ``stream_groups``'s.
Arguments are checked in redis-server's order, so the same bad request earns the same error. Every
change is also written to the connection's journal as the command that repeats it exactly, the way
redis-server propagates it to its append-only file: an XADD with the ID it got, an approximate trim
as the exact length it left, a consumer-group read as XCLAIM ... FORCE JUSTID LASTID plus the
group's position. Replaying the journal therefore rebuilds the same streams, groups and PELs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from node.config.keyspace_events import STREAM
from node.data.stream_writes import add_entry, trim_record
from node.data.streams import (
    ConsumerGroup,
    Stream,
    StreamError,
    Trim,
    format_id,
    format_parts,
    parse_add_id,
    parse_bound,
    parse_id,
)
from node.integers import string2ll
from node.resp.commands.common import NOT_INTEGER, SYNTAX, now_ms
from node.resp.connection import Handler, RespConnection
from node.resp.dispatch import Command
from node.resp.writer import OK, Writer, as_text, bulk, integer

__all__ = [
    "COMMANDS",
    "Entry",
    "Fields",
    "entries_reply",
    "entry_reply",
    "fail",
    "id_reply",
    "log_claims",
    "log_position",
    "nogroup",
]

Fields = list[bytes]
Entry = tuple[int, Fields]


# -- what the stream command modules share ------------------------------------------------------


def fail(conn: RespConnection, exc: StreamError) -> None:
    """Reply with a core error (its text carries its own code)."""
    conn.error("-" + str(exc))


def _write_entry(out: bytearray, writer: Writer, entry_id: int, fields: Fields | None) -> None:
    """``[id, [field, value, ...]]``; a deleted entry's fields are a null array."""
    out += b"*2\r\n"
    out += id_reply(entry_id)
    if fields is None:
        out += writer.null_array
        return
    out += b"*%d\r\n" % len(fields)
    for field in fields:
        out += b"$%d\r\n%b\r\n" % (len(field), field)


def entry_reply(writer: Writer, entry_id: int, fields: Fields | None) -> bytes:
    out = bytearray()
    _write_entry(out, writer, entry_id, fields)
    return bytes(out)


def entries_reply(writer: Writer, entries: Sequence[tuple[int, Fields | None]]) -> bytes:
    """(Written into one buffer: a read answers with up to thousands of entries.)"""
    out = bytearray(b"*%d\r\n" % len(entries))
    for entry_id, fields in entries:
        _write_entry(out, writer, entry_id, fields)
    return bytes(out)


def id_reply(entry_id: int) -> bytes:
    return bulk(format_id(entry_id))


def nogroup(key: bytes, group: bytes, where: str = "") -> str:
    return f"-NOGROUP No such key '{as_text(key)}' or consumer group '{as_text(group)}'{where}"


def log_claims(
    conn: RespConnection, key: bytes, name: bytes, group: ConsumerGroup, ids: Iterable[int]
) -> None:
    """PEL entries as the XCLAIMs that recreate them exactly (``streamPropagateXCLAIM``)."""
    if conn.broker.keyspaces.journal is None:
        return  # (the records are not even made)
    for entry_id in ids:
        nack = group.pel.get(entry_id)
        if nack is None:
            continue
        conn.log_write(
            [
                b"XCLAIM", key, name, nack.consumer.name, b"0", format_id(entry_id),
                b"TIME", b"%d" % nack.delivery_time, b"RETRYCOUNT", b"%d" % nack.delivery_count,
                b"FORCE", b"JUSTID", b"LASTID", format_id(group.last_id),
            ]
        )  # fmt: skip


def log_position(conn: RespConnection, key: bytes, name: bytes, group: ConsumerGroup) -> None:
    """A group's last delivered ID and read counter, as the XGROUP SETID that restores them."""
    entries_read = group.entries_read if group.entries_read is not None else -1
    conn.log_write(
        [b"XGROUP", b"SETID", key, name, format_id(group.last_id), b"ENTRIESREAD", b"%d" % entries_read]
    )


# -- XADD and XTRIM ------------------------------------------------------------------------------


class _TrimArgs:
    """What XADD's and XTRIM's shared options said."""

    __slots__ = ("auto", "id_arg", "next", "nomkstream", "trim")

    def __init__(self) -> None:
        self.trim: Trim | None = None
        self.nomkstream = False
        self.id_arg: bytes | None = None  # (XADD: None for "*")
        self.auto = False
        self.next = 0  # XADD: the index of the ID argument


def _parse_trim(conn: RespConnection, args: list[bytes], xadd: bool) -> _TrimArgs | None:
    """``streamParseAddOrTrimArgsOrReply``: the options, in order; None once an error is sent."""
    parsed = _TrimArgs()
    strategy: str | None = None
    threshold = 0
    approximate = False
    limit: int | None = None
    i = 2
    while i < len(args):
        if xadd and args[i] == b"*":
            parsed.auto = True
            break
        more = len(args) - 1 - i
        option = args[i].lower()
        if option in (b"maxlen", b"minid") and more:
            if strategy is not None:
                conn.error("syntax error, MAXLEN and MINID options at the same time are not compatible")
                return None
            approximate = False
            following = args[i + 1]
            if more >= 2 and following in (b"~", b"="):
                approximate = following == b"~"
                i += 1
            value = args[i + 1]
            if option == b"maxlen":
                number = string2ll(value)
                if number is None:
                    conn.error(NOT_INTEGER)
                    return None
                if number < 0:
                    conn.error("The MAXLEN argument must be >= 0.")
                    return None
                threshold, strategy = number, "maxlen"
            else:
                try:
                    threshold = parse_id(value)
                except StreamError as exc:
                    fail(conn, exc)
                    return None
                strategy = "minid"
            i += 2
        elif option == b"limit" and more:
            number = string2ll(args[i + 1])
            if number is None:
                conn.error(NOT_INTEGER)
                return None
            if number < 0:
                conn.error("The LIMIT argument must be >= 0.")
                return None
            limit = number
            i += 2
        elif xadd and option == b"nomkstream":
            parsed.nomkstream = True
            i += 1
        elif xadd:
            if not _valid_add_id(args[i]):
                conn.error(_INVALID_ID)
                return None
            parsed.id_arg = args[i]
            break
        else:
            conn.error(SYNTAX)
            return None
    parsed.next = i
    if limit and strategy is None:
        conn.error("syntax error, LIMIT cannot be used without specifying a trimming strategy")
        return None
    if not xadd and strategy is None:
        conn.error("syntax error, XTRIM must be called with a trimming strategy")
        return None
    if limit is not None and not approximate:
        conn.error("syntax error, LIMIT cannot be used without the special ~ option")
        return None
    if strategy is not None:
        parsed.trim = Trim("maxlen" if strategy == "maxlen" else "minid", threshold, approximate, limit)
    return parsed


_INVALID_ID = "Invalid stream ID specified as stream command argument"


def _valid_add_id(arg: bytes) -> bool:
    """Whether XADD could read ``arg`` as an ID (``ms``, ``ms-seq`` or ``ms-*``)."""
    try:
        parse_id(arg[:-2] if arg.endswith(b"-*") else arg)
    except StreamError:
        return False
    return True


_AUTO: Final = _TrimArgs()
"""What ``XADD key * ...`` says, the most common XADD, shared rather than parsed each time (never
changed)."""
_AUTO.auto, _AUTO.next = True, 2


def _xadd(conn: RespConnection, args: list[bytes]) -> None:
    parsed = _AUTO if args[2] == b"*" else _parse_trim(conn, args, xadd=True)
    if parsed is None:
        return
    fields = args[parsed.next + 1 :]
    if len(fields) < 2 or len(fields) % 2:
        conn.error("wrong number of arguments for 'xadd' command")
        return
    id_arg = b"*" if parsed.auto else parsed.id_arg
    assert id_arg is not None
    if not id_arg.endswith(b"*") and parse_id(id_arg) == 0:
        conn.error("The ID specified in XADD must be greater than 0-0")
        return
    db, key, now = conn.database, args[1], now_ms()
    stream = db.stream(key, now)
    created = stream is None
    if stream is None:
        if parsed.nomkstream:
            conn.reply(conn.writer.null)
            return
        stream = Stream()
    settings = conn.broker.redis_settings  # (read at each XADD, as redis-server does)
    stream.node_max_entries = settings.stream_node_max_entries
    stream.node_max_bytes = settings.stream_node_max_bytes
    if stream.exhausted():
        conn.error("The stream has exhausted the last possible ID, unable to add more items")
        return
    try:
        new = parse_add_id(id_arg, stream, now)
    except StreamError as exc:
        fail(conn, exc)
        return
    trims = () if parsed.trim is None else (parsed.trim,)
    add_entry(db, key, stream, new, fields, created=created, trims=trims, log=conn.log_write)
    conn.reply(bulk(format_parts(new)))


def _xtrim(conn: RespConnection, args: list[bytes]) -> None:
    parsed = _parse_trim(conn, args, xadd=False)
    if parsed is None:
        return
    assert parsed.trim is not None
    db, key = conn.database, args[1]
    stream = db.stream(key, now_ms())
    removed = stream.trim(parsed.trim) if stream is not None else 0
    if stream is not None and removed:
        conn.log_write(trim_record(key, stream))
        db.touch(key)
        db.notify(STREAM, b"xtrim", key)
    conn.reply(integer(removed))


# -- ranges, length, deletion, the last ID --------------------------------------------------------


def _range(reverse: bool) -> Handler:
    def handler(conn: RespConnection, args: list[bytes]) -> None:
        first, second = (args[3], args[2]) if reverse else (args[2], args[3])
        try:
            start = parse_bound(first, end=False)
            end = parse_bound(second, end=True)
        except StreamError as exc:
            fail(conn, exc)
            return
        count = -1
        j = 4
        while j < len(args):
            if args[j].lower() == b"count" and j + 1 < len(args):
                number = string2ll(args[j + 1])
                if number is None:
                    conn.error(NOT_INTEGER)
                    return
                count = max(number, 0)
                j += 2
            else:
                conn.error(SYNTAX)
                return
        stream = conn.database.read_stream(args[1], now_ms())
        if stream is None:
            conn.reply(b"*0\r\n")
        elif count == 0:
            conn.reply(conn.writer.null_array)
        elif start is None or end is None or start > end:
            conn.reply(b"*0\r\n")
        else:
            found = stream.range(start, end, count if count > 0 else None, reverse=reverse)
            conn.reply(entries_reply(conn.writer, found))

    return handler


def _xlen(conn: RespConnection, args: list[bytes]) -> None:
    stream = conn.database.read_stream(args[1], now_ms())
    conn.reply(integer(stream.length if stream is not None else 0))


def _xdel(conn: RespConnection, args: list[bytes]) -> None:
    db, key = conn.database, args[1]
    stream = db.stream(key, now_ms())
    if stream is None:
        conn.reply(integer(0))
        return
    try:
        ids = [parse_id(arg) for arg in args[2:]]
    except StreamError as exc:
        fail(conn, exc)
        return
    deleted = stream.delete(ids)
    if deleted:
        conn.log_write([b"XDEL", key, *args[2:]])
        db.touch(key)
        db.notify(STREAM, b"xdel", key)
    conn.reply(integer(deleted))


def _xsetid(conn: RespConnection, args: list[bytes]) -> None:
    try:
        last_id = parse_id(args[2])
    except StreamError as exc:
        fail(conn, exc)
        return
    entries_added: int | None = None
    max_deleted: int | None = None
    i = 3
    while i < len(args):
        option = args[i].lower()
        if option == b"entriesadded" and i + 1 < len(args):
            number = string2ll(args[i + 1])
            if number is None:
                conn.error(NOT_INTEGER)
                return
            if number < 0:
                conn.error("entries_added must be positive")
                return
            entries_added = number
        elif option == b"maxdeletedid" and i + 1 < len(args):
            try:
                max_deleted = parse_id(args[i + 1])
            except StreamError as exc:
                fail(conn, exc)
                return
            if last_id < max_deleted:
                conn.error(
                    "The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
                )
                return
        else:
            conn.error(SYNTAX)
            return
        i += 2
    db, key = conn.database, args[1]
    stream = db.stream(key, now_ms())
    if stream is None:
        conn.error("no such key")
        return
    try:
        stream.set_id(last_id, entries_added, max_deleted)
    except StreamError as exc:
        fail(conn, exc)
        return
    conn.log_write(list(args))
    db.touch(key)
    db.notify(STREAM, b"xsetid", key)
    conn.reply(OK)


COMMANDS: Final = (
    Command("xadd", -5, _xadd, "write denyoom", keys=(1, 1, 1)),
    Command("xtrim", -4, _xtrim, "write", keys=(1, 1, 1)),
    Command("xrange", -4, _range(reverse=False), "readonly", keys=(1, 1, 1)),
    Command("xrevrange", -4, _range(reverse=True), "readonly", keys=(1, 1, 1)),
    Command("xlen", 2, _xlen, "readonly", keys=(1, 1, 1)),
    Command("xdel", -3, _xdel, "write", keys=(1, 1, 1)),
    Command("xsetid", -3, _xsetid, "write denyoom", keys=(1, 1, 1)),
)
"""The stream commands on entries, in COMMAND's order."""
