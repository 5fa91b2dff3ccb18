"""The consumer-group commands (XGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM) and XINFO, as
redis-server 7.2 parses and answers them, over the groups of ``node.data.streams``.
"""

from __future__ import annotations

from typing import Final

from node.config.keyspace_events import STREAM
from node.data.streams import (
    MAX_ID,
    ConsumerGroup,
    Stream,
    StreamError,
    format_id,
    parse_bound,
    parse_id,
)
from node.integers import string2ll
from node.resp.commands.common import NOT_INTEGER, SYNTAX, help_reply, now_ms
from node.resp.commands.streams import (
    Entry,
    entries_reply,
    entry_reply,
    fail,
    id_reply,
    log_claims,
    log_position,
    nogroup,
)
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import OK, Writer, array, as_text, bulk, integer

__all__ = ["COMMANDS"]


# -- consumer groups -----------------------------------------------------------------------------


def _log_new_consumer(conn: RespConnection, args: list[bytes], group: ConsumerGroup) -> None:
    """XCLAIM and XAUTOCLAIM create their consumer even when they claim nothing (``args``: key,
    group, consumer from the second)."""
    if args[3] not in group.consumers:
        conn.log_write([b"XGROUP", b"CREATECONSUMER", args[1], args[2], args[3]])
        conn.database.notify(STREAM, b"xgroup-createconsumer", args[1])


def _subcommand_error(conn: RespConnection, args: list[bytes], command: str) -> None:
    conn.error(
        f"unknown subcommand or wrong number of arguments for '{as_text(args[1])[:128]}'. "
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
                conn.error(NOT_INTEGER)
                return
            if number < -1:
                conn.error("value for ENTRIESREAD must be positive or -1")
                return
            entries_read = None if number == -1 else number
            i += 2
        else:
            _subcommand_error(conn, args, "XGROUP")
            return
    db, key, name, now = conn.database, args[2], args[3], now_ms()
    stream = db.stream(key, now)
    group = stream.groups.get(name) if stream is not None else None
    if not mkstream:
        if stream is None:
            conn.error(
                "The XGROUP subcommand requires the key to exist. Note that for CREATE you may want "
                "to use the MKSTREAM option to create an empty stream automatically."
            )
            return
        if group is None and sub in (b"setid", b"createconsumer", b"delconsumer"):
            conn.error(
                f"-NOGROUP No such consumer group '{as_text(name)}' for key name '{as_text(key)}'"
            )
            return
    if sub == b"create" and 5 <= len(args) <= 8:
        _create(conn, args, stream, entries_read)
    elif sub == b"setid" and len(args) in (5, 7):
        assert stream is not None
        assert group is not None
        try:
            last_id = stream.last_id if args[4] == b"$" else parse_id(args[4], strict=False)
        except StreamError as exc:
            fail(conn, exc)
            return
        group.set_id(last_id, entries_read)
        log_position(conn, key, name, group)
        db.notify(STREAM, b"xgroup-setid", key)
        conn.reply(OK)
    elif sub == b"destroy" and len(args) == 4:
        assert stream is not None
        destroyed = stream.destroy_group(name)
        if destroyed:
            conn.log_write([b"XGROUP", b"DESTROY", key, name])
            db.touch(key)  # (readers blocked on the group get their NOGROUP)
            db.notify(STREAM, b"xgroup-destroy", key)
        conn.reply(integer(1 if destroyed else 0))
    elif sub == b"createconsumer" and len(args) == 5:
        assert group is not None
        created = group.create_consumer(args[4], now)
        if created:
            conn.log_write(list(args))
            db.resized(key)
            db.notify(STREAM, b"xgroup-createconsumer", key)
        conn.reply(integer(1 if created else 0))
    elif sub == b"delconsumer" and len(args) == 5:
        assert group is not None
        pending = 0
        if args[4] in group.consumers:
            pending = group.delete_consumer(args[4])
            conn.log_write(list(args))
            db.resized(key)
            db.notify(STREAM, b"xgroup-delconsumer", key)
        conn.reply(integer(pending))
    else:
        _subcommand_error(conn, args, "XGROUP")


def _create(
    conn: RespConnection, args: list[bytes], stream: Stream | None, entries_read: int | None
) -> None:
    db, key, name = conn.database, args[2], args[3]
    try:
        last_id = (stream.last_id if stream is not None else 0) if args[4] == b"$" else parse_id(args[4])
    except StreamError as exc:
        fail(conn, exc)
        return
    created = stream is None
    if stream is None:
        stream = Stream()
    if not stream.create_group(name, last_id, entries_read):
        conn.error("-BUSYGROUP Consumer Group name already exists")
        return
    if created:
        db.put(key, stream)
    else:
        db.resized(key)
    read = b"%d" % entries_read if entries_read is not None else b"-1"
    conn.log_write(
        [b"XGROUP", b"CREATE", key, name, format_id(last_id), b"MKSTREAM", b"ENTRIESREAD", read]
    )
    db.notify(STREAM, b"xgroup-create", key)
    conn.reply(OK)


def _group_of(conn: RespConnection, key: bytes, name: bytes) -> tuple[Stream, ConsumerGroup] | None:
    stream = conn.database.read_stream(key, now_ms())
    group = stream.groups.get(name) if stream is not None else None
    return (stream, group) if stream is not None and group is not None else None


def _xack(conn: RespConnection, args: list[bytes]) -> None:
    found = _group_of(conn, args[1], args[2])
    if found is None:
        conn.reply(integer(0))
        return
    try:
        ids = [parse_id(arg) for arg in args[3:]]
    except StreamError as exc:
        fail(conn, exc)
        return
    acknowledged = found[1].ack(ids)
    if acknowledged:
        conn.log_write(list(args))
        conn.database.resized(args[1])
    conn.reply(integer(acknowledged))


def _xpending(conn: RespConnection, args: list[bytes]) -> None:
    if len(args) != 3 and not 6 <= len(args) <= 9:
        conn.error(SYNTAX)
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
                conn.error(NOT_INTEGER)
                return
            if len(args) < 8:
                conn.error(SYNTAX)
                return
            at = 5
        number = string2ll(args[at + 2])
        if number is None:
            conn.error(NOT_INTEGER)
            return
        count = max(number, 0)
        try:
            first = parse_bound(args[at], end=False)
            last = parse_bound(args[at + 1], end=True)
        except StreamError as exc:
            fail(conn, exc)
            return
        start, end = first if first is not None else MAX_ID, last if last is not None else -1
        if at + 3 < len(args):
            consumer = args[at + 3]
    found = _group_of(conn, args[1], args[2])
    if found is None:
        conn.error(nogroup(args[1], args[2]))
        return
    group, writer = found[1], conn.writer
    if len(args) == 3:
        total, lowest, highest, owners = group.pending_summary()
        if not total:
            conn.reply(b"*4\r\n:0\r\n" + writer.null + writer.null + writer.null_array)
            return
        assert lowest is not None
        assert highest is not None
        rows = array(array([bulk(name), bulk(b"%d" % n)]) for name, n in sorted(owners))
        conn.reply(array([integer(total), id_reply(lowest), id_reply(highest), rows]))
        return
    if consumer is not None and consumer not in group.consumers:
        conn.reply(b"*0\r\n")
        return
    rows_found = (
        group.pending_range(start, end, count, consumer=consumer, min_idle=min_idle, now=now_ms())
        if count and start <= end
        else []
    )
    conn.reply(
        array(
            array([id_reply(i), bulk(owner), integer(idle), integer(deliveries)])
            for i, owner, idle, deliveries in rows_found
        )
    )


def _xclaim(conn: RespConnection, args: list[bytes]) -> None:
    found = _group_of(conn, args[1], args[2])
    if found is None:
        conn.error(nogroup(args[1], args[2]))
        return
    stream, group = found
    min_idle = string2ll(args[4])
    if min_idle is None:
        conn.error("Invalid min-idle-time argument for XCLAIM")
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
                conn.error(f"Invalid {option.upper().decode()} option argument for XCLAIM")
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
                fail(conn, exc)
                return
        else:
            conn.error(f"Unrecognized XCLAIM option '{as_text(args[j])}'")
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
    log_claims(conn, args[1], args[2], group, claimed)
    gone = [i for i in ids if i not in group.pel and stream.get(i) is None]
    if gone:
        conn.log_write([b"XACK", args[1], args[2], *map(format_id, gone)])
    if moved_group and not claimed:
        log_position(conn, args[1], args[2], group)
    conn.database.resized(args[1])
    if justid:
        conn.reply(array(id_reply(c) for c in claimed))
    else:
        conn.reply(entries_reply(conn.writer, entries))


def _xautoclaim(conn: RespConnection, args: list[bytes]) -> None:
    min_idle = string2ll(args[4])
    if min_idle is None:
        conn.error("Invalid min-idle-time argument for XAUTOCLAIM")
        return
    try:
        start = parse_bound(args[5], end=False)
    except StreamError as exc:
        fail(conn, exc)
        return
    count, justid = 100, False
    j = 6
    while j < len(args):
        option = args[j].lower()
        if option == b"count" and j + 1 < len(args):
            number = string2ll(args[j + 1])
            if number is None or not 1 <= number <= (2**63 - 1) // 16:
                conn.error("COUNT must be > 0")
                return
            count = number
            j += 2
        elif option == b"justid":
            justid = True
            j += 1
        else:
            conn.error(SYNTAX)
            return
    found = _group_of(conn, args[1], args[2])
    if found is None:
        conn.error(nogroup(args[1], args[2]))
        return
    stream, group = found
    _log_new_consumer(conn, args, group)
    cursor, claimed, deleted = group.autoclaim(
        stream, args[3], max(min_idle, 0), start, count, now_ms(), justid=justid
    )
    claimed_ids = [c if isinstance(c, int) else c[0] for c in claimed]
    log_claims(conn, args[1], args[2], group, claimed_ids)
    if deleted:
        conn.log_write([b"XACK", args[1], args[2], *map(format_id, deleted)])
    conn.database.resized(args[1])
    writer = conn.writer
    if justid:
        body = array(id_reply(c) for c in claimed_ids)
    else:
        body = array(entry_reply(writer, c[0], c[1]) for c in claimed if not isinstance(c, int))
    conn.reply(array([id_reply(cursor), body, array(id_reply(d) for d in deleted)]))


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
                conn.error(NOT_INTEGER)
                return
            count = number if number >= 0 else 10
    stream = conn.database.read_stream(args[2], now_ms())
    if stream is None:
        conn.error("no such key")
        return
    w = conn.writer
    pairs = [
        (b"length", integer(stream.length)),
        (b"radix-tree-keys", integer(stream.node_count)),
        (b"radix-tree-nodes", integer(stream.node_count)),
        (b"last-generated-id", id_reply(stream.last_id)),
        (b"max-deleted-entry-id", id_reply(stream.max_deleted_id)),
        (b"entries-added", integer(stream.entries_added)),
        (b"recorded-first-entry-id", id_reply(stream.first_id)),
    ]
    if not full:
        first, last = stream.first_entry(), stream.last_entry()
        pairs += [
            (b"groups", integer(len(stream.groups))),
            (b"first-entry", w.null if first is None else entry_reply(w, *first)),
            (b"last-entry", w.null if last is None else entry_reply(w, *last)),
        ]
    else:
        entries = stream.range(0, MAX_ID, count or None)
        pairs += [
            (b"entries", entries_reply(w, entries)),
            (b"groups", array(_group_detail(w, stream, name, count) for name in sorted(stream.groups))),
        ]
    conn.reply(w.map((bulk(k), v) for k, v in pairs))


def _group_detail(w: Writer, stream: Stream, name: bytes, count: int) -> bytes:
    group = stream.groups[name]
    pel = list(group.pel.items())[: count or None]
    pending = array(
        array([id_reply(i), bulk(n.consumer.name), integer(n.delivery_time), integer(n.delivery_count)])
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
                            array([id_reply(i), integer(n.delivery_time), integer(n.delivery_count)])
                            for i, n in own
                        ),
                    ),
                ]
            )
        )
    return w.map(
        [
            (bulk(b"name"), bulk(name)),
            (bulk(b"last-delivered-id"), id_reply(group.last_id)),
            (bulk(b"entries-read"), _maybe(w, group.entries_read)),
            (bulk(b"lag"), _maybe(w, group.lag(stream))),
            (bulk(b"pel-count"), integer(len(group.pel))),
            (bulk(b"pending"), pending),
            (bulk(b"consumers"), array(consumers)),
        ]
    )


def _xinfo_groups(conn: RespConnection, args: list[bytes]) -> None:
    stream = conn.database.read_stream(args[2], now_ms())
    if stream is None:
        conn.error("no such key")
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
                    (bulk(b"last-delivered-id"), id_reply(group.last_id)),
                    (bulk(b"entries-read"), _maybe(w, group.entries_read)),
                    (bulk(b"lag"), _maybe(w, group.lag(stream))),
                ]
            )
        )
    conn.reply(array(rows))


def _xinfo_consumers(conn: RespConnection, args: list[bytes]) -> None:
    key, name = args[2], args[3]
    stream = conn.database.read_stream(key, now_ms())
    if stream is None:
        conn.error("no such key")
        return
    group = stream.groups.get(name)
    if group is None:
        conn.error(f"-NOGROUP No such consumer group '{as_text(name)}' for key name '{as_text(key)}'")
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
    conn.reply(array(rows))


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

COMMANDS: Final = (
    Command("xack", -4, _xack, "write", keys=(1, 1, 1)),
    Command("xpending", -3, _xpending, "readonly", keys=(1, 1, 1)),
    Command("xclaim", -6, _xclaim, "write", keys=(1, 1, 1)),
    Command("xautoclaim", -6, _xautoclaim, "write", keys=(1, 1, 1)),
    Command(
        "xgroup",
        -2,
        None,
        "write",
        subcommands=[
            Command("xgroup|create", -5, _xgroup, "write denyoom", keys=(2, 2, 1)),
            Command("xgroup|setid", -5, _xgroup, "write", keys=(2, 2, 1)),
            Command("xgroup|destroy", 4, _xgroup, "write", keys=(2, 2, 1)),
            Command("xgroup|createconsumer", 5, _xgroup, "write denyoom", keys=(2, 2, 1)),
            Command("xgroup|delconsumer", 5, _xgroup, "write", keys=(2, 2, 1)),
            Command("xgroup|help", 2, help_reply(_XGROUP_HELP)),
        ],
    ),
    Command(
        "xinfo",
        -2,
        None,
        "readonly",
        subcommands=[
            Command("xinfo|stream", -3, _xinfo_stream, "readonly", keys=(2, 2, 1)),
            Command("xinfo|groups", 3, _xinfo_groups, "readonly", keys=(2, 2, 1)),
            Command("xinfo|consumers", 4, _xinfo_consumers, "readonly", keys=(2, 2, 1)),
            Command("xinfo|help", 2, help_reply(_XINFO_HELP)),
        ],
    ),
)
"""The consumer-group commands and XINFO, in COMMAND's order."""
