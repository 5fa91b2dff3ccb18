"""Carrying out a forwarded request on the leader of its keys' replica group: one command, or a
whole MULTI/EXEC transaction; and the keys a request names (``request_keys``).

A transaction travels as one request, in the arguments of an ``EXEC`` (``pack_transaction``):
``EXEC n1 arg ... n2 arg ...``, each queued command as its argument count and then its arguments,
in the order they were queued; one whose keys the leader watches for the client starts with the
watches' tokens, ``EXEC WATCHED k token1 ... tokenk n1 arg ...`` (``node.replicated.watching``).
No client sends such a request (EXEC takes no arguments), so it means nothing else; a node that
does not know this form answers it as redis-server answers EXEC with arguments (wrong number of
arguments), never by running part of it.

``carry_out`` runs a request through an ``Execute`` (``node.resp.executor.CommandExecutor``): a
transaction as MULTI, its commands (each queued) and EXEC, with nothing else in between, so it
runs atomically and its reply is EXEC's array exactly as the client's own node would have given
it (a command refused while queuing aborts it with ``EXECABORT``, as redis-server does). A packed
request that is malformed (a count that does not fit, or a queued command that cannot be queued:
MULTI, EXEC, WATCH ...) is run as it is, and so answered as EXEC with arguments.
"""

from __future__ import annotations

from contextlib import suppress

from node.data.store import CommandRefused, Execute
from node.resp.commands.introspection import command_keys
from node.resp.commands.table import COMMANDS
from node.resp.connection import RespConnection
from node.resp.dispatch import Command

__all__ = [
    "CLUSTERDOWN",
    "CROSSSLOT",
    "carry_out",
    "find_command",
    "pack_transaction",
    "queued_keys",
    "request_bytes",
    "request_keys",
    "split_watched",
    "unpack_transaction",
]

CLUSTERDOWN = "-CLUSTERDOWN The cluster is down"
"""A request no leader could carry out in time (Redis Cluster's own error code)."""
CROSSSLOT = "-CROSSSLOT Keys in request don't hash to the same slot"
"""(Its own error code, as Redis Cluster's and ``CLUSTERDOWN``: not ``-ERR ...``.)"""
_EXEC = b"exec"
_WATCHED = b"WATCHED"


def pack_transaction(queued: list[list[bytes]], watched: list[bytes] | None = None) -> list[bytes]:
    """The arguments of one request that carries the transaction ``queued`` (non-empty commands),
    and the tokens of the watches it depends on, if any."""
    packed = [b"EXEC"]
    if watched:
        packed += [_WATCHED, b"%d" % len(watched), *watched]
    for args in queued:
        packed.append(b"%d" % len(args))
        packed.extend(args)
    return packed


def split_watched(args: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """A packed transaction's watch tokens (none if it carries none), and the request without
    them."""
    if len(args) < 3 or args[0].lower() != _EXEC or args[1] != _WATCHED:
        return [], args
    count = args[2]
    if not (0 < len(count) <= 6 and count.isdigit()) or count[0] == 48 or len(args) < 3 + int(count):
        return [], args  # (malformed: run as it is, and so refused)
    end = 3 + int(count)
    return args[3:end], [args[0], *args[end:]]


def unpack_transaction(args: list[bytes]) -> list[list[bytes]] | None:
    """The queued commands a packed transaction carries; None if ``args`` is not one (or is
    malformed; one with watch tokens too: they are checked and taken off first)."""
    if len(args) < 3 or args[0].lower() != _EXEC:
        return None
    queued: list[list[bytes]] = []
    at = 1
    while at < len(args):
        count = args[at]
        if not (0 < len(count) <= 10 and count.isdigit()) or count[0] == 48:  # ("0" or a leading 0)
            return None
        end = at + 1 + int(count)
        if end > len(args):
            return None
        command = args[at + 1 : end]
        found = COMMANDS.find(command[0])
        if found is None or not found.queueable:
            return None
        queued.append(command)
        at = end
    return queued


def carry_out(execute: Execute, account: str, db: int, args: list[bytes]) -> bytes:
    """Run a forwarded request (one command, or a packed transaction) in database ``db`` of
    ``account``; its reply, an error included."""
    queued = unpack_transaction(args)
    try:
        if queued is None:
            return execute(account, db, args)
        execute(account, db, [b"MULTI"])
        try:
            for command in queued:
                with suppress(CommandRefused):  # (+QUEUED, or refused: EXEC then aborts)
                    execute(account, db, command)
        except BaseException:
            execute(account, db, [b"DISCARD"])  # (the next request must not be queued)
            raise
        return execute(account, db, [b"EXEC"])
    except CommandRefused as exc:
        return exc.reply


def request_keys(args: list[bytes]) -> list[bytes]:
    """The keys of a request not yet checked (queued, or forwarded: a transaction's too)."""
    queued = unpack_transaction(split_watched(args)[1])
    if queued is not None:
        return [key for command in queued for key in request_keys(command)]
    command = find_command(args)
    return command_keys(command, args) if command is not None else []


def find_command(args: list[bytes]) -> Command[RespConnection] | None:
    """The command (or subcommand) a request not yet checked names, if any."""
    command = COMMANDS.find(args[0])
    if command is not None and command.subcommands is not None and len(args) > 1:
        command = command.subcommands.get(args[1].lower())
    return command


def request_bytes(conn: RespConnection, command: Command[RespConnection], args: list[bytes]) -> int:
    """The bytes of a client's request's arguments (the queued commands' for EXEC)."""
    if command.key == _EXEC:
        return sum(len(arg) for queued in conn.transaction.queued or () for arg in queued)
    return sum(map(len, args))


def queued_keys(
    conn: RespConnection, command: Command[RespConnection], args: list[bytes]
) -> list[bytes]:
    """The keys a client's request names (the queued commands' for EXEC)."""
    if command.key == _EXEC:
        return [key for queued in conn.transaction.queued or () for key in request_keys(queued)]
    return command_keys(command, args)
