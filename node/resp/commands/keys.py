"""The generic key commands (DEL, EXISTS, TYPE, KEYS, SCAN, expiry, RENAME, FLUSHDB ...), as
redis-server 7.2 answers them, over ``node.data.keyspace``.

Each handler takes the connection and the request's arguments (the name first) and writes its reply;
arity was checked before it runs.
"""

from __future__ import annotations

import hashlib
import random
from typing import Final

from node.config.keyspace_events import GENERIC
from node.data.keyspace import DATABASES, Value
from node.data.streams import Stream
from node.integers import scan_cursor, string2ll
from node.resp.commands.common import NOT_INTEGER, SYNTAX, now_ms
from node.resp.connection import Handler, RespConnection
from node.resp.dispatch import Command
from node.resp.writer import OK, array, bulk, integer, simple
from routing import glob_match

__all__ = ["COMMANDS", "type_name"]

_MAX_MS = 2**63 - 1


def _del(conn: RespConnection, args: list[bytes]) -> None:
    db, now = conn.database, now_ms()
    gone = 0
    for key in args[1:]:
        if db.get(key, now) is not None and db.delete(key):
            gone += 1
            conn.log_write([b"DEL", key])
            db.notify(GENERIC, b"del", key)
    conn.reply(integer(gone))


def _exists(conn: RespConnection, args: list[bytes]) -> None:
    """EXISTS: how many of the keys exist (not marking them accessed)."""
    db, now = conn.database, now_ms()
    conn.reply(integer(sum(1 for key in args[1:] if db.read(key, now, False) is not None)))


def _touch(conn: RespConnection, args: list[bytes]) -> None:
    """TOUCH: how many of the keys exist, marking those accessed now."""
    db, now = conn.database, now_ms()
    conn.reply(integer(sum(1 for key in args[1:] if db.read(key, now) is not None)))


def _randomkey(conn: RespConnection, args: list[bytes]) -> None:
    """A key of the selected database picked at random among the live ones (a nil with none)."""
    keys = list(conn.database.live_keys(now_ms()))
    conn.reply(bulk(random.choice(keys)) if keys else conn.writer.null)


def type_name(value: Value | None) -> bytes:
    """What TYPE answers for a key holding ``value`` (None: no key)."""
    if value is None:
        return b"none"
    return b"stream" if isinstance(value, Stream) else b"string"


def _type(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(simple(type_name(conn.database.read(args[1], now_ms(), False))))


def _keys(conn: RespConnection, args: list[bytes]) -> None:
    pattern = args[1]
    matching = [key for key in conn.database.live_keys(now_ms()) if glob_match(pattern, key)]
    conn.reply(array(bulk(key) for key in matching))


def _position(key: bytes) -> int:
    """Where a key sits in SCAN's order: a stable 64-bit hash, never 0 (0 ends a scan)."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") or 1


def _scan(conn: RespConnection, args: list[bytes]) -> None:
    """SCAN walks keys in the order of a stable hash and its cursor is the next hash to visit, so
    every key present for the whole scan is returned (once, unless renamed back and forth)."""
    cursor = scan_cursor(args[1])
    if cursor is None:
        conn.error("invalid cursor")
        return
    pattern: bytes | None = None
    count, kind = 10, None
    i = 2
    while i < len(args):
        option = args[i].lower()
        if i + 1 >= len(args):
            conn.error(SYNTAX)
            return
        value = args[i + 1]
        if option == b"match":
            pattern = value
        elif option == b"count":
            number = string2ll(value)
            if number is None:
                conn.error(NOT_INTEGER)
                return
            if number < 1:
                conn.error(SYNTAX)
                return
            count = number
        elif option == b"type":
            kind = value.lower()
        else:
            conn.error(SYNTAX)
            return
        i += 2
    db = conn.database
    now = now_ms()
    ahead = sorted(
        (position, key)
        for key in db.live_keys(now)
        if (position := _position(key)) >= cursor or cursor == 0
    )
    taken = ahead[:count]
    while len(taken) < len(ahead) and ahead[len(taken)][0] == taken[-1][0]:
        taken.append(ahead[len(taken)])  # (never split keys of one position between calls)
    following = taken[-1][0] + 1 if len(taken) < len(ahead) else 0
    keys = [
        key
        for _, key in taken
        if (pattern is None or glob_match(pattern, key))
        and (kind is None or kind == type_name(db.get(key, now)))
    ]
    conn.reply(array([bulk(b"%d" % following), array(bulk(key) for key in keys)]))


def _expire(unit: int, absolute: bool) -> Handler:
    """EXPIRE (seconds, relative), PEXPIRE, EXPIREAT, PEXPIREAT with NX, XX, GT and LT."""

    def handler(conn: RespConnection, args: list[bytes]) -> None:
        name = args[0].lower().decode()
        amount = string2ll(args[2])
        if amount is None:
            conn.error(NOT_INTEGER)
            return
        flags = set()
        for arg in args[3:]:
            flag = arg.lower()
            if flag not in (b"nx", b"xx", b"gt", b"lt"):
                conn.error(f"Unsupported option {arg.decode('utf-8', 'surrogateescape')}")
                return
            flags.add(flag)
        if b"nx" in flags and flags & {b"xx", b"gt", b"lt"}:
            conn.error("NX and XX, GT or LT options at the same time are not compatible")
            return
        if b"gt" in flags and b"lt" in flags:
            conn.error("GT and LT options at the same time are not compatible")
            return
        now = now_ms()
        when = amount * unit + (0 if absolute else now)
        if not -_MAX_MS <= amount * unit <= _MAX_MS or not -_MAX_MS <= when <= _MAX_MS:
            conn.error(f"invalid expire time in '{name}' command")
            return
        db = conn.database
        key = args[1]
        if db.get(key, now) is None:
            conn.reply(integer(0))
            return
        current = db.expires_at(key)
        if (
            (b"nx" in flags and current is not None)
            or (b"xx" in flags and current is None)
            or (b"gt" in flags and (current is None or when <= current))
            or (b"lt" in flags and current is not None and when >= current)
        ):
            conn.reply(integer(0))
            return
        if when <= now and not db.keyspaces.loading:
            db.delete(key)
            conn.log_write([b"DEL", key])
            db.notify(GENERIC, b"del", key)
        else:  # (replaying, a time past is kept: a later record may change it, as it did then)
            db.set_expiry(key, when)
            conn.log_write([b"PEXPIREAT", key, b"%d" % when])
            db.notify(GENERIC, b"expire", key)
        conn.reply(integer(1))

    return handler


def _ttl(unit: int, *, absolute: bool = False) -> Handler:
    """TTL and PTTL, or (``absolute``) EXPIRETIME and PEXPIRETIME: -2 for a missing key, -1 for
    one without expiry, else the time left (the time it expires), rounded to ``unit`` ms."""

    def handler(conn: RespConnection, args: list[bytes]) -> None:
        db, now = conn.database, now_ms()
        if db.read(args[1], now, False) is None:
            conn.reply(integer(-2))
            return
        when = db.expires_at(args[1])
        if when is None:
            conn.reply(integer(-1))
            return
        conn.reply(integer((max(0, when if absolute else when - now) + unit // 2) // unit))

    return handler


def _persist(conn: RespConnection, args: list[bytes]) -> None:
    db, key = conn.database, args[1]
    if db.get(key, now_ms()) is None or db.expires_at(key) is None:
        conn.reply(integer(0))
        return
    db.set_expiry(key, None)
    conn.log_write([b"PERSIST", key])
    db.notify(GENERIC, b"persist", key)
    conn.reply(integer(1))


def _rename(nx: bool) -> Handler:
    """RENAME, or RENAMENX (``nx``: only to a key that does not exist, answering 1 or 0)."""

    def handler(conn: RespConnection, args: list[bytes]) -> None:
        db, now = conn.database, now_ms()
        key, new = args[1], args[2]
        value = db.get(key, now)
        if value is None:
            conn.error("no such key")
            return
        if nx and (key == new or db.get(new, now) is not None):
            conn.reply(integer(0))
            return
        _move(conn, key, new, value)
        conn.reply(integer(1) if nx else OK)

    return handler


def _move(conn: RespConnection, key: bytes, new: bytes, value: Value) -> None:
    """Give ``key``'s value and expiry to ``new`` (whatever it held goes)."""
    db = conn.database
    if key != new:
        when = db.expires_at(key)
        db.delete(key)
        db.delete(new)
        db.put(new, value)
        if when is not None:
            db.set_expiry(new, when)
        conn.log_write([b"RENAME", key, new])
        db.notify(GENERIC, b"rename_from", key)
        db.notify(GENERIC, b"rename_to", new)


def _db_index(conn: RespConnection, arg: bytes) -> int | None:
    """A database index argument, checked as MOVE and COPY check it (None: refused)."""
    index = string2ll(arg)
    if index is None:
        conn.error(NOT_INTEGER)
    elif not -(2**31) <= index < 2**31:
        conn.error("value is out of range, value must between -2147483648 and 2147483647")
    elif not 0 <= index < 16:
        conn.error("DB index is out of range")
    else:
        return index
    return None


def _move_to_db(conn: RespConnection, args: list[bytes]) -> None:
    """MOVE: a key (with its expiry) to another database, unless one is there already (1 or 0)."""
    index = _db_index(conn, args[2])
    if index is None:
        return
    if index == conn.db:
        conn.error("source and destination objects are the same")
        return
    db, key, now = conn.database, args[1], now_ms()
    value = db.get(key, now)
    if value is None:
        conn.reply(integer(0))
        return
    target = conn.broker.keyspaces.database(conn.account.name, index)
    if target.get(key, now) is not None:
        conn.reply(integer(0))
        return
    when = db.expires_at(key)
    target.put(key, value)
    if when is not None:
        target.set_expiry(key, when)
    db.delete(key)
    conn.log_write([b"MOVE", key, b"%d" % index])
    db.notify(GENERIC, b"move_from", key)
    target.notify(GENERIC, b"move_to", key)
    conn.reply(integer(1))


def _duplicate(value: Value) -> Value:
    """An independent copy of a value (an unchangeable string may be shared)."""
    if isinstance(value, Stream):
        return value.copy()
    return bytearray(value) if isinstance(value, bytearray) else value


def _copy(conn: RespConnection, args: list[bytes]) -> None:
    """COPY: an independent duplicate of a key's value, with its expiry, at another key of this
    database or of another (``DB``); an existing one only with ``REPLACE`` (1, else 0)."""
    index, replace = conn.db, False
    i = 3
    while i < len(args):
        option = args[i].lower()
        if option == b"replace":
            replace = True
        elif option == b"db" and i + 1 < len(args):
            chosen = _db_index(conn, args[i + 1])
            if chosen is None:
                return
            index = chosen
            i += 1
        else:
            conn.error(SYNTAX)
            return
        i += 1
    db, key, new, now = conn.database, args[1], args[2], now_ms()
    if index == conn.db and key == new:
        conn.error("source and destination objects are the same")
        return
    value = db.read(key, now)
    if value is None:
        conn.reply(integer(0))
        return
    target = db if index == conn.db else conn.broker.keyspaces.database(conn.account.name, index)
    if target.get(new, now) is not None:
        if not replace:
            conn.reply(integer(0))
            return
        target.delete(new)
    when = db.expires_at(key)
    target.put(new, _duplicate(value))
    if when is not None:
        target.set_expiry(new, when)
    conn.log_write([b"COPY", key, new, b"DB", b"%d" % index, b"REPLACE"])
    target.notify(GENERIC, b"copy_to", new)
    conn.reply(integer(1))


def _swapdb(conn: RespConnection, args: list[bytes]) -> None:
    """SWAPDB: two databases of the caller's account exchange their keys."""
    indexes = []
    for arg, which in zip(args[1:], (b"first", b"second"), strict=True):
        index = string2ll(arg)
        if index is None or not -(2**31) <= index < 2**31:
            conn.error(f"invalid {which.decode()} DB index")
            return
        indexes.append(index)
    if not all(0 <= index < DATABASES for index in indexes):
        conn.error("DB index is out of range")
        return
    conn.broker.keyspaces.keyspace(conn.account.name).swap(indexes[0], indexes[1])
    conn.log_write([b"SWAPDB", b"%d" % indexes[0], b"%d" % indexes[1]])
    conn.reply(OK)


def _flush_option(conn: RespConnection, args: list[bytes]) -> bool:
    if len(args) > 2 or (len(args) == 2 and args[1].lower() not in (b"async", b"sync")):
        conn.error(SYNTAX)
        return False
    return True


def _flushdb(conn: RespConnection, args: list[bytes]) -> None:
    if _flush_option(conn, args):
        conn.database.flush()
        conn.log_write([b"FLUSHDB"])
        conn.reply(OK)


def _flushall(conn: RespConnection, args: list[bytes]) -> None:
    if _flush_option(conn, args):
        conn.broker.keyspaces.keyspace(conn.account.name).flush()
        conn.log_write([b"FLUSHALL"])
        conn.reply(OK)


def _dbsize(conn: RespConnection, args: list[bytes]) -> None:
    db = conn.database
    conn.reply(integer(sum(1 for _ in db.live_keys(now_ms()))))


COMMANDS: Final = (
    Command("del", -2, _del, "write", keys=(1, -1, 1)),
    Command("unlink", -2, _del, "write", keys=(1, -1, 1)),
    Command("exists", -2, _exists, "readonly", keys=(1, -1, 1)),
    Command("type", 2, _type, "readonly", keys=(1, 1, 1)),
    Command("keys", 2, _keys, "readonly"),
    Command("scan", -2, _scan, "readonly"),
    Command("expire", -3, _expire(1000, False), "write", keys=(1, 1, 1)),
    Command("pexpire", -3, _expire(1, False), "write", keys=(1, 1, 1)),
    Command("expireat", -3, _expire(1000, True), "write", keys=(1, 1, 1)),
    Command("pexpireat", -3, _expire(1, True), "write", keys=(1, 1, 1)),
    Command("ttl", 2, _ttl(1000), "readonly", keys=(1, 1, 1)),
    Command("pttl", 2, _ttl(1), "readonly", keys=(1, 1, 1)),
    Command("expiretime", 2, _ttl(1000, absolute=True), "readonly", keys=(1, 1, 1)),
    Command("pexpiretime", 2, _ttl(1, absolute=True), "readonly", keys=(1, 1, 1)),
    Command("persist", 2, _persist, "write", keys=(1, 1, 1)),
    Command("rename", 3, _rename(nx=False), "write", keys=(1, 2, 1)),
    Command("renamenx", 3, _rename(nx=True), "write", keys=(1, 2, 1)),
    Command("move", 3, _move_to_db, "write", keys=(1, 1, 1)),
    Command("copy", -3, _copy, "write denyoom", keys=(1, 2, 1)),
    Command("flushdb", -1, _flushdb, "write"),
    Command("swapdb", 3, _swapdb, "write"),
    Command("flushall", -1, _flushall, "write"),
    Command("dbsize", 1, _dbsize, "readonly"),
    Command("randomkey", 1, _randomkey, "readonly"),
    Command("touch", -2, _touch, "readonly", keys=(1, -1, 1)),
)
"""The key commands, in COMMAND's order."""
