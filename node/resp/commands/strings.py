"""The string commands (SET, GET, INCR, APPEND, SETRANGE, SETBIT ...), as redis-server 7.2 parses and
answers them, over the string values of ``node.data.keyspace``.

Arguments are checked in redis-server's order, so the same bad request earns the same error; a key
holding a stream raises ``WrongType`` where redis-server looks it up. Every change is journaled as
the command that repeats it exactly, as redis-server propagates it: a relative expiry as ``SET ...
PXAT <ms>`` or ``PEXPIREAT``, arithmetic as ``SET key <result> KEEPTTL``, SET's GET dropped, and
MSETNX as MSET; a request that changed nothing is not journaled. Every change is announced with
redis-server's keyspace events, in its order (``set`` then ``expire`` for SET ... EX, ``incrby`` for
INCR and DECR, ``del`` for GETDEL ...); a request that changed nothing announces nothing.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Final

from node.config.keyspace_events import GENERIC, STRING
from node.data.keyspace import Database
from node.integers import string2ll
from node.resp.commands.common import NOT_INTEGER, SYNTAX, expiry_clock, now_ms
from node.resp.commands.string_numbers import (
    INVALID_FLOAT,
    NAN_OR_INFINITY,
    add_long_doubles,
    format_long_double,
    parse_long_double,
)
from node.resp.connection import Handler, RespConnection
from node.resp.dispatch import Command
from node.resp.writer import OK, array, integer

__all__ = ["COMMANDS", "MAX_STRING"]

MAX_STRING: Final = 512 * 1024 * 1024
"""``proto-max-bulk-len``: the longest string APPEND and SETRANGE may make."""
_TOO_LONG: Final = "string exceeds maximum allowed size (proto-max-bulk-len)"
_MAX_MS: Final = 2**63 - 1
_EMPTY: Final = b"$0\r\n\r\n"

_NX, _XX, _GET, _KEEPTTL, _PERSIST = 1, 2, 4, 8, 16
_EX, _PX, _EXAT, _PXAT = 32, 64, 128, 256
_EXPIRES: Final = _EX | _PX | _EXAT | _PXAT
_OPTIONS: Final = {
    # option: (its flag, the flags it may not follow, whether SET (True) or GETEX (False) takes it)
    b"nx": (_NX, _XX, True),
    b"xx": (_XX, _NX, True),
    b"get": (_GET, 0, True),
    b"keepttl": (_KEEPTTL, _PERSIST | _EXPIRES, True),
    b"persist": (_PERSIST, _KEEPTTL | _EXPIRES, False),
    b"ex": (_EX, _KEEPTTL | _PERSIST | _EXAT | _PX | _PXAT, None),
    b"px": (_PX, _KEEPTTL | _PERSIST | _EX | _EXAT | _PXAT, None),
    b"exat": (_EXAT, _KEEPTTL | _PERSIST | _EX | _PX | _PXAT, None),
    b"pxat": (_PXAT, _KEEPTTL | _PERSIST | _EX | _EXAT | _PX, None),
}
"""SET's and GETEX's options (``parseExtendedStringArgumentsOrReply``); None: both take it, with
a value after it."""


class _Options:
    """What SET's or GETEX's options said: the flags and the expiry's argument, if any."""

    __slots__ = ("expire", "flags")

    def __init__(self) -> None:
        self.flags = 0
        self.expire: bytes | None = None


def _parse_options(
    conn: RespConnection, args: list[bytes], first: int, setting: bool
) -> _Options | None:
    """The options from ``args[first]`` on; None once the syntax error is sent (an option repeated
    is taken again; one that conflicts with an earlier one, or that lacks its value, is an
    error)."""
    parsed = _Options()
    i = first
    while i < len(args):
        option = _OPTIONS.get(args[i].lower())
        if option is None:
            conn.error(SYNTAX)
            return None
        flag, conflicts, takes = option
        if parsed.flags & conflicts or (takes is not None and takes != setting):
            conn.error(SYNTAX)
            return None
        if takes is None:
            if i + 1 >= len(args):
                conn.error(SYNTAX)
                return None
            i += 1
            parsed.expire = args[i]
        parsed.flags |= flag
        i += 1
    return parsed


def _name(args: list[bytes]) -> str:
    """The command's name as its errors quote it."""
    return args[0].lower().decode("utf-8", "surrogateescape")


def _expiry(conn: RespConnection, args: list[bytes], amount: bytes, flags: int, now: int) -> int | None:
    """When the key expires, in milliseconds since the epoch (``getExpireMillisecondsOrReply``);
    None once the error is sent."""
    when = string2ll(amount)
    if when is None:
        conn.error(NOT_INTEGER)
        return None
    seconds = not flags & (_PX | _PXAT)
    if when <= 0 or (seconds and when > _MAX_MS // 1000):
        conn.error(f"invalid expire time in '{_name(args)}' command")
        return None
    if seconds:
        when *= 1000
    if flags & (_EX | _PX):
        when += now
        if when > _MAX_MS:
            conn.error(f"invalid expire time in '{_name(args)}' command")
            return None
    return when


def _store(
    conn: RespConnection,
    key: bytes,
    value: bytes,
    when: int | None,
    keep_ttl: bool,
    *,
    event: bytes = b"set",
) -> None:
    """Write a string, with an expiry time or keeping the key's own, journal it, and announce
    ``event`` (then ``expire`` if it was given an expiry time)."""
    db = conn.database
    db.put(key, value, keep_ttl=keep_ttl or when is not None)
    db.notify(STRING, event, key)
    if when is not None:
        db.set_expiry(key, when)
        db.notify(GENERIC, b"expire", key)
        conn.log_write([b"SET", key, value, b"PXAT", b"%d" % when])
    else:
        conn.log_write([b"SET", key, value, b"KEEPTTL"] if keep_ttl else [b"SET", key, value])


def _set(conn: RespConnection, args: list[bytes]) -> None:
    if len(args) == 3:  # (the common case, kept short)
        conn.database.put(args[1], args[2])
        conn.database.notify(STRING, b"set", args[1])
        conn.log_write([b"SET", args[1], args[2]])
        conn.reply(OK)
        return
    parsed = _parse_options(conn, args, 3, True)
    if parsed is None:
        return
    now = now_ms()
    flags = parsed.flags
    when = None
    if parsed.expire is not None:
        when = _expiry(conn, args, parsed.expire, flags, now)
        if when is None:
            return
    db, key = conn.database, args[1]
    if flags & _GET:
        old = db.read_string(key, now)
        conn.reply(conn.writer.null if old is None else _bulk(old))
        found = old is not None
    else:  # (a key found expired goes first, and with it the time KEEPTTL would keep)
        found = db.get(key, now) is not None
    if (flags & _NX and found) or (flags & _XX and not found):
        if not flags & _GET:
            conn.reply(conn.writer.null)
        return
    _store(conn, key, args[2], when, bool(flags & _KEEPTTL))
    if not flags & _GET:
        conn.reply(OK)


def _setnx(conn: RespConnection, args: list[bytes]) -> None:
    if conn.database.get(args[1], now_ms()) is not None:
        conn.reply(integer(0))
        return
    _store(conn, args[1], args[2], None, False)
    conn.reply(integer(1))


def _setex(flags: int) -> Handler:
    """SETEX (seconds) and PSETEX (milliseconds): key, time, value."""

    def handler(conn: RespConnection, args: list[bytes]) -> None:
        when = _expiry(conn, args, args[2], flags, now_ms())
        if when is not None:
            _store(conn, args[1], args[3], when, False)
            conn.reply(OK)

    return handler


def _bulk(value: bytes | bytearray) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(value), bytes(value) if isinstance(value, bytearray) else value)


def _get(conn: RespConnection, args: list[bytes]) -> None:
    db = conn.database
    value = db.read_string(args[1], expiry_clock(db))
    conn.reply(conn.writer.null if value is None else _bulk(value))


def _getdel(conn: RespConnection, args: list[bytes]) -> None:
    db, key = conn.database, args[1]
    value = db.read_string(key, now_ms())
    if value is None:
        conn.reply(conn.writer.null)
        return
    conn.reply(_bulk(value))
    db.delete(key)
    db.notify(GENERIC, b"del", key)
    conn.log_write([b"DEL", key])


def _getex(conn: RespConnection, args: list[bytes]) -> None:
    parsed = _parse_options(conn, args, 2, False)
    if parsed is None:
        return
    db, key, now = conn.database, args[1], now_ms()
    value = db.read_string(key, now)
    if value is None:
        conn.reply(conn.writer.null)
        return
    when = None
    if parsed.expire is not None:
        when = _expiry(conn, args, parsed.expire, parsed.flags, now)
        if when is None:
            return
    conn.reply(_bulk(value))
    if when is not None and parsed.flags & (_EXAT | _PXAT) and when <= now and not db.keyspaces.loading:
        db.delete(key)
        db.notify(GENERIC, b"del", key)
        conn.log_write([b"DEL", key])
    elif when is not None:
        db.set_expiry(key, when)
        db.notify(GENERIC, b"expire", key)
        conn.log_write([b"PEXPIREAT", key, b"%d" % when])
    elif parsed.flags & _PERSIST and db.expires_at(key) is not None:
        db.set_expiry(key, None)
        db.notify(GENERIC, b"persist", key)
        conn.log_write([b"PERSIST", key])


def _getset(conn: RespConnection, args: list[bytes]) -> None:
    old = conn.database.read_string(args[1], now_ms())
    conn.reply(conn.writer.null if old is None else _bulk(old))
    _store(conn, args[1], args[2], None, False)


def _mget(conn: RespConnection, args: list[bytes]) -> None:
    db, now, null = conn.database, now_ms(), conn.writer.null
    replies = []
    for key in args[1:]:
        value = db.read(key, now)
        replies.append(_bulk(value) if isinstance(value, (bytes, bytearray)) else null)
    conn.reply(array(replies))


def _mset(only_new: bool) -> Handler:
    """MSET and MSETNX (which sets nothing if any of the keys exists)."""

    def handler(conn: RespConnection, args: list[bytes]) -> None:
        if len(args) % 2 == 0:
            conn.error(f"wrong number of arguments for '{_name(args)}' command")
            return
        db, now = conn.database, now_ms()
        if only_new and any(db.get(key, now) is not None for key in args[1::2]):
            conn.reply(integer(0))
            return
        for key, value in zip(args[1::2], args[2::2], strict=True):
            db.put(key, value)
            db.notify(STRING, b"set", key)
        conn.log_write([b"MSET", *args[1:]])
        conn.reply(integer(1) if only_new else OK)

    return handler


def _number(conn: RespConnection, db: Database, key: bytes) -> int | None:
    """The integer a key holds (0 if there is no key); None once the error is sent."""
    value = db.string(key, now_ms())
    if value is None:
        return 0
    number = string2ll(bytes(value)) if len(value) <= 20 else None
    if number is None:
        conn.error(NOT_INTEGER)
    return number


def _add(conn: RespConnection, key: bytes, increment: int) -> None:
    """INCRBY's core: add, refusing what leaves the signed 64-bit range."""
    db = conn.database
    value = _number(conn, db, key)
    if value is None:
        return
    total = value + increment
    if not -(2**63) <= total < 2**63:
        conn.error("increment or decrement would overflow")
        return
    _store(conn, key, b"%d" % total, None, True, event=b"incrby")
    conn.reply(integer(total))


def _incr(conn: RespConnection, args: list[bytes]) -> None:
    _add(conn, args[1], 1)


def _decr(conn: RespConnection, args: list[bytes]) -> None:
    _add(conn, args[1], -1)


def _incrby(conn: RespConnection, args: list[bytes]) -> None:
    increment = string2ll(args[2])
    if increment is None:
        conn.error(NOT_INTEGER)
        return
    _add(conn, args[1], increment)


def _decrby(conn: RespConnection, args: list[bytes]) -> None:
    decrement = string2ll(args[2])
    if decrement is None:
        conn.error(NOT_INTEGER)
        return
    if decrement == -(2**63):
        conn.error("decrement would overflow")
        return
    _add(conn, args[1], -decrement)


def _incrbyfloat(conn: RespConnection, args: list[bytes]) -> None:
    key = args[1]
    current = conn.database.string(key, now_ms())
    value = parse_long_double(current) if current is not None else Fraction(0)
    increment = parse_long_double(args[2])
    if value is None or increment is None:
        conn.error(INVALID_FLOAT)
        return
    total = add_long_doubles(value, increment)
    if total is None:
        conn.error(NAN_OR_INFINITY)
        return
    text = format_long_double(total)
    _store(conn, key, text, None, True, event=b"incrbyfloat")
    conn.reply(_bulk(text))


def _append(conn: RespConnection, args: list[bytes]) -> None:
    db, key, tail = conn.database, args[1], args[2]
    value = db.string(key, now_ms())
    if value is None:
        db.put(key, tail)
        length = len(tail)
    else:
        if len(value) + len(tail) > MAX_STRING:
            conn.error(_TOO_LONG)
            return
        if isinstance(value, bytearray):
            value += tail
            db.touch(key)
        else:  # (now changed in place: redis-server's raw encoding)
            value = bytearray(value) + tail
            db.put(key, value, keep_ttl=True)
        length = len(value)
    db.notify(STRING, b"append", key)
    conn.log_write([b"APPEND", key, tail])
    conn.reply(integer(length))


def _strlen(conn: RespConnection, args: list[bytes]) -> None:
    value = conn.database.read_string(args[1], now_ms())
    conn.reply(integer(0 if value is None else len(value)))


def _getrange(conn: RespConnection, args: list[bytes]) -> None:
    start, end = string2ll(args[2]), string2ll(args[3])
    if start is None or end is None:
        conn.error(NOT_INTEGER)
        return
    value = conn.database.read_string(args[1], now_ms())
    if value is None or (start < 0 and end < 0 and start > end):
        conn.reply(_EMPTY)
        return
    size = len(value)
    start = max(0, start + size if start < 0 else start)
    end = max(0, end + size if end < 0 else end)
    end = min(end, size - 1)
    conn.reply(_EMPTY if start > end or size == 0 else _bulk(value[start : end + 1]))


def _setrange(conn: RespConnection, args: list[bytes]) -> None:
    offset = string2ll(args[2])
    if offset is None:
        conn.error(NOT_INTEGER)
        return
    if offset < 0:
        conn.error("offset is out of range")
        return
    db, key, part = conn.database, args[1], args[3]
    value = db.string(key, now_ms())
    if not part:
        conn.reply(integer(0 if value is None else len(value)))
        return
    if offset + len(part) > MAX_STRING:
        conn.error(_TOO_LONG)
        return
    if not isinstance(value, bytearray):
        value = bytearray(value or b"")
        db.put(key, value, keep_ttl=True)
    else:
        db.touch(key)
    if len(value) < offset:
        value += bytes(offset - len(value))
    value[offset : offset + len(part)] = part
    db.notify(STRING, b"setrange", key)
    conn.log_write([b"SETRANGE", key, args[2], part])
    conn.reply(integer(len(value)))


def _bit_offset(conn: RespConnection, arg: bytes) -> int | None:
    """SETBIT's and GETBIT's offset; None once the error is sent."""
    offset = string2ll(arg)
    if offset is None or offset < 0 or offset >> 3 >= MAX_STRING:
        conn.error("bit offset is not an integer or out of range")
        return None
    return offset


def _setbit(conn: RespConnection, args: list[bytes]) -> None:
    offset = _bit_offset(conn, args[2])
    if offset is None:
        return
    if args[3] not in (b"0", b"1"):
        conn.error("bit is not an integer or out of range")
        return
    on = args[3] == b"1"
    db, key = conn.database, args[1]
    value = db.string(key, now_ms())
    place, mask = offset >> 3, 0x80 >> (offset & 7)
    changed = value is None or len(value) <= place
    if value is None:
        value = bytearray()
        db.put(key, value)
    elif not isinstance(value, bytearray):
        # Changed in place from now on, even if not now: the same string, so no write (as
        # redis-server's copy of a shared string invalidates nothing and spoils no WATCH).
        value = bytearray(value)
        db.keys[key] = value
        db.resized(key)
    if len(value) <= place:
        value += bytes(place + 1 - len(value))
    was = bool(value[place] & mask)
    if changed or was != on:
        value[place] = value[place] | mask if on else value[place] & ~mask
        db.touch(key)
        db.notify(STRING, b"setbit", key)
        conn.log_write([b"SETBIT", key, args[2], args[3]])
    conn.reply(integer(int(was)))


def _getbit(conn: RespConnection, args: list[bytes]) -> None:
    offset = _bit_offset(conn, args[2])
    if offset is None:
        return
    value = conn.database.read_string(args[1], now_ms())
    place = offset >> 3
    on = value is not None and place < len(value) and value[place] & (0x80 >> (offset & 7))
    conn.reply(integer(1 if on else 0))


COMMANDS: Final = (
    Command("get", 2, _get, "readonly", keys=(1, 1, 1)),
    Command("set", -3, _set, "write denyoom", keys=(1, 1, 1)),
    Command("setnx", 3, _setnx, "write denyoom", keys=(1, 1, 1)),
    Command("setex", 4, _setex(_EX), "write denyoom", keys=(1, 1, 1)),
    Command("psetex", 4, _setex(_PX), "write denyoom", keys=(1, 1, 1)),
    Command("append", 3, _append, "write denyoom", keys=(1, 1, 1)),
    Command("strlen", 2, _strlen, "readonly", keys=(1, 1, 1)),
    Command("getdel", 2, _getdel, "write", keys=(1, 1, 1)),
    Command("getex", -2, _getex, "write", keys=(1, 1, 1)),
    Command("setrange", 4, _setrange, "write denyoom", keys=(1, 1, 1)),
    Command("getrange", 4, _getrange, "readonly", keys=(1, 1, 1)),
    Command("substr", 4, _getrange, "readonly", keys=(1, 1, 1)),
    Command("incr", 2, _incr, "write denyoom", keys=(1, 1, 1)),
    Command("decr", 2, _decr, "write denyoom", keys=(1, 1, 1)),
    Command("mget", -2, _mget, "readonly", keys=(1, -1, 1)),
    Command("mset", -3, _mset(False), "write denyoom", keys=(1, -1, 2)),
    Command("msetnx", -3, _mset(True), "write denyoom", keys=(1, -1, 2)),
    Command("incrby", 3, _incrby, "write denyoom", keys=(1, 1, 1)),
    Command("decrby", 3, _decrby, "write denyoom", keys=(1, 1, 1)),
    Command("incrbyfloat", 3, _incrbyfloat, "write denyoom", keys=(1, 1, 1)),
    Command("getset", 3, _getset, "write denyoom", keys=(1, 1, 1)),
    Command("setbit", 4, _setbit, "write denyoom", keys=(1, 1, 1)),
    Command("getbit", 3, _getbit, "readonly", keys=(1, 1, 1)),
)
"""The string commands, in COMMAND's order (LCS is ``node.resp.commands.lcs``'s)."""
