"""The stream commands (XADD, XRANGE, XREAD, XREADGROUP, XGROUP, XACK, XCLAIM, XINFO ...), as
redis-server 7.2 parses and answers them, over the data structures of ``node.data.streams``.

Arguments are checked in redis-server's order, so the same bad request earns the same error. Every
change is also written to the connection's journal as the command that repeats it exactly, the way
redis-server propagates it to its append-only file: an XADD with the ID it got, an approximate trim
as the exact length it left, a consumer-group read as XCLAIM ... FORCE JUSTID LASTID plus the
group's position. Replaying the journal therefore rebuilds the same streams, groups and PELs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from node.data.keyspace import Condition, Database
from node.data.stream_writes import add_entry, trim_record
from node.data.streams import (
    MAX_ID,
    ConsumerGroup,
    Stream,
    StreamError,
    Trim,
    format_id,
    parse_add_id,
    parse_bound,
    parse_id,
)
from node.integers import string2ll
from node.resp.commands.keys import NOT_INTEGER, SYNTAX, now_ms
from node.resp.writer import OK, Writer, array, bulk, integer

if TYPE_CHECKING:
    from node.resp.connection import Handler, RespConnection

__all__ = ["STREAM_COMMANDS", "XGROUP", "XINFO"]

Fields = list[bytes]
Entry = tuple[int, Fields]


def _text(value: bytes) -> str:
    return value.decode("utf-8", "surrogateescape")


def _fail(conn: RespConnection, exc: StreamError) -> None:
    """Reply with a core error (its text carries its own code)."""
    conn._error("-" + str(exc))


def _write_entry(out: bytearray, writer: Writer, entry_id: int, fields: Fields | None) -> None:
    """``[id, [field, value, ...]]``; a deleted entry's fields are a null array."""
    out += b"*2\r\n"
    out += _id(entry_id)
    if fields is None:
        out += writer.null_array
        return
    out += b"*%d\r\n" % len(fields)
    for field in fields:
        out += b"$%d\r\n%b\r\n" % (len(field), field)


def _entry(writer: Writer, entry_id: int, fields: Fields | None) -> bytes:
    out = bytearray()
    _write_entry(out, writer, entry_id, fields)
    return bytes(out)


def _entries(writer: Writer, entries: Sequence[tuple[int, Fields | None]]) -> bytes:
    """(Written into one buffer: a read answers with up to thousands of entries.)"""
    out = bytearray(b"*%d\r\n" % len(entries))
    for entry_id, fields in entries:
        _write_entry(out, writer, entry_id, fields)
    return bytes(out)


def _id(entry_id: int) -> bytes:
    text = format_id(entry_id)
    return b"$%d\r\n%b\r\n" % (len(text), text)


def _nogroup(key: bytes, group: bytes, where: str = "") -> str:
    return f"-NOGROUP No such key '{_text(key)}' or consumer group '{_text(group)}'{where}"


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
        more = len(args) - 1 - i
        option = args[i].lower()
        if xadd and args[i] == b"*":
            parsed.auto = True
            break
        if option in (b"maxlen", b"minid") and more:
            if strategy is not None:
                conn._error("syntax error, MAXLEN and MINID options at the same time are not compatible")
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
                    conn._error(NOT_INTEGER)
                    return None
                if number < 0:
                    conn._error("The MAXLEN argument must be >= 0.")
                    return None
                threshold, strategy = number, "maxlen"
            else:
                try:
                    threshold = parse_id(value)
                except StreamError as exc:
                    _fail(conn, exc)
                    return None
                strategy = "minid"
            i += 2
        elif option == b"limit" and more:
            number = string2ll(args[i + 1])
            if number is None:
                conn._error(NOT_INTEGER)
                return None
            if number < 0:
                conn._error("The LIMIT argument must be >= 0.")
                return None
            limit = number
            i += 2
        elif xadd and option == b"nomkstream":
            parsed.nomkstream = True
            i += 1
        elif xadd:
            if not _valid_add_id(args[i]):
                conn._error(_INVALID_ID)
                return None
            parsed.id_arg = args[i]
            break
        else:
            conn._error(SYNTAX)
            return None
    parsed.next = i
    if limit and strategy is None:
        conn._error("syntax error, LIMIT cannot be used without specifying a trimming strategy")
        return None
    if not xadd and strategy is None:
        conn._error("syntax error, XTRIM must be called with a trimming strategy")
        return None
    if limit is not None and not approximate:
        conn._error("syntax error, LIMIT cannot be used without the special ~ option")
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


def _xadd(conn: RespConnection, args: list[bytes]) -> None:
    parsed = _parse_trim(conn, args, xadd=True)
    if parsed is None:
        return
    fields = args[parsed.next + 1 :]
    if len(fields) < 2 or len(fields) % 2:
        conn._error("wrong number of arguments for 'xadd' command")
        return
    id_arg = b"*" if parsed.auto else parsed.id_arg
    assert id_arg is not None
    if not id_arg.endswith(b"*") and parse_id(id_arg) == 0:
        conn._error("The ID specified in XADD must be greater than 0-0")
        return
    db, key, now = conn.database, args[1], now_ms()
    stream = db.get(key, now)
    created = stream is None
    if stream is None:
        if parsed.nomkstream:
            conn._reply(conn.writer.null)
            return
        stream = Stream()
    if stream.last_id == MAX_ID:
        conn._error("The stream has exhausted the last possible ID, unable to add more items")
        return
    try:
        entry_id = parse_add_id(id_arg, stream, now)
    except StreamError as exc:
        _fail(conn, exc)
        return
    trims = () if parsed.trim is None else (parsed.trim,)
    add_entry(db, key, stream, entry_id, fields, created=created, trims=trims, log=conn.log_write)
    conn._reply(_id(entry_id))


def _xtrim(conn: RespConnection, args: list[bytes]) -> None:
    parsed = _parse_trim(conn, args, xadd=False)
    if parsed is None:
        return
    assert parsed.trim is not None
    db, key = conn.database, args[1]
    stream = db.get(key, now_ms())
    removed = stream.trim(parsed.trim) if stream is not None else 0
    if stream is not None and removed:
        conn.log_write(trim_record(key, stream))
        db.touch(key)
    conn._reply(integer(removed))


# -- reading -------------------------------------------------------------------------------------


def _range(reverse: bool) -> Handler:
    def handler(conn: RespConnection, args: list[bytes]) -> None:
        first, second = (args[3], args[2]) if reverse else (args[2], args[3])
        try:
            start = parse_bound(first, end=False)
            end = parse_bound(second, end=True)
        except StreamError as exc:
            _fail(conn, exc)
            return
        count = -1
        j = 4
        while j < len(args):
            if args[j].lower() == b"count" and j + 1 < len(args):
                number = string2ll(args[j + 1])
                if number is None:
                    conn._error(NOT_INTEGER)
                    return
                count = max(number, 0)
                j += 2
            else:
                conn._error(SYNTAX)
                return
        stream = conn.database.get(args[1], now_ms())
        if stream is None:
            conn._reply(b"*0\r\n")
        elif count == 0:
            conn._reply(conn.writer.null_array)
        elif start is None or end is None or start > end:
            conn._reply(b"*0\r\n")
        else:
            found = stream.range(start, end, count if count > 0 else None, reverse=reverse)
            conn._reply(_entries(conn.writer, found))

    return handler


def _xlen(conn: RespConnection, args: list[bytes]) -> None:
    stream = conn.database.get(args[1], now_ms())
    conn._reply(integer(stream.length if stream is not None else 0))


def _xdel(conn: RespConnection, args: list[bytes]) -> None:
    db, key = conn.database, args[1]
    stream = db.get(key, now_ms())
    if stream is None:
        conn._reply(integer(0))
        return
    try:
        ids = [parse_id(arg) for arg in args[2:]]
    except StreamError as exc:
        _fail(conn, exc)
        return
    deleted = stream.delete(ids)
    if deleted:
        conn.log_write([b"XDEL", key, *args[2:]])
        db.touch(key)
    conn._reply(integer(deleted))


def _xsetid(conn: RespConnection, args: list[bytes]) -> None:
    try:
        last_id = parse_id(args[2])
    except StreamError as exc:
        _fail(conn, exc)
        return
    entries_added: int | None = None
    max_deleted: int | None = None
    i = 3
    while i < len(args):
        option = args[i].lower()
        if option == b"entriesadded" and i + 1 < len(args):
            number = string2ll(args[i + 1])
            if number is None:
                conn._error(NOT_INTEGER)
                return
            if number < 0:
                conn._error("entries_added must be positive")
                return
            entries_added = number
        elif option == b"maxdeletedid" and i + 1 < len(args):
            try:
                max_deleted = parse_id(args[i + 1])
            except StreamError as exc:
                _fail(conn, exc)
                return
            if last_id < max_deleted:
                conn._error(
                    "The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
                )
                return
        else:
            conn._error(SYNTAX)
            return
        i += 2
    db, key = conn.database, args[1]
    stream = db.get(key, now_ms())
    if stream is None:
        conn._error("no such key")
        return
    try:
        stream.set_id(last_id, entries_added, max_deleted)
    except StreamError as exc:
        _fail(conn, exc)
        return
    conn.log_write(list(args))
    db.touch(key)
    conn._reply(OK)


# -- XREAD and XREADGROUP ------------------------------------------------------------------------

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
            number = string2ll(args[i + 1])
            if number is None:
                conn._error("timeout is not an integer or out of range")
                return None
            if number < 0:
                conn._error("timeout is negative")
                return None
            parsed.block = number
            i += 2
        elif option == b"count" and more:
            number = string2ll(args[i + 1])
            if number is None:
                conn._error(NOT_INTEGER)
                return None
            parsed.count = number if number > 0 else None
            i += 2
        elif option == b"streams" and more:
            parsed.streams_at = i + 1
            if (len(args) - parsed.streams_at) % 2:
                symbol = ">" if group_read else "$"
                conn._error(
                    f"Unbalanced '{name}' list of streams: for each stream key an ID or "
                    f"'{symbol}' must be specified."
                )
                return None
            break
        elif option == b"group" and more >= 2:
            if not group_read:
                conn._error(
                    "The GROUP option is only supported by XREADGROUP. You called XREAD instead."
                )
                return None
            parsed.group, parsed.consumer = args[i + 1], args[i + 2]
            i += 3
        elif option == b"noack":
            if not group_read:
                conn._error(
                    "The NOACK option is only supported by XREADGROUP. You called XREAD instead."
                )
                return None
            parsed.noack = True
            i += 1
        else:
            conn._error(SYNTAX)
            return None
    if not parsed.streams_at:
        conn._error(SYNTAX)
        return None
    if group_read and parsed.group is None:
        conn._error("Missing GROUP option for XREADGROUP")
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
            stream = db.get(key, now)
            group = None
            if parsed.group is not None:
                group = stream.groups.get(parsed.group) if stream is not None else None
                if group is None:
                    conn._error(_nogroup(key, parsed.group, " in XREADGROUP with GROUP option"))
                    return
            groups.append(group)
            if arg == b"$":
                if group_read:
                    conn._error(
                        "The $ ID is meaningless in the context of XREADGROUP: you want to read the "
                        "history of this consumer by specifying a proper ID, or use the > ID to get "
                        "new messages. The $ ID would just return an empty result set."
                    )
                    return
                parsed.positions.append(stream.last_id if stream is not None else 0)
            elif arg == b">":
                if not group_read:
                    conn._error(
                        "The > ID can be specified only when calling XREADGROUP using the GROUP "
                        "<group> <consumer> option."
                    )
                    return
                parsed.positions.append(_NEW)
            else:
                try:
                    position = parse_id(arg)
                except StreamError as exc:
                    _fail(conn, exc)
                    return
                parsed.positions.append(_NEW if position == MAX_ID and group_read else position)
        served = _serve(conn, parsed, groups, now)
        if served:
            writer = conn.writer
            if writer.version == 2:
                body = b"".join(array([bulk(k), _entries(writer, e)]) for k, e in served)
                conn._reply(b"*%d\r\n%b" % (len(served), body))
            else:
                conn._reply(writer.map((bulk(k), _entries(writer, e)) for k, e in served))
        elif parsed.block is not None and conn.may_block:
            # ("$" becomes the ID it stood for, so a retry waits for what comes after it.)
            retry = list(args)
            for n, arg in enumerate(args[ids_at:]):
                if arg == b"$":
                    retry[ids_at + n] = format_id(parsed.positions[n])
            conn.block(_waits(parsed), timeout_ms=parsed.block, retry=retry)
        else:
            conn._reply(conn.writer.null_array)

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
        if stream is None:
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
        stream = db.get(key, now_ms())
        return stream is not None and stream.has_after(self.position)


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
        stream = db.get(key, now)
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
        if position != _NEW:
            history = group.read_history(stream, consumer, position, parsed.count, now)
            served.append((key, history))
            _log_claims(conn, key, parsed.group, group, (i for i, f in history if f is not None))
        elif stream.has_after(group.last_id):
            fresh = group.read_new(stream, consumer, parsed.count, parsed.noack, now)
            if fresh:
                served.append((key, fresh))
                if not parsed.noack:
                    _log_claims(conn, key, parsed.group, group, (i for i, _ in fresh))
                _log_position(conn, key, parsed.group, group)
        db.resized(key)  # (the consumer, or what it was given, is pending in the group now)
    return served


def _log_claims(
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


def _log_new_consumer(conn: RespConnection, args: list[bytes], group: ConsumerGroup) -> None:
    """XCLAIM and XAUTOCLAIM create their consumer even when they claim nothing (``args``: key,
    group, consumer from the second)."""
    if args[3] not in group.consumers:
        conn.log_write([b"XGROUP", b"CREATECONSUMER", args[1], args[2], args[3]])


def _log_position(conn: RespConnection, key: bytes, name: bytes, group: ConsumerGroup) -> None:
    entries_read = group.entries_read if group.entries_read is not None else -1
    conn.log_write(
        [b"XGROUP", b"SETID", key, name, format_id(group.last_id), b"ENTRIESREAD", b"%d" % entries_read]
    )


# -- consumer groups -----------------------------------------------------------------------------


def _subcommand_error(conn: RespConnection, args: list[bytes], command: str) -> None:
    conn._error(
        f"unknown subcommand or wrong number of arguments for '{_text(args[1])[:128]}'. "
        f"Try {command} HELP."
    )


def _xgroup(conn: RespConnection, args: list[bytes]) -> None:
    """XGROUP CREATE / SETID / DESTROY / CREATECONSUMER / DELCONSUMER, checked as ``xgroupCommand``."""
    sub = args[1].lower()
    mkstream = False
    entries_read: int | None = None
    i = 5
    while i < len(args):
        option = args[i].lower()
        if sub == b"create" and option == b"mkstream":
            mkstream = True
            i += 1
        elif sub in (b"create", b"setid") and option == b"entriesread" and i + 1 < len(args):
            number = string2ll(args[i + 1])
            if number is None:
                conn._error(NOT_INTEGER)
                return
            if number < -1:
                conn._error("value for ENTRIESREAD must be positive or -1")
                return
            entries_read = None if number == -1 else number
            i += 2
        else:
            _subcommand_error(conn, args, "XGROUP")
            return
    db, key, name, now = conn.database, args[2], args[3], now_ms()
    stream = db.get(key, now)
    group = stream.groups.get(name) if stream is not None else None
    if not mkstream:
        if stream is None:
            conn._error(
                "The XGROUP subcommand requires the key to exist. Note that for CREATE you may want "
                "to use the MKSTREAM option to create an empty stream automatically."
            )
            return
        if group is None and sub in (b"setid", b"createconsumer", b"delconsumer"):
            conn._error(f"-NOGROUP No such consumer group '{_text(name)}' for key name '{_text(key)}'")
            return
    if sub == b"create" and 5 <= len(args) <= 8:
        _create(conn, args, stream, entries_read)
    elif sub == b"setid" and len(args) in (5, 7):
        assert stream is not None
        assert group is not None
        try:
            last_id = {b"$": stream.last_id, b"-": 0, b"+": MAX_ID}.get(args[4]) or parse_id(args[4])
        except StreamError as exc:
            _fail(conn, exc)
            return
        group.set_id(last_id, entries_read)
        _log_position(conn, key, name, group)
        conn._reply(OK)
    elif sub == b"destroy" and len(args) == 4:
        assert stream is not None
        destroyed = stream.destroy_group(name)
        if destroyed:
            conn.log_write([b"XGROUP", b"DESTROY", key, name])
            db.touch(key)  # (readers blocked on the group get their NOGROUP)
        conn._reply(integer(1 if destroyed else 0))
    elif sub == b"createconsumer" and len(args) == 5:
        assert group is not None
        created = group.create_consumer(args[4], now)
        if created:
            conn.log_write(list(args))
            db.resized(key)
        conn._reply(integer(1 if created else 0))
    elif sub == b"delconsumer" and len(args) == 5:
        assert group is not None
        pending = 0
        if args[4] in group.consumers:
            pending = group.delete_consumer(args[4])
            conn.log_write(list(args))
            db.resized(key)
        conn._reply(integer(pending))
    else:
        _subcommand_error(conn, args, "XGROUP")


def _create(
    conn: RespConnection, args: list[bytes], stream: Stream | None, entries_read: int | None
) -> None:
    db, key, name = conn.database, args[2], args[3]
    try:
        last_id = (stream.last_id if stream is not None else 0) if args[4] == b"$" else parse_id(args[4])
    except StreamError as exc:
        _fail(conn, exc)
        return
    created = stream is None
    if stream is None:
        stream = Stream()
    if not stream.create_group(name, last_id, entries_read):
        conn._error("-BUSYGROUP Consumer Group name already exists")
        return
    if created:
        db.put(key, stream)
    else:
        db.resized(key)
    read = b"%d" % entries_read if entries_read is not None else b"-1"
    conn.log_write(
        [b"XGROUP", b"CREATE", key, name, format_id(last_id), b"MKSTREAM", b"ENTRIESREAD", read]
    )
    conn._reply(OK)


def _group_of(conn: RespConnection, key: bytes, name: bytes) -> tuple[Stream, ConsumerGroup] | None:
    stream = conn.database.get(key, now_ms())
    group = stream.groups.get(name) if stream is not None else None
    return (stream, group) if stream is not None and group is not None else None


def _xack(conn: RespConnection, args: list[bytes]) -> None:
    found = _group_of(conn, args[1], args[2])
    if found is None:
        conn._reply(integer(0))
        return
    try:
        ids = [parse_id(arg) for arg in args[3:]]
    except StreamError as exc:
        _fail(conn, exc)
        return
    acknowledged = found[1].ack(ids)
    if acknowledged:
        conn.log_write(list(args))
        conn.database.resized(args[1])
    conn._reply(integer(acknowledged))


def _xpending(conn: RespConnection, args: list[bytes]) -> None:
    if len(args) != 3 and not 6 <= len(args) <= 9:
        conn._error(SYNTAX)
        return
    min_idle: int | None = None
    count = 0
    start = end = 0
    consumer: bytes | None = None
    if len(args) >= 6:
        at = 3
        if args[3].lower() == b"idle":
            min_idle = string2ll(args[4])
            if min_idle is None:
                conn._error(NOT_INTEGER)
                return
            if len(args) < 8:
                conn._error(SYNTAX)
                return
            at = 5
        number = string2ll(args[at + 2])
        if number is None:
            conn._error(NOT_INTEGER)
            return
        count = max(number, 0)
        try:
            first = parse_bound(args[at], end=False)
            last = parse_bound(args[at + 1], end=True)
        except StreamError as exc:
            _fail(conn, exc)
            return
        start, end = first if first is not None else MAX_ID, last if last is not None else -1
        if at + 3 < len(args):
            consumer = args[at + 3]
    found = _group_of(conn, args[1], args[2])
    if found is None:
        conn._error(_nogroup(args[1], args[2]))
        return
    group, writer = found[1], conn.writer
    if len(args) == 3:
        total, lowest, highest, owners = group.pending_summary()
        if not total:
            conn._reply(b"*4\r\n:0\r\n" + writer.null + writer.null + writer.null_array)
            return
        assert lowest is not None
        assert highest is not None
        rows = array(array([bulk(name), bulk(b"%d" % n)]) for name, n in sorted(owners))
        conn._reply(array([integer(total), _id(lowest), _id(highest), rows]))
        return
    if consumer is not None and consumer not in group.consumers:
        conn._reply(b"*0\r\n")
        return
    rows_found = (
        group.pending_range(start, end, count, consumer=consumer, min_idle=min_idle, now=now_ms())
        if count and start <= end
        else []
    )
    conn._reply(
        array(
            array([_id(i), bulk(owner), integer(idle), integer(deliveries)])
            for i, owner, idle, deliveries in rows_found
        )
    )


def _xclaim(conn: RespConnection, args: list[bytes]) -> None:
    found = _group_of(conn, args[1], args[2])
    if found is None:
        conn._error(_nogroup(args[1], args[2]))
        return
    stream, group = found
    min_idle = string2ll(args[4])
    if min_idle is None:
        conn._error("Invalid min-idle-time argument for XCLAIM")
        return
    ids: list[int] = []
    j = 5
    while j < len(args):
        try:
            ids.append(parse_id(args[j]))
        except StreamError:
            break
        j += 1
    now = now_ms()
    idle: int | None = None
    at_time: int | None = None
    retrycount: int | None = None
    force = justid = False
    last_id = 0
    while j < len(args):
        more = len(args) - 1 - j
        option = args[j].lower()
        if option == b"force":
            force = True
        elif option == b"justid":
            justid = True
        elif option in (b"idle", b"time", b"retrycount") and more:
            j += 1
            number = string2ll(args[j])
            if number is None:
                conn._error(f"Invalid {option.upper().decode()} option argument for XCLAIM")
                return
            if option == b"idle":
                idle, at_time = number, None
            elif option == b"time":
                at_time, idle = number, None
            else:
                retrycount = number
        elif option == b"lastid" and more:
            j += 1
            try:
                last_id = parse_id(args[j])
            except StreamError as exc:
                _fail(conn, exc)
                return
        else:
            conn._error(f"Unrecognized XCLAIM option '{_text(args[j])}'")
            return
        j += 1
    _log_new_consumer(conn, args, group)
    moved_group = last_id > group.last_id
    if moved_group:
        group.last_id = last_id
    retry = retrycount if retrycount is not None and retrycount >= 0 else None
    idle_ms = max(min_idle, 0)
    entries: list[Entry] = []
    if justid:
        claimed = group.claim(
            stream, args[3], idle_ms, ids, now, idle=idle, time=at_time, retrycount=retry,
            force=force, justid=True,
        )  # fmt: skip
    else:
        entries = group.claim(
            stream, args[3], idle_ms, ids, now, idle=idle, time=at_time, retrycount=retry,
            force=force, justid=False,
        )  # fmt: skip
        claimed = [entry_id for entry_id, _ in entries]
    _log_claims(conn, args[1], args[2], group, claimed)
    gone = [i for i in ids if i not in group.pel and stream.get(i) is None]
    if gone:
        conn.log_write([b"XACK", args[1], args[2], *map(format_id, gone)])
    if moved_group and not claimed:
        _log_position(conn, args[1], args[2], group)
    conn.database.resized(args[1])
    if justid:
        conn._reply(array(_id(c) for c in claimed))
    else:
        conn._reply(_entries(conn.writer, entries))


def _xautoclaim(conn: RespConnection, args: list[bytes]) -> None:
    min_idle = string2ll(args[4])
    if min_idle is None:
        conn._error("Invalid min-idle-time argument for XAUTOCLAIM")
        return
    try:
        start = parse_bound(args[5], end=False)
    except StreamError as exc:
        _fail(conn, exc)
        return
    count, justid = 100, False
    j = 6
    while j < len(args):
        option = args[j].lower()
        if option == b"count" and j + 1 < len(args):
            number = string2ll(args[j + 1])
            if number is None or not 1 <= number <= (2**63 - 1) // 16:
                conn._error("COUNT must be > 0")
                return
            count = number
            j += 2
        elif option == b"justid":
            justid = True
            j += 1
        else:
            conn._error(SYNTAX)
            return
    found = _group_of(conn, args[1], args[2])
    if found is None:
        conn._error(_nogroup(args[1], args[2]))
        return
    stream, group = found
    _log_new_consumer(conn, args, group)
    cursor, claimed, deleted = group.autoclaim(
        stream, args[3], max(min_idle, 0), start, count, now_ms(), justid=justid
    )
    claimed_ids = [c if isinstance(c, int) else c[0] for c in claimed]
    _log_claims(conn, args[1], args[2], group, claimed_ids)
    if deleted:
        conn.log_write([b"XACK", args[1], args[2], *map(format_id, deleted)])
    conn.database.resized(args[1])
    writer = conn.writer
    if justid:
        body = array(_id(c) for c in claimed_ids)
    else:
        body = array(_entry(writer, c[0], c[1]) for c in claimed if not isinstance(c, int))
    conn._reply(array([_id(cursor), body, array(_id(d) for d in deleted)]))


# -- XINFO ---------------------------------------------------------------------------------------


def _maybe(writer: Writer, value: int | None) -> bytes:
    return writer.null if value is None else integer(value)


def _xinfo_stream(conn: RespConnection, args: list[bytes]) -> None:
    full, count = False, 10
    options = args[3:]
    if options:
        if len(options) not in (1, 3) or options[0].lower() != b"full":
            _subcommand_error(conn, args, "XINFO")
            return
        full = True
        if len(options) == 3:
            if options[1].lower() != b"count":
                _subcommand_error(conn, args, "XINFO")
                return
            number = string2ll(options[2])
            if number is None:
                conn._error(NOT_INTEGER)
                return
            count = number if number >= 0 else 10
    stream = conn.database.get(args[2], now_ms())
    if stream is None:
        conn._error("no such key")
        return
    w = conn.writer
    pairs = [
        (b"length", integer(stream.length)),
        (b"radix-tree-keys", integer(stream.node_count)),
        (b"radix-tree-nodes", integer(stream.node_count)),
        (b"last-generated-id", _id(stream.last_id)),
        (b"max-deleted-entry-id", _id(stream.max_deleted_id)),
        (b"entries-added", integer(stream.entries_added)),
        (b"recorded-first-entry-id", _id(stream.first_id)),
    ]
    if not full:
        first, last = stream.first_entry(), stream.last_entry()
        pairs += [
            (b"groups", integer(len(stream.groups))),
            (b"first-entry", w.null if first is None else _entry(w, *first)),
            (b"last-entry", w.null if last is None else _entry(w, *last)),
        ]
    else:
        entries = stream.range(0, MAX_ID, count or None)
        pairs += [
            (b"entries", _entries(w, entries)),
            (b"groups", array(_group_detail(w, stream, name, count) for name in sorted(stream.groups))),
        ]
    conn._reply(w.map((bulk(k), v) for k, v in pairs))


def _group_detail(w: Writer, stream: Stream, name: bytes, count: int) -> bytes:
    group = stream.groups[name]
    pel = list(group.pel.items())[: count or None]
    pending = array(
        array([_id(i), bulk(n.consumer.name), integer(n.delivery_time), integer(n.delivery_count)])
        for i, n in pel
    )
    consumers = []
    for consumer_name in sorted(group.consumers):
        consumer = group.consumers[consumer_name]
        own = list(consumer.pending.items())[: count or None]
        consumers.append(
            w.map(
                [
                    (bulk(b"name"), bulk(consumer.name)),
                    (bulk(b"seen-time"), integer(consumer.seen_time)),
                    (bulk(b"active-time"), integer(consumer.active_time)),
                    (bulk(b"pel-count"), integer(len(consumer.pending))),
                    (
                        bulk(b"pending"),
                        array(
                            array([_id(i), integer(n.delivery_time), integer(n.delivery_count)])
                            for i, n in own
                        ),
                    ),
                ]
            )
        )
    return w.map(
        [
            (bulk(b"name"), bulk(name)),
            (bulk(b"last-delivered-id"), _id(group.last_id)),
            (bulk(b"entries-read"), _maybe(w, group.entries_read)),
            (bulk(b"lag"), _maybe(w, group.lag(stream))),
            (bulk(b"pel-count"), integer(len(group.pel))),
            (bulk(b"pending"), pending),
            (bulk(b"consumers"), array(consumers)),
        ]
    )


def _xinfo_groups(conn: RespConnection, args: list[bytes]) -> None:
    stream = conn.database.get(args[2], now_ms())
    if stream is None:
        conn._error("no such key")
        return
    w = conn.writer
    rows = []
    for name in sorted(stream.groups):
        group = stream.groups[name]
        rows.append(
            w.map(
                [
                    (bulk(b"name"), bulk(name)),
                    (bulk(b"consumers"), integer(len(group.consumers))),
                    (bulk(b"pending"), integer(len(group.pel))),
                    (bulk(b"last-delivered-id"), _id(group.last_id)),
                    (bulk(b"entries-read"), _maybe(w, group.entries_read)),
                    (bulk(b"lag"), _maybe(w, group.lag(stream))),
                ]
            )
        )
    conn._reply(array(rows))


def _xinfo_consumers(conn: RespConnection, args: list[bytes]) -> None:
    key, name = args[2], args[3]
    stream = conn.database.get(key, now_ms())
    if stream is None:
        conn._error("no such key")
        return
    group = stream.groups.get(name)
    if group is None:
        conn._error(f"-NOGROUP No such consumer group '{_text(name)}' for key name '{_text(key)}'")
        return
    w, now = conn.writer, now_ms()
    rows = []
    for consumer_name in sorted(group.consumers):
        consumer = group.consumers[consumer_name]
        inactive = now - consumer.active_time if consumer.active_time != -1 else -1
        rows.append(
            w.map(
                [
                    (bulk(b"name"), bulk(consumer.name)),
                    (bulk(b"pending"), integer(len(consumer.pending))),
                    (bulk(b"idle"), integer(max(0, now - consumer.seen_time))),
                    (bulk(b"inactive"), integer(inactive)),
                ]
            )
        )
    conn._reply(array(rows))


_XGROUP_HELP = [
    b"XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CREATE <key> <groupname> <id|$> [option]",
    b"    Create a new consumer group. Options are:",
    b"    * MKSTREAM",
    b"      Create the empty stream if it does not exist.",
    b"    * ENTRIESREAD entries_read",
    b"      Set the group's entries_read counter (internal use).",
    b"CREATECONSUMER <key> <groupname> <consumer>",
    b"    Create a new consumer in the specified group.",
    b"DELCONSUMER <key> <groupname> <consumer>",
    b"    Remove the specified consumer.",
    b"DESTROY <key> <groupname>",
    b"    Remove the specified group.",
    b"SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    b"    Set the current group ID and entries_read counter.",
    b"HELP",
    b"    Print this help.",
]
_XINFO_HELP = [
    b"XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"CONSUMERS <key> <groupname>",
    b"    Show consumers of <groupname>.",
    b"GROUPS <key>",
    b"    Show the stream consumer groups.",
    b"STREAM <key> [FULL [COUNT <count>]",
    b"    Show information about the stream.",
    b"HELP",
    b"    Print this help.",
]

XGROUP: dict[str, tuple[int, Handler]] = {
    "create": (-5, _xgroup),
    "setid": (-5, _xgroup),
    "destroy": (4, _xgroup),
    "createconsumer": (5, _xgroup),
    "delconsumer": (5, _xgroup),
}
"""XGROUP's subcommands (HELP is added by the command table)."""
XINFO: dict[str, tuple[int, Handler]] = {
    "stream": (-3, _xinfo_stream),
    "groups": (3, _xinfo_groups),
    "consumers": (4, _xinfo_consumers),
}
HELP = {"xgroup": _XGROUP_HELP, "xinfo": _XINFO_HELP}

STREAM_COMMANDS: dict[str, tuple[int, Handler]] = {
    "xadd": (-5, _xadd),
    "xtrim": (-4, _xtrim),
    "xrange": (-4, _range(reverse=False)),
    "xrevrange": (-4, _range(reverse=True)),
    "xlen": (2, _xlen),
    "xdel": (-3, _xdel),
    "xsetid": (-3, _xsetid),
    "xread": (-4, _read(group_read=False)),
    "xreadgroup": (-7, _read(group_read=True)),
    "xack": (-4, _xack),
    "xpending": (-3, _xpending),
    "xclaim": (-6, _xclaim),
    "xautoclaim": (-6, _xautoclaim),
}
"""Name -> (arity, handler), merged into the front door's command table."""
