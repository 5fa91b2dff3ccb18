"""COMMAND (COUNT, LIST, INFO, DOCS, GETKEYS, GETKEYSANDFLAGS, HELP) from the command table the
connection serves, in redis-server 7.2's shapes.

What COMMAND reports of a command beyond its name and arity is redis-server's description of it
(``node.resp.command_facts``: flags, ACL categories, tips, key specs, group, the version it came
in, its arguments' structure); a request's keys are found by its key specs, as redis-server finds
them. DOCS gives a summary of our own (``node.resp.command_summaries``), and no complexity or
history.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from node.resp.command_facts import Argument, CommandFacts, KeySpec, keys_by_specs, variable_key_flags
from node.resp.command_facts_data import FACTS
from node.resp.command_summaries import summary
from node.resp.commands.common import SYNTAX, help_reply
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import Writer, array, bulk, integer, simple
from routing import glob_match

__all__ = ["COMMANDS", "command_keys", "facts_of"]

_UNKNOWN: Final = CommandFacts(
    group="server",
    since="",
    arity=0,
    flags=(),
    categories=("slow",),
    tips=(),
    key_specs=(),
    legacy_keys=(0, 0, 0),
    variable_flags=False,
    doc_flags=(),
    deprecated_since=None,
    arguments=(),
)
"""What is reported of a command redis-server does not describe (none is served now)."""


def facts_of(command: Command[RespConnection]) -> CommandFacts:
    """redis-server's description of a command."""
    return FACTS.get(command.name, _UNKNOWN)


def _categories(command: Command[RespConnection]) -> list[bytes]:
    return [b"@" + category.encode() for category in facts_of(command).categories]


def _search(writer: Writer, kind: str | int, spec: list[tuple[bytes, bytes]]) -> bytes:
    return writer.map([(bulk(b"type"), bulk(str(kind).encode())), (bulk(b"spec"), writer.map(spec))])


def _key_spec(writer: Writer, spec: KeySpec) -> bytes:
    begin_kind, *begin = spec.begin
    if begin_kind == "index":
        begin_fields = [(bulk(b"index"), integer(int(begin[0])))]
    elif begin_kind == "keyword":
        begin_fields = [
            (bulk(b"keyword"), bulk(str(begin[0]).encode())),
            (bulk(b"startfrom"), integer(int(begin[1]))),
        ]
    else:
        begin_fields = []
    find_kind, *find = spec.find
    names: tuple[bytes, ...] = ()
    if find_kind == "range":
        names = (b"lastkey", b"keystep", b"limit")
    elif find_kind == "keynum":
        names = (b"keynumidx", b"firstkey", b"keystep")
    find_fields = [(bulk(name), integer(int(n))) for name, n in zip(names, find, strict=True)]
    return writer.map(
        [
            (bulk(b"flags"), writer.set(simple(flag.encode()) for flag in spec.flags)),
            (bulk(b"begin_search"), _search(writer, begin_kind, begin_fields)),
            (bulk(b"find_keys"), _search(writer, find_kind, find_fields)),
        ]
    )


def _info_entry(writer: Writer, command: Command[RespConnection]) -> bytes:
    facts = facts_of(command)
    first, last, step = facts.legacy_keys
    subcommands = command.subcommands.values() if command.subcommands else ()
    return array(
        [
            bulk(command.name.encode()),
            integer(command.arity),
            writer.set(simple(flag.encode()) for flag in facts.flags),
            integer(first),
            integer(last),
            integer(step),
            writer.set(simple(c) for c in _categories(command)),
            writer.set(bulk(tip.encode()) for tip in facts.tips),
            writer.set(_key_spec(writer, spec) for spec in facts.key_specs),
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


def _keys(command: Command[RespConnection], args: list[bytes]) -> list[tuple[int, tuple[str, ...]]]:
    """Where a request's keys are, with their flags (none if its key specs cannot be followed)."""
    facts = facts_of(command)
    if facts.variable_flags:
        return variable_key_flags(command.name, args)
    return keys_by_specs(facts, args) or []


def command_keys(command: Command[RespConnection], args: list[bytes]) -> list[bytes]:
    """The key arguments of a request (``args`` from the command's name on), as GETKEYS finds them."""
    return [args[i] for i, _ in _keys(command, args)]


def _has_keys(command: Command[RespConnection]) -> bool:
    return any("not_key" not in spec.flags for spec in facts_of(command).key_specs)


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


def _argument(writer: Writer, arg: Argument) -> bytes:
    fields = [(bulk(b"name"), bulk(arg.name.encode())), (bulk(b"type"), bulk(arg.type.encode()))]
    if arg.key_spec_index >= 0:
        fields.append((bulk(b"key_spec_index"), integer(arg.key_spec_index)))
    for name, value in ((b"token", arg.token), (b"since", arg.since)):
        if value is not None:
            fields.append((bulk(name), bulk(value.encode())))
    if arg.deprecated_since is not None:
        fields.append((bulk(b"deprecated_since"), bulk(arg.deprecated_since.encode())))
    if arg.flags:
        fields.append((bulk(b"flags"), writer.set(simple(f.encode()) for f in arg.flags)))
    if arg.type in ("oneof", "block"):
        fields.append((bulk(b"arguments"), _arguments(writer, arg.arguments)))
    if arg.display is not None:
        fields.append((bulk(b"display_text"), bulk(arg.display.encode())))
    return writer.map(fields)


def _arguments(writer: Writer, arguments: tuple[Argument, ...]) -> bytes:
    return array(_argument(writer, arg) for arg in arguments)


def _doc(writer: Writer, command: Command[RespConnection]) -> bytes:
    facts = facts_of(command)
    fields = []
    described = summary(command.name)
    if described is not None:
        fields.append((bulk(b"summary"), bulk(described.encode())))
    if facts.since:
        fields.append((bulk(b"since"), bulk(facts.since.encode())))
    fields.append((bulk(b"group"), bulk(facts.group.encode())))
    if facts.doc_flags:
        fields.append((bulk(b"doc_flags"), writer.set(simple(f.encode()) for f in facts.doc_flags)))
    if facts.deprecated_since is not None:
        fields.append((bulk(b"deprecated_since"), bulk(facts.deprecated_since.encode())))
    if facts.arguments:
        fields.append((bulk(b"arguments"), _arguments(writer, facts.arguments)))
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
) -> tuple[list[bytes], list[tuple[int, tuple[str, ...]]]] | None:
    """GETKEYS' request and where its keys are, with their flags; None when the error was sent."""
    request = args[2:]
    command = conn.table.find(request[0])
    if command is not None and command.subcommands is not None and len(request) > 1:
        command = command.subcommands.get(request[1].lower())
    if command is None:
        conn.error("Invalid command specified")
        return None
    if not _has_keys(command):
        conn.error("The command has no key arguments")
        return None
    if (command.arity > 0 and len(request) != command.arity) or len(request) < -command.arity:
        conn.error("Invalid number of arguments specified for command")
        return None
    keys = _keys(command, request)
    if not keys and "no_mandatory_keys" not in facts_of(command).flags:
        conn.error("Invalid arguments specified for command")
        return None
    return request, keys


def _getkeys(conn: RespConnection, args: list[bytes]) -> None:
    found = _keys_of(conn, args)
    if found is not None:
        request, keys = found
        conn.reply(array(bulk(request[i]) for i, _ in keys))


def _getkeysandflags(conn: RespConnection, args: list[bytes]) -> None:
    found = _keys_of(conn, args)
    if found is not None:
        request, keys = found
        writer = conn.writer
        conn.reply(
            array(
                array([bulk(request[i]), writer.set(simple(f.encode()) for f in flags)])
                for i, flags in keys
            )
        )


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
