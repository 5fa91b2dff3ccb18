"""What a key's value is made of, as redis-server 7.2 answers it: OBJECT ENCODING, REFCOUNT,
IDLETIME and FREQ.

A string's encoding is the one redis-server would have given it: ``int`` for at most 20 bytes that
read as a signed 64-bit integer, ``embstr`` up to 44 bytes, ``raw`` beyond, and ``raw`` for a
string APPEND or SETRANGE changed in place (a ``bytearray``); a stream's is ``stream``. REFCOUNT
is redis-server's: its small integers (0 to 9999) are shared objects. IDLETIME is the whole
seconds since the key was last read or written (``Database.access``, in the keyspaces' clock of
whole seconds, as redis-server's LRU clock); FREQ is refused as redis-server refuses it without an
LFU policy (the policy here is ``noeviction``, so access times are what is kept).
"""

from __future__ import annotations

from typing import Final

from node.data.keyspace import Value
from node.data.streams import Stream
from node.integers import string2ll
from node.resp.commands.common import help_reply, now_ms
from node.resp.commands.string_numbers import int_encodable
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import bulk, integer

__all__ = ["COMMANDS", "encoding"]

_SHARED_INTEGERS: Final = 10000
_SHARED_REFCOUNT: Final = 2**31 - 1
_NO_LFU: Final = (
    "An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when "
    "switching between policies at runtime LRU and LFU data will take some time to adjust."
)
_OBJECT_HELP: Final = [
    b"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"ENCODING <key>",
    b"    Return the kind of internal representation used in order to store the value",
    b"    associated with a <key>.",
    b"FREQ <key>",
    b"    Return the access frequency index of the <key>. The returned integer is",
    b"    proportional to the logarithm of the recent access frequency of the key.",
    b"IDLETIME <key>",
    b"    Return the idle time of the <key>, that is the approximated number of",
    b"    seconds elapsed since the last access to the key.",
    b"REFCOUNT <key>",
    b"    Return the number of references of the value associated with the specified",
    b"    <key>.",
    b"HELP",
    b"    Print this help.",
]


def encoding(value: Value) -> bytes:
    """OBJECT ENCODING's answer for a value (see the module's notes)."""
    if isinstance(value, Stream):
        return b"stream"
    if isinstance(value, bytearray):
        return b"raw"
    if int_encodable(value):
        return b"int"
    return b"embstr" if len(value) <= 44 else b"raw"


def _encoding(conn: RespConnection, args: list[bytes]) -> None:
    value = conn.database.inspect(args[2], now_ms())
    conn.reply(conn.writer.null if value is None else bulk(encoding(value)))


def _refcount(conn: RespConnection, args: list[bytes]) -> None:
    value = conn.database.inspect(args[2], now_ms())
    if value is None:
        conn.reply(conn.writer.null)
        return
    number = string2ll(value) if isinstance(value, bytes) and int_encodable(value) else None
    shared = number is not None and 0 <= number < _SHARED_INTEGERS
    conn.reply(integer(_SHARED_REFCOUNT if shared else 1))


def _idletime(conn: RespConnection, args: list[bytes]) -> None:
    db, key = conn.database, args[2]
    if db.inspect(key, now_ms()) is None:
        conn.reply(conn.writer.null)
        return
    clock = db.keyspaces.clock
    conn.reply(integer(max(0, clock - db.access.get(key, clock))))


def _freq(conn: RespConnection, args: list[bytes]) -> None:
    if conn.database.inspect(args[2], now_ms()) is None:
        conn.reply(conn.writer.null)
    else:
        conn.error(_NO_LFU)


COMMANDS: Final = (
    Command(
        "object",
        -2,
        None,
        subcommands=[
            Command("object|encoding", 3, _encoding, "readonly", keys=(2, 2, 1)),
            Command("object|freq", 3, _freq, "readonly", keys=(2, 2, 1)),
            Command("object|idletime", 3, _idletime, "readonly", keys=(2, 2, 1)),
            Command("object|refcount", 3, _refcount, "readonly", keys=(2, 2, 1)),
            Command("object|help", 2, help_reply(_OBJECT_HELP)),
        ],
    ),
)
"""OBJECT."""
