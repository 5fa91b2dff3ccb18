"""COMMAND (COUNT, LIST, INFO, DOCS, GETKEYS, GETKEYSANDFLAGS, HELP) from the command table the
connection serves, in redis-server 7.2's shapes.

What the table does not record is derived from what it does: redis-server's flags from the
record's flags, the ACL categories from those and the command's family (the module its handler
is in, which DOCS reports as its group), key specs from the legacy key positions
(``Command.keys``). The stream reads' keys follow their ``STREAMS`` keyword.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from node.integers import string2ll
from node.resp.commands.common import SYNTAX, help_reply
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import Writer, array, bulk, integer, simple
from routing import glob_match

__all__ = ["COMMANDS", "command_keys", "group_of"]

_GROUPS: Final = {
    "connection": "connection",
    "keys": "generic",
    "pubsub": "pubsub",
    "transactions": "transactions",
    "streams": "stream",
    "stream_reads": "stream",
    "stream_groups": "stream",
    "strings": "string",
    "scripting": "scripting",
}
"""A command family (its module's name) as redis-server's group; the rest are ``server``."""
_CATEGORY_OF_GROUP: Final = {
    "connection": "@connection",
    "generic": "@keyspace",
    "pubsub": "@pubsub",
    "transactions": "@transaction",
    "stream": "@stream",
    "string": "@string",
    "scripting": "@scripting",
}
_FLAG_NAMES: Final = {
    "write": "write",
    "readonly": "readonly",
    "denyoom": "denyoom",
    "admin": "admin",
    "no_auth": "no_auth",
    "subscribed": "pubsub",
}
_AFTER_STREAMS: Final = frozenset([b"xread", b"xreadgroup"])
"""Commands whose keys are the first half of the arguments after ``STREAMS``."""
_NUMKEYS: Final = frozenset([b"eval", b"evalsha", b"eval_ro", b"evalsha_ro", b"fcall", b"fcall_ro"])
"""Commands whose keys are as many as their third argument says, after it."""


def _handler_of(command: Command[RespConnection]) -> Command[RespConnection]:
    if command.handler is None and command.subcommands:
        return next(iter(command.subcommands.values()))
    return command


def group_of(command: Command[RespConnection]) -> str:
    """redis-server's group for the command (DOCS): from the family its handler belongs to."""
    handler = _handler_of(command).handler
    family = handler.__module__.rpartition(".")[2] if handler is not None else ""
    return _GROUPS.get(family, "server")


def _flags(command: Command[RespConnection]) -> list[bytes]:
    flags = [_FLAG_NAMES[flag].encode() for flag in sorted(command.flags) if flag in _FLAG_NAMES]
    if command.key in _AFTER_STREAMS:
        flags += [b"blocking", b"movablekeys"]
    return flags


def _categories(command: Command[RespConnection]) -> list[bytes]:
    categories = []
    if command.writes:
        categories.append("@write")
    if "readonly" in command.flags:
        categories.append("@read")
    if command.admin:
        categories += ["@admin", "@dangerous"]
    group = _CATEGORY_OF_GROUP.get(group_of(command))
    if group is not None:
        categories.append(group)
    if command.key in _AFTER_STREAMS:
        categories.append("@blocking")
    return [c.encode() for c in categories]


def _key_flags(command: Command[RespConnection]) -> list[bytes]:
    return [b"RW", b"update"] if command.writes else [b"RO", b"access"]


def _key_specs(writer: Writer, command: Command[RespConnection]) -> list[bytes]:
    first, last, step = command.keys
    if command.key in _AFTER_STREAMS:
        begin = writer.map([(bulk(b"keyword"), bulk(b"STREAMS")), (bulk(b"startfrom"), integer(1))])
        find = [
            (bulk(b"lastkey"), integer(-1)),
            (bulk(b"keystep"), integer(1)),
            (bulk(b"limit"), integer(2)),
        ]
        kinds = (b"keyword", b"range")
    elif first:
        begin = writer.map([(bulk(b"index"), integer(first))])
        lastkey = last - first if last >= 0 else last
        find = [
            (bulk(b"lastkey"), integer(lastkey)),
            (bulk(b"keystep"), integer(step)),
            (bulk(b"limit"), integer(0)),
        ]
        kinds = (b"index", b"range")
    else:
        return []
    spec = [
        (bulk(b"flags"), writer.set(bulk(flag) for flag in _key_flags(command))),
        (bulk(b"begin_search"), writer.map([(bulk(b"type"), bulk(kinds[0])), (bulk(b"spec"), begin)])),
        (
            bulk(b"find_keys"),
            writer.map([(bulk(b"type"), bulk(kinds[1])), (bulk(b"spec"), writer.map(find))]),
        ),
    ]
    return [writer.map(spec)]


def _info_entry(writer: Writer, command: Command[RespConnection]) -> bytes:
    first, last, step = (0, 0, 0) if command.key in _AFTER_STREAMS else command.keys
    subcommands = command.subcommands.values() if command.subcommands else ()
    return array(
        [
            bulk(command.name.encode()),
            integer(command.arity),
            writer.set(simple(flag) for flag in _flags(command)),
            integer(first),
            integer(last),
            integer(step),
            writer.set(simple(c) for c in _categories(command)),
            writer.set([]),
            array(_key_specs(writer, command)),
            array(_info_entry(writer, sub) for sub in subcommands),
        ]
    )


def _all(conn: RespConnection) -> Iterator[Command[RespConnection]]:
    """Every command and subcommand, in the table's order."""
    for command in conn.table.by_name.values():
        yield command
        if command.subcommands:
            yield from command.subcommands.values()


def _find(conn: RespConnection, name: bytes) -> Command[RespConnection] | None:
    """A command by name, or a subcommand as ``container|sub``."""
    top, _, sub = name.lower().partition(b"|")
    command = conn.table.by_name.get(top)
    if command is None or not sub:
        return command
    return command.subcommands.get(sub) if command.subcommands else None


def command_keys(command: Command[RespConnection], args: list[bytes]) -> list[bytes]:
    """The key arguments of a request (COMMAND GETKEYS)."""
    if command.key in _AFTER_STREAMS:
        upper = [arg.upper() for arg in args]
        if b"STREAMS" not in upper:
            return []
        rest = args[upper.index(b"STREAMS") + 1 :]
        return rest[: len(rest) // 2]
    if command.key in _NUMKEYS:
        numkeys = string2ll(args[2]) if len(args) > 2 else None
        if numkeys is None or not 0 <= numkeys <= len(args) - 3:
            return []
        return args[3 : 3 + numkeys]
    first, last, step = command.keys
    if not first:
        return []
    end = last if last >= 0 else len(args) + last
    return args[first : end + 1 : step]


def _command(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(array(_info_entry(conn.writer, c) for c in conn.table.by_name.values()))


def _count(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(integer(len(conn.table)))


def _list(conn: RespConnection, args: list[bytes]) -> None:
    commands = list(_all(conn))
    if len(args) > 2:
        if len(args) != 5 or args[2].lower() != b"filterby":
            conn.error(SYNTAX)
            return
        kind, value = args[3].lower(), args[4]
        if kind == b"module":
            commands = []
        elif kind == b"aclcat":
            category = b"@" + value.lower()
            commands = [c for c in commands if category in _categories(c)]
        elif kind == b"pattern":
            commands = [c for c in commands if glob_match(value, c.key, nocase=True)]
        else:
            conn.error(SYNTAX)
            return
    conn.reply(array(bulk(c.key) for c in commands))


def _info(conn: RespConnection, args: list[bytes]) -> None:
    if len(args) == 2:
        _command(conn, args)
        return
    entries = []
    for name in args[2:]:
        command = _find(conn, name)
        entries.append(conn.writer.null if command is None else _info_entry(conn.writer, command))
    conn.reply(array(entries))


def _doc(writer: Writer, command: Command[RespConnection]) -> bytes:
    fields = [(bulk(b"group"), bulk(group_of(command).encode()))]
    if command.subcommands:
        subs = [(bulk(s.key), _doc(writer, s)) for s in command.subcommands.values()]
        fields.append((bulk(b"subcommands"), writer.map(subs)))
    return writer.map(fields)


def _docs(conn: RespConnection, args: list[bytes]) -> None:
    if len(args) == 2:
        commands = list(conn.table.by_name.values())
    else:
        found = (_find(conn, name) for name in args[2:])
        commands = [c for c in found if c is not None]
    conn.reply(conn.writer.map((bulk(c.key), _doc(conn.writer, c)) for c in commands))


def _keys_of(
    conn: RespConnection, args: list[bytes]
) -> tuple[Command[RespConnection], list[bytes]] | None:
    """GETKEYS' command and keys, or None (the error sent)."""
    request = args[2:]
    command = conn.table.find(request[0])
    if command is not None and command.subcommands is not None and len(request) > 1:
        command = command.subcommands.get(request[1].lower())
    if command is None:
        conn.error("Invalid command specified")
        return None
    if (command.arity > 0 and len(request) != command.arity) or len(request) < -command.arity:
        conn.error("Invalid number of arguments specified for command")
        return None
    keys = command_keys(command, request)
    if not keys and command.key not in _NUMKEYS:
        conn.error("The command has no key arguments")
        return None
    return command, keys


def _getkeys(conn: RespConnection, args: list[bytes]) -> None:
    found = _keys_of(conn, args)
    if found is not None:
        conn.reply(array(bulk(key) for key in found[1]))


def _getkeysandflags(conn: RespConnection, args: list[bytes]) -> None:
    found = _keys_of(conn, args)
    if found is not None:
        command, keys = found
        flags = conn.writer.set(simple(flag) for flag in _key_flags(command))
        conn.reply(array(array([bulk(key), flags]) for key in keys))


_HELP: Final = [
    b"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"(no subcommand)",
    b"    Return details about all Redis commands.",
    b"COUNT",
    b"    Return the total number of commands in this Redis server.",
    b"LIST",
    b"    Return a list of all commands in this Redis server.",
    b"INFO [<command-name> ...]",
    b"    Return details about multiple Redis commands.",
    b"DOCS [<command-name> ...]",
    b"    Return documentation details about multiple Redis commands.",
    b"GETKEYS <full-command>",
    b"    Return the keys from a full Redis command.",
    b"GETKEYSANDFLAGS <full-command>",
    b"    Return the keys and the access flags from a full Redis command.",
    b"HELP",
    b"    Print this help.",
]

COMMANDS: Final = (
    Command(
        "command",
        -1,
        _command,
        subcommands=[
            Command("command|count", 2, _count),
            Command("command|list", -2, _list),
            Command("command|info", -2, _info),
            Command("command|docs", -2, _docs),
            Command("command|getkeys", -3, _getkeys),
            Command("command|getkeysandflags", -3, _getkeysandflags),
            Command("command|help", 2, help_reply(_HELP)),
        ],
    ),
)
