"""The diagnostic commands (SLOWLOG, LATENCY, MONITOR, ROLE, DEBUG) and those of features
the node runs without (CLUSTER, READONLY, READWRITE), as redis-server 7.2 answers them.
Where keys live on replica groups (``Broker.key_router``), READONLY and READWRITE set the
connection's ``readonly``, and CLUSTER's subcommands that describe the placement answer as in
cluster mode (``node.replicated.topology``); elsewhere they answer that cluster support is
disabled.

DEBUG: only ``SLEEP 0`` and ``OBJECT key``. A node serves NATS clients on the same loop, so a DEBUG
SLEEP that stops everything, as redis-server's does, is refused for any longer time; the other
subcommands answer as redis-server answers one it does not know.
"""

from __future__ import annotations

from typing import Final

from node.data.keyspace import key_memory
from node.integers import string2ll
from node.redis_state.stats import SlowEntry
from node.resp.commands.common import NOT_INTEGER, help_reply, now_ms
from node.resp.commands.objects import encoding
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import OK, array, as_text, bulk, integer, simple

__all__ = ["COMMANDS"]

_NO_CLUSTER: Final = "This instance has cluster support disabled"
_LRU_CLOCK_MAX: Final = (1 << 24) - 1
"""DEBUG OBJECT's ``lru`` is the access time in whole seconds, wrapped as redis-server's 24 bits."""


def _slow_entry(entry: SlowEntry) -> bytes:
    return array(
        [
            integer(entry.id),
            integer(entry.when),
            integer(entry.usec),
            array(bulk(arg) for arg in entry.args),
            bulk(entry.addr.encode()),
            bulk(entry.name.encode("utf-8", "surrogateescape")),
        ]
    )


def _slowlog_get(conn: RespConnection, args: list[bytes]) -> None:
    count = 10
    if len(args) == 3:
        number = string2ll(args[2])
        if number is None or number < -1:
            conn.error("count should be greater than or equal to -1")
            return
        count = number if number >= 0 else len(conn.broker.redis_stats.slowlog)
    entries = list(conn.broker.redis_stats.slowlog)[:count]
    conn.reply(array(_slow_entry(entry) for entry in entries))


def _slowlog_len(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(integer(len(conn.broker.redis_stats.slowlog)))


def _slowlog_reset(conn: RespConnection, args: list[bytes]) -> None:
    conn.broker.redis_stats.slowlog.clear()
    conn.reply(OK)


def _latency_latest(conn: RespConnection, args: list[bytes]) -> None:
    rows = []
    for event, record in conn.broker.redis_stats.latency.items():
        when, ms = record.samples[-1]
        rows.append(array([bulk(event.encode()), integer(when), integer(ms), integer(record.max)]))
    conn.reply(array(rows))


def _latency_history(conn: RespConnection, args: list[bytes]) -> None:
    record = conn.broker.redis_stats.latency.get(as_text(args[2]))
    samples = record.samples if record is not None else ()
    conn.reply(array(array([integer(when), integer(ms)]) for when, ms in samples))


def _latency_reset(conn: RespConnection, args: list[bytes]) -> None:
    latency = conn.broker.redis_stats.latency
    if len(args) == 2:
        count = len(latency)
        latency.clear()
    else:
        count = sum(1 for name in args[2:] if latency.pop(as_text(name), None) is not None)
    conn.reply(integer(count))


def _latency_doctor(conn: RespConnection, args: list[bytes]) -> None:
    stats = conn.broker.redis_stats
    if not stats.settings.latency_monitor_threshold and not stats.latency:
        text = (
            "Latency monitoring is disabled on this node: CONFIG SET latency-monitor-threshold "
            "<milliseconds> enables it."
        )
    elif not stats.latency:
        text = "No latency spikes were observed since monitoring started."
    else:
        lines = [
            f"{event}: {len(r.samples)} latency spikes (worst {r.max} milliseconds)."
            for event, r in stats.latency.items()
        ]
        text = "\n".join(lines)
    conn.reply(conn.writer.verbatim(text.encode()))


def _latency_histogram(conn: RespConnection, args: list[bytes]) -> None:
    """Each command's calls and cumulative times, for the commands named (a container: its
    subcommands) or all, those never called left out."""
    commands = conn.broker.redis_stats.commands
    if len(args) == 2:
        names = list(commands)
    else:
        names = []
        for arg in args[2:]:
            name = as_text(arg).lower()
            names += [n for n in commands if n == name or n.startswith(name + "|")]
    writer = conn.writer
    rows = []
    for name in dict.fromkeys(names):
        stat = commands[name]
        tracked = stat.tracked
        if not tracked:
            continue
        histogram = writer.map((integer(usec), integer(n)) for usec, n in stat.cumulative())
        fields = [(bulk(b"calls"), integer(tracked)), (bulk(b"histogram_usec"), histogram)]
        rows.append((bulk(name.encode()), writer.map(fields)))
    conn.reply(writer.map(rows))


def _monitor(conn: RespConnection, args: list[bytes]) -> None:
    if not conn.monitoring:
        conn.reply(OK)
        conn.start_monitoring()


def _role(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(array([bulk(b"master"), integer(0), array([])]))


def _debug(conn: RespConnection, args: list[bytes]) -> None:
    sub = args[1].lower()
    if sub == b"sleep" and len(args) == 3:
        seconds = _seconds(args[2])
        if seconds is None:
            conn.error(NOT_INTEGER)
        elif seconds > 0:
            conn.error("DEBUG SLEEP would stop the node's other clients: only 0 is accepted")
        else:
            conn.reply(OK)
    elif sub == b"object" and len(args) == 3:
        value = conn.database.get(args[2], now_ms())
        if value is None:
            conn.error("no such key")
            return
        size = key_memory(args[2], value)
        db, clock = conn.database, conn.broker.keyspaces.clock
        accessed = db.access.get(args[2], clock)
        conn.reply(
            simple(
                b"Value at:0x%x refcount:1 encoding:%s serializedlength:%d lru:%d lru_seconds_idle:%d"
                % (id(value), encoding(value), size, accessed & _LRU_CLOCK_MAX, clock - accessed)
            )
        )
    else:
        shown = as_text(args[1])[:128]
        conn.error(f"unknown subcommand or wrong number of arguments for '{shown}'. Try DEBUG HELP.")


def _seconds(text: bytes) -> float | None:
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if seconds == seconds else None


def _cluster(conn: RespConnection, args: list[bytes]) -> None:
    router = conn.broker.key_router
    if router is None or not router.cluster(conn, args):
        conn.error(_NO_CLUSTER)


def _readonly(conn: RespConnection, args: list[bytes]) -> None:
    _read_from_replicas(conn, True)


def _readwrite(conn: RespConnection, args: list[bytes]) -> None:
    _read_from_replicas(conn, False)


def _read_from_replicas(conn: RespConnection, on: bool) -> None:
    """READONLY (``on``) and READWRITE: only where keys live on replica groups."""
    if conn.broker.key_router is None:
        conn.error(_NO_CLUSTER)
        return
    conn.readonly = on
    conn.reply(OK)


_CLUSTER_SUBCOMMANDS: Final = [
    *((name, -3, "admin") for name in ("addslots", "delslots")),
    *((name, -4, "admin") for name in ("addslotsrange", "delslotsrange", "meet", "setslot")),
    *((name, 2, "admin") for name in ("bumpepoch", "flushslots", "saveconfig")),
    *((name, 3, "admin") for name in ("count-failure-reports", "forget", "replicas", "replicate")),
    *((name, 3, "admin") for name in ("set-config-epoch", "slaves")),
    ("failover", -2, "admin"),
    ("reset", -2, "admin noscript"),
    *((name, 2, "") for name in ("help", "info", "links", "myid", "myshardid", "nodes", "shards")),
    ("slots", 2, ""),
    ("countkeysinslot", 3, ""),
    ("keyslot", 3, ""),
    ("getkeysinslot", 4, ""),
]
"""CLUSTER's subcommands as redis-server's table has them (each answered that cluster support
is disabled): name, arity, flags."""
_SLOWLOG_HELP: Final = [
    b"SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"GET [<count>]",
    b"    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    b"LEN",
    b"    Return the length of the slowlog.",
    b"RESET",
    b"    Reset the slowlog.",
    b"HELP",
    b"    Prints this help.",
]
_LATENCY_HELP: Final = [
    b"LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"DOCTOR",
    b"HISTORY <event>",
    b"LATEST",
    b"RESET [<event> ...]",
    b"HISTOGRAM [COMMAND ...]",
    b"HELP",
]

COMMANDS: Final = (
    Command(
        "slowlog",
        -2,
        None,
        subcommands=[
            Command("slowlog|get", -2, _slowlog_get, "admin"),
            Command("slowlog|len", 2, _slowlog_len, "admin"),
            Command("slowlog|reset", 2, _slowlog_reset, "admin"),
            Command("slowlog|help", 2, help_reply(_SLOWLOG_HELP)),
        ],
    ),
    Command(
        "latency",
        -2,
        None,
        subcommands=[
            Command("latency|latest", 2, _latency_latest, "admin noscript"),
            Command("latency|history", 3, _latency_history, "admin noscript"),
            Command("latency|reset", -2, _latency_reset, "admin noscript"),
            Command("latency|doctor", 2, _latency_doctor, "admin noscript"),
            Command("latency|histogram", -2, _latency_histogram, "admin noscript"),
            Command("latency|help", 2, help_reply(_LATENCY_HELP)),
        ],
    ),
    Command("monitor", 1, _monitor, "admin noscript"),
    Command("role", 1, _role, "noscript"),
    Command("debug", -2, _debug, "admin noscript"),
    Command(
        "cluster",
        -2,
        None,
        subcommands=[
            Command(f"cluster|{name}", arity, _cluster, flags)
            for name, arity, flags in _CLUSTER_SUBCOMMANDS
        ],
    ),
    Command("readonly", 1, _readonly),
    Command("readwrite", 1, _readwrite),
)
