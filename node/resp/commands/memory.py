"""Memory over RESP, as redis-server 7.2 answers it: the MEMORY command (USAGE of a key: what
``node.data.keyspace`` counts it as for ``maxmemory``), what CONFIG SET maxmemory does, and INFO's
memory section.

What ``used_memory`` counts, and how it is kept, is ``node.data.keyspaces``' to say. The only policy is
``noeviction``: nothing is ever evicted to make room.
"""

from __future__ import annotations

import logging
from typing import Final

from node.broker import Broker
from node.data.keyspace import key_memory
from node.integers import string2ll
from node.process_memory import resident_bytes
from node.resp.commands.common import NOT_INTEGER, SYNTAX, help_reply, now_ms
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import OK, bulk, integer

__all__ = ["COMMANDS", "POLICY", "human", "memory_info", "parse_memory", "set_maxmemory"]

log = logging.getLogger("pubmesh")

POLICY: Final = b"noeviction"
"""The one ``maxmemory-policy``."""
_UNITS: Final = {
    b"": 1,
    b"b": 1,
    b"k": 1000,
    b"kb": 1024,
    b"m": 1000**2,
    b"mb": 1024**2,
    b"g": 1000**3,
    b"gb": 1024**3,
}
_ULL: Final = 2**64


def parse_memory(value: bytes) -> int | None:
    """A memory value as redis-server's ``memtoull`` reads it, or None: digits and an optional
    unit of ``_UNITS`` in any case; no sign, no blanks; the number saturates at 2**64-1 and the
    product wraps around, as unsigned C arithmetic does."""
    end = 0
    while end < len(value) and value[end : end + 1].isdigit():
        end += 1
    multiplier = _UNITS.get(value[end:].lower())
    if multiplier is None or end >= 128:
        return None
    number = min(int(value[:end] or b"0"), _ULL - 1)
    return number * multiplier % _ULL


def human(size: int) -> str:
    """Bytes as redis-server's ``bytesToHuman`` shows them: ``512B``, ``1.50K``, ``2.00M``..."""
    if size < 1024:
        return f"{size}B"
    for power, unit in enumerate("KMGTP", 1):
        if size < 1024 ** (power + 1):
            return f"{size / 1024**power:.2f}{unit}"
    return f"{size}B"


def memory_info(conn: RespConnection) -> str:
    """INFO's memory section: the fields redis-server shows that mean something here, in its
    order. ``used_memory_dataset`` is what the keys hold, ``mem_clients_normal`` the clients'
    output buffers (measured now)."""
    broker = conn.broker
    keyspaces = broker.keyspaces
    keyspaces.measure_output(broker.pending_output())
    used, rss, peak = keyspaces.used_memory, resident_bytes(), keyspaces.peak
    limit = keyspaces.maxmemory
    engine = broker.scripts.made(conn.account.name)
    scripts, functions, libraries = (
        (len(engine.scripts), len(engine.functions), len(engine.libraries)) if engine else (0, 0, 0)
    )
    return (
        "# Memory\r\n"
        f"used_memory:{used}\r\nused_memory_human:{human(used)}\r\n"
        f"used_memory_rss:{rss}\r\nused_memory_rss_human:{human(rss)}\r\n"
        f"used_memory_peak:{peak}\r\nused_memory_peak_human:{human(peak)}\r\n"
        f"used_memory_dataset:{keyspaces.dataset_bytes}\r\n"
        f"number_of_cached_scripts:{scripts}\r\nnumber_of_functions:{functions}\r\n"
        f"number_of_libraries:{libraries}\r\n"
        f"maxmemory:{limit}\r\nmaxmemory_human:{human(limit)}\r\n"
        f"maxmemory_policy:{POLICY.decode()}\r\n"
        f"mem_clients_normal:{keyspaces.output_bytes}\r\n"
    )


def set_maxmemory(broker: Broker, limit: int) -> None:
    """CONFIG SET maxmemory: the new limit, with redis-server's warning when memory in use is
    already past it."""
    keyspaces = broker.keyspaces
    keyspaces.maxmemory = limit
    if limit and limit < keyspaces.used_memory:
        log.warning(
            "WARNING: the new maxmemory value set via CONFIG SET (%d) is smaller than the "
            "current memory usage (%d): commands that add data are refused until keys are "
            "deleted (maxmemory-policy noeviction)",
            limit,
            keyspaces.used_memory,
        )


def _usage(conn: RespConnection, args: list[bytes]) -> None:
    i = 3
    while i < len(args):
        if args[i].lower() != b"samples" or i + 1 >= len(args):
            conn.error(SYNTAX)
            return
        samples = string2ll(args[i + 1])
        if samples is None:
            conn.error(NOT_INTEGER)
            return
        if samples < 0:
            conn.error(SYNTAX)
            return
        i += 2
    key = args[2]
    value = conn.database.get(key, now_ms())
    if value is None:
        conn.reply(conn.writer.null)
        return
    conn.reply(integer(key_memory(key, value)))


def _stats(conn: RespConnection, args: list[bytes]) -> None:
    keyspaces = conn.broker.keyspaces
    keyspaces.measure_output(conn.broker.pending_output())
    keys = sum(len(db) for ks in keyspaces.accounts().values() for db in ks.databases().values())
    dataset = keyspaces.dataset_bytes
    pairs: list[tuple[bytes, bytes]] = [
        (bulk(b"peak.allocated"), integer(keyspaces.peak)),
        (bulk(b"total.allocated"), integer(keyspaces.used_memory)),
        (bulk(b"clients.normal"), integer(keyspaces.output_bytes)),
        (bulk(b"keys.count"), integer(keys)),
        (bulk(b"keys.bytes-per-key"), integer(dataset // keys if keys else 0)),
        (bulk(b"dataset.bytes"), integer(dataset)),
    ]
    conn.reply(conn.writer.map(pairs))


def _doctor(conn: RespConnection, args: list[bytes]) -> None:
    keyspaces = conn.broker.keyspaces
    limit = keyspaces.maxmemory
    if limit and keyspaces.used_memory > limit:
        text = "Memory in use is past maxmemory: commands that add data are refused."
    else:
        text = "No memory problems were found."
    conn.reply(conn.writer.verbatim(text.encode()))


def _malloc_stats(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(conn.writer.verbatim(b"Stats not supported for the current allocator"))


def _purge(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(OK)


_HELP: Final = [
    b"MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"DOCTOR",
    b"MALLOC-STATS",
    b"PURGE",
    b"STATS",
    b"USAGE <key> [SAMPLES <count>]",
    b"HELP",
]

COMMANDS: Final = (
    Command(
        "memory",
        -2,
        None,
        subcommands=[
            Command("memory|doctor", 2, _doctor),
            Command("memory|malloc-stats", 2, _malloc_stats),
            Command("memory|purge", 2, _purge),
            Command("memory|stats", 2, _stats),
            Command("memory|usage", -3, _usage, "readonly", keys=(2, 2, 1)),
            Command("memory|help", 2, help_reply(_HELP)),
        ],
    ),
)
