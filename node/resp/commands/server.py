"""The server and introspection commands (COMMAND, INFO, CONFIG, TIME, BGREWRITEAOF), as
redis-server 7.2 answers them. CONFIG SET and INFO's memory section are ``memory``'s.

COMMAND lists the table the connection serves, without flags, key positions or docs.
"""

from __future__ import annotations

import os
import time
from typing import Final

from node.broker import VERSION
from node.config.keyspace_events import format_flags
from node.resp.commands.common import REDIS_VERSION, help_reply, resp_clients
from node.resp.commands.memory import POLICY, config_set, memory_info
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.tracking import info as tracking_info
from node.resp.writer import array, bulk, integer, simple
from routing import glob_match

__all__ = ["COMMANDS"]


def _command_info_entry(command: Command[RespConnection]) -> bytes:
    return array(
        [
            bulk(command.name.encode()),
            integer(command.arity),
            array([]),
            integer(0),
            integer(0),
            integer(0),
            array([]),
            array([]),
            array([]),
            array([]),
        ]
    )


def _command(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(array(_command_info_entry(c) for c in conn.table.by_name.values()))


def _command_count(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(integer(len(conn.table)))


def _command_docs(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(conn.writer.map([]))


def _command_info(conn: RespConnection, args: list[bytes]) -> None:
    names = [name.lower() for name in args[2:]] or list(conn.table)
    entries = []
    for name in names:
        command = conn.table.by_name.get(name)
        entries.append(conn.writer.null_array if command is None else _command_info_entry(command))
    conn.reply(array(entries))


def _info(conn: RespConnection, args: list[bytes]) -> None:
    broker = conn.broker
    wanted = {arg.lower() for arg in args[1:]} or {b"default"}
    everything = bool(wanted & {b"all", b"everything", b"default"})
    sections: list[str] = []
    tracking = tracking_info(broker.keyspaces)
    if everything or b"server" in wanted:
        uptime = (time.time_ns() - broker.start_ns) // 10**9
        sections.append(
            "# Server\r\n"
            f"redis_version:{REDIS_VERSION}\r\nredis_mode:standalone\r\n"
            f"pubmesh_version:{VERSION}\r\nserver_name:{broker.server_name}\r\n"
            f"process_id:{os.getpid()}\r\nuptime_in_seconds:{uptime}\r\n"
            f"uptime_in_days:{uptime // 86400}\r\n"
        )
    if everything or b"clients" in wanted:
        resp = [c for c in broker.clients.values() if isinstance(c, RespConnection)]
        subscribers = sum(1 for c in resp if c.subs or c.patterns)
        unauthenticated = sum(1 for c in resp if not c.authenticated)
        sections.append(
            "# Clients\r\n"
            f"connected_clients:{len(resp)}\r\npubsub_clients:{subscribers}\r\n"
            f"unauthenticated_clients:{unauthenticated}\r\n"
            f"maxclients:{broker.config.max_connections}\r\n"
            f"blocked_clients:{sum(1 for c in resp if c.blocked is not None)}\r\n"
            f"tracking_clients:{tracking['tracking_clients']}\r\n"
        )
    if everything or b"memory" in wanted:
        sections.append(memory_info(conn))
    if everything or b"persistence" in wanted:
        store = broker.keyspaces.store
        fields: list[tuple[str, int | str]] = [("loading", 0), ("aof_enabled", int(store is not None))]
        fields += store.info() if store is not None else [("aof_rewrite_in_progress", 0)]
        sections.append("# Persistence\r\n" + "".join(f"{k}:{v}\r\n" for k, v in fields))
    if everything or b"stats" in wanted:
        patterns = sum(len(a.patterns) for a in broker.accounts.values() if a.patterns is not None)
        channels = {ch for c in resp_clients(conn) for ch in c.subs}
        in_msgs, _, out_msgs, _ = broker.traffic()
        sections.append(
            "# Stats\r\n"
            f"total_connections_received:{broker.total_connections}\r\n"
            f"pubsub_channels:{len(channels)}\r\npubsub_patterns:{patterns}\r\n"
            f"total_messages_in:{in_msgs}\r\ntotal_messages_out:{out_msgs}\r\n"
            f"client_output_buffer_limit_disconnections:{broker.slow_consumers}\r\n"
            f"tracking_total_keys:{tracking['tracking_total_keys']}\r\n"
            f"tracking_total_items:{tracking['tracking_total_items']}\r\n"
            f"tracking_total_prefixes:{tracking['tracking_total_prefixes']}\r\n"
        )
    if everything or b"keyspace" in wanted:
        databases = conn.broker.keyspaces.keyspace(conn.account.name).databases()
        lines = [
            f"db{n}:keys={len(db)},expires={db.expiring()},avg_ttl=0\r\n"
            for n, db in sorted(databases.items())
            if len(db)
        ]
        sections.append("# Keyspace\r\n" + "".join(lines))
    conn.reply(conn.writer.verbatim("\r\n".join(sections).encode()))


_CONFIG = {
    b"databases": b"16",
    b"save": b"",
    b"maxmemory-policy": POLICY,
    b"cluster-enabled": b"no",
}


def _config_get(conn: RespConnection, args: list[bytes]) -> None:
    limits = "client-output-buffer-limit"
    store = conn.broker.keyspaces.store
    table = _CONFIG | {
        b"maxmemory": b"%d" % conn.broker.keyspaces.maxmemory,
        b"notify-keyspace-events": format_flags(conn.broker.keyspaces.notifier.configured),
        b"tracking-table-max-keys": b"%d" % conn.broker.keyspaces.tracking_max_keys,
        b"appendonly": b"no" if store is None else b"yes",
        b"appendfsync": b"everysec" if store is None else store.appendfsync.encode(),
    }
    found: dict[bytes, bytes] = {}
    for pattern in args[2:]:
        for key, value in table.items():
            if glob_match(pattern, key, nocase=True):
                found[key] = value
        if glob_match(pattern, limits.encode(), nocase=True):
            hard, soft = conn.hard_limit, conn.stall_at
            found[limits.encode()] = b"normal 0 0 0 slave 268435456 67108864 60 pubsub %d %d %d" % (
                hard,
                soft,
                int(conn.soft_seconds),
            )
    conn.reply(conn.writer.map((bulk(k), bulk(v)) for k, v in found.items()))


def _bgrewriteaof(conn: RespConnection, args: list[bytes]) -> None:
    store = conn.broker.keyspaces.store
    if store is None:
        conn.error("no append only file to rewrite: keys are kept in memory only (see store_dir)")
    elif store.rewrite():
        conn.reply(simple(b"Background append only file rewriting started"))
    else:
        conn.error("Background append only file rewriting already in progress")


def _time(conn: RespConnection, args: list[bytes]) -> None:
    now = time.time_ns() // 1000
    conn.reply(array([bulk(b"%d" % (now // 10**6)), bulk(b"%d" % (now % 10**6))]))


_COMMAND_HELP = [
    b"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"(no subcommand)",
    b"COUNT",
    b"DOCS [<command-name> ...]",
    b"INFO [<command-name> ...]",
    b"HELP",
]
_CONFIG_HELP = [
    b"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"GET <pattern>",
    b"SET <directive> <value>",
    b"HELP",
]


COMMANDS: Final = (
    Command(
        "command",
        -1,
        _command,
        subcommands=[
            Command("command|count", 2, _command_count),
            Command("command|docs", -2, _command_docs),
            Command("command|info", -2, _command_info),
            Command("command|help", 2, help_reply(_COMMAND_HELP)),
        ],
    ),
    Command("info", -1, _info),
    Command(
        "config",
        -2,
        None,
        subcommands=[
            Command("config|get", -3, _config_get, "noscript"),
            Command("config|set", -4, config_set, "noscript"),
            Command("config|help", 2, help_reply(_CONFIG_HELP)),
        ],
    ),
    Command("time", 1, _time),
    Command("bgrewriteaof", 1, _bgrewriteaof, "noscript"),
)
"""The server commands, in COMMAND's order."""
