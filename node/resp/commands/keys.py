"""The generic key commands (DEL, EXISTS, TYPE, KEYS, SCAN, expiry, RENAME, FLUSHDB ...), as
redis-server 7.2 answers them, over ``node.data.keyspace``.

Each handler takes the connection and the request's arguments (the name first) and writes its reply;
arity was checked before it runs.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING

from node.integers import scan_cursor, string2ll
from node.resp.writer import OK, array, bulk, integer, simple
from routing import glob_match

if TYPE_CHECKING:
    from node.resp.connection import Handler, RespConnection

__all__ = ["KEY_COMMANDS", "now_ms"]

NOT_INTEGER = "value is not an integer or out of range"
SYNTAX = "syntax error"
_MAX_MS = 2**63 - 1


def now_ms() -> int:
    """Wall-clock milliseconds, the time expiry and stream IDs are measured in."""
    return time.time_ns() // 1_000_000


def _del(conn: RespConnection, args: list[bytes]) -> None:
    db, now = conn.database, now_ms()
    gone = 0
    for key in args[1:]:
        if db.get(key, now) is not None and db.delete(key):
            gone += 1
            conn.log_write([b"DEL", key])
    conn._reply(integer(gone))


def _exists(conn: RespConnection, args: list[bytes]) -> None:
    db, now = conn.database, now_ms()
    conn._reply(integer(sum(1 for key in args[1:] if db.get(key, now) is not None)))


def _type(conn: RespConnection, args: list[bytes]) -> None:
    conn._reply(simple(b"none" if conn.database.get(args[1], now_ms()) is None else b"stream"))


def _keys(conn: RespConnection, args: list[bytes]) -> None:
    pattern = args[1]
    matching = [key for key in conn.database.live_keys(now_ms()) if glob_match(pattern, key)]
    conn._reply(array(bulk(key) for key in matching))


def _position(key: bytes) -> int:
    """Where a key sits in SCAN's order: a stable 64-bit hash, never 0 (0 ends a scan)."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") or 1


def _scan(conn: RespConnection, args: list[bytes]) -> None:
    """SCAN walks keys in the order of a stable hash and its cursor is the next hash to visit, so
    every key present for the whole scan is returned (once, unless renamed back and forth)."""
    cursor = scan_cursor(args[1])
    if cursor is None:
        conn._error("invalid cursor")
        return
    pattern: bytes | None = None
    count, kind = 10, None
    i = 2
    while i < len(args):
        option = args[i].lower()
        if i + 1 >= len(args):
            conn._error(SYNTAX)
            return
        value = args[i + 1]
        if option == b"match":
            pattern = value
        elif option == b"count":
            number = string2ll(value)
            if number is None:
                conn._error(NOT_INTEGER)
                return
            if number < 1:
                conn._error(SYNTAX)
                return
            count = number
        elif option == b"type":
            kind = value.lower()
        else:
            conn._error(SYNTAX)
            return
        i += 2
    db = conn.database
    ahead = sorted(
        (position, key)
        for key in db.live_keys(now_ms())
        if (position := _position(key)) >= cursor or cursor == 0
    )
    taken = ahead[:count]
    while len(taken) < len(ahead) and ahead[len(taken)][0] == taken[-1][0]:
        taken.append(ahead[len(taken)])  # (never split keys of one position between calls)
    following = taken[-1][0] + 1 if len(taken) < len(ahead) else 0
    keys = [
        key
        for _, key in taken
        if (pattern is None or glob_match(pattern, key)) and kind in (None, b"stream")
    ]
    conn._reply(array([bulk(b"%d" % following), array(bulk(key) for key in keys)]))


def _expire(unit: int, absolute: bool) -> Handler:
    """EXPIRE (seconds, relative), PEXPIRE, EXPIREAT, PEXPIREAT with NX, XX, GT and LT."""

    def handler(conn: RespConnection, args: list[bytes]) -> None:
        name = args[0].lower().decode()
        amount = string2ll(args[2])
        if amount is None:
            conn._error(NOT_INTEGER)
            return
        flags = set()
        for arg in args[3:]:
            flag = arg.lower()
            if flag not in (b"nx", b"xx", b"gt", b"lt"):
                conn._error(f"Unsupported option {arg.decode('utf-8', 'surrogateescape')}")
                return
            flags.add(flag)
        if b"nx" in flags and flags & {b"xx", b"gt", b"lt"}:
            conn._error("NX and XX, GT or LT options at the same time are not compatible")
            return
        if b"gt" in flags and b"lt" in flags:
            conn._error("GT and LT options at the same time are not compatible")
            return
        now = now_ms()
        when = amount * unit + (0 if absolute else now)
        if not -_MAX_MS <= amount * unit <= _MAX_MS or not -_MAX_MS <= when <= _MAX_MS:
            conn._error(f"invalid expire time in '{name}' command")
            return
        db = conn.database
        key = args[1]
        if db.get(key, now) is None:
            conn._reply(integer(0))
            return
        current = db.expires_at(key)
        if (
            (b"nx" in flags and current is not None)
            or (b"xx" in flags and current is None)
            or (b"gt" in flags and (current is None or when <= current))
            or (b"lt" in flags and current is not None and when >= current)
        ):
            conn._reply(integer(0))
            return
        if when <= now and not db.keyspaces.loading:
            db.delete(key)
            conn.log_write([b"DEL", key])
        else:  # (replaying, a time past is kept: a later record may change it, as it did then)
            db.set_expiry(key, when)
            conn.log_write([b"PEXPIREAT", key, b"%d" % when])
        conn._reply(integer(1))

    return handler


def _ttl(unit: int) -> Handler:
    def handler(conn: RespConnection, args: list[bytes]) -> None:
        db, now = conn.database, now_ms()
        if db.get(args[1], now) is None:
            conn._reply(integer(-2))
            return
        when = db.expires_at(args[1])
        left = -1 if when is None else (max(0, when - now) + unit // 2) // unit
        conn._reply(integer(left))

    return handler


def _persist(conn: RespConnection, args: list[bytes]) -> None:
    db, key = conn.database, args[1]
    if db.get(key, now_ms()) is None or db.expires_at(key) is None:
        conn._reply(integer(0))
        return
    db.set_expiry(key, None)
    conn.log_write([b"PERSIST", key])
    conn._reply(integer(1))


def _rename(conn: RespConnection, args: list[bytes]) -> None:
    db, now = conn.database, now_ms()
    key, new = args[1], args[2]
    value = db.get(key, now)
    if value is None:
        conn._error("no such key")
        return
    if key != new:
        when = db.expires_at(key)
        db.delete(key)
        db.delete(new)
        db.put(new, value)
        if when is not None:
            db.set_expiry(new, when)
        conn.log_write([b"RENAME", key, new])
    conn._reply(OK)


def _flush_option(conn: RespConnection, args: list[bytes]) -> bool:
    if len(args) > 2 or (len(args) == 2 and args[1].lower() not in (b"async", b"sync")):
        conn._error(SYNTAX)
        return False
    return True


def _flushdb(conn: RespConnection, args: list[bytes]) -> None:
    if _flush_option(conn, args):
        conn.database.flush()
        conn.log_write([b"FLUSHDB"])
        conn._reply(OK)


def _flushall(conn: RespConnection, args: list[bytes]) -> None:
    if _flush_option(conn, args):
        keyspace = conn.broker.keyspaces.keyspace(conn.account.name)
        for db in keyspace.databases().values():
            db.flush()
        conn.log_write([b"FLUSHALL"])
        conn._reply(OK)


def _dbsize(conn: RespConnection, args: list[bytes]) -> None:
    db = conn.database
    conn._reply(integer(sum(1 for _ in db.live_keys(now_ms()))))


KEY_COMMANDS: dict[str, tuple[int, Handler]] = {
    "del": (-2, _del),
    "unlink": (-2, _del),
    "exists": (-2, _exists),
    "type": (2, _type),
    "keys": (2, _keys),
    "scan": (-2, _scan),
    "expire": (-3, _expire(1000, False)),
    "pexpire": (-3, _expire(1, False)),
    "expireat": (-3, _expire(1000, True)),
    "pexpireat": (-3, _expire(1, True)),
    "ttl": (2, _ttl(1000)),
    "pttl": (2, _ttl(1)),
    "persist": (2, _persist),
    "rename": (3, _rename),
    "flushdb": (-1, _flushdb),
    "flushall": (-1, _flushall),
    "dbsize": (1, _dbsize),
}
"""Name -> (arity, handler), merged into the front door's command table."""
