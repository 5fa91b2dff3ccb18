"""INFO, as redis-server 7.2 prints it: each section it has with the fields that have a truthful
value on this node, in its order. ``default`` (no argument) is every section but commandstats and
latencystats;
``all`` and ``everything`` add them; several section names may be given.

The version reported is ``REDIS_VERSION``: the redis-server release whose behaviour the front door
follows (clients read it to pick the commands they send); ``pubmesh_version`` is the node's own.
Where a field counts something the node has none of (replicas, snapshots, evictions under
``noeviction``, modules), it shows redis-server's value for none.
"""

from __future__ import annotations

import hashlib
import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from typing import Final

from node.broker import VERSION
from node.resp.commands.common import REDIS_VERSION, resp_clients
from node.resp.commands.memory import memory_info
from node.resp.commands.server import last_save
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.tracking import info as tracking_info

__all__ = ["COMMANDS", "replication_id", "run_id"]

Fields = list[tuple[str, object]]


def run_id(conn: RespConnection) -> str:
    """40 hex digits naming this run of the node (INFO's ``run_id``)."""
    return hashlib.sha1(f"run {conn.broker.server_id}".encode()).hexdigest()


def replication_id(conn: RespConnection) -> str:
    """The replication id a master of no replicas shows (``master_replid``)."""
    return hashlib.sha1(f"replid {conn.broker.server_id}".encode()).hexdigest()


def _server(conn: RespConnection) -> Fields:
    broker = conn.broker
    now = time.time_ns()
    uptime = (now - broker.start_ns) // 10**9
    redis = broker.config.redis
    hz = broker.redis_settings.hz
    return [
        ("redis_version", REDIS_VERSION),
        ("redis_git_sha1", "00000000"),
        ("redis_git_dirty", 0),
        ("redis_mode", "standalone"),
        ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("arch_bits", 64 if sys.maxsize > 2**32 else 32),
        ("process_id", os.getpid()),
        ("process_supervised", "no"),
        ("run_id", run_id(conn)),
        ("tcp_port", redis.port if redis is not None else 0),
        ("server_time_usec", now // 1000),
        ("uptime_in_seconds", uptime),
        ("uptime_in_days", uptime // 86400),
        ("hz", hz),
        ("configured_hz", hz),
        ("executable", os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""),
        ("config_file", broker.config_file or ""),
        ("io_threads_active", 0),
        ("pubmesh_version", VERSION),
        ("server_name", broker.server_name),
    ]


def _clients(conn: RespConnection) -> Fields:
    resp = [c for c in conn.broker.clients.values() if isinstance(c, RespConnection)]
    blocked = [c.blocking for c in resp if c.blocking.read is not None]
    return [
        ("connected_clients", len(resp)),
        ("cluster_connections", 0),
        ("maxclients", conn.broker.config.max_connections),
        ("client_recent_max_input_buffer", max((c.parser.buffered for c in resp), default=0)),
        ("client_recent_max_output_buffer", max((c.pending_bytes for c in resp), default=0)),
        ("blocked_clients", len(blocked)),
        ("tracking_clients", tracking_info(conn.broker.keyspaces)["tracking_clients"]),
        ("pubsub_clients", sum(1 for c in resp if c.subscribed)),
        ("clients_in_timeout_table", sum(1 for b in blocked if b.deadline != float("inf"))),
        (
            "total_blocking_keys",
            len({(id(b.read.db), k) for b in blocked if b.read for k in b.read.keys}),
        ),
        ("unauthenticated_clients", sum(1 for c in resp if not c.authenticated)),
    ]


def _persistence(conn: RespConnection) -> Fields:
    broker = conn.broker
    store = broker.keyspaces.store
    fields: Fields = [
        ("loading", int(broker.keyspaces.loading)),
        ("async_loading", 0),
        ("rdb_changes_since_last_save", 0),
        ("rdb_bgsave_in_progress", 0),
        ("rdb_last_save_time", last_save(conn)),
        ("rdb_last_bgsave_status", "ok"),
        ("rdb_last_bgsave_time_sec", -1),
        ("rdb_current_bgsave_time_sec", -1),
        ("aof_enabled", int(store is not None)),
    ]
    fields += store.info() if store is not None else [("aof_rewrite_in_progress", 0)]
    return fields


def _stats(conn: RespConnection) -> Fields:
    broker = conn.broker
    stats = broker.redis_stats
    ops, in_kbps, out_kbps = stats.rates()
    patterns = sum(len(a.patterns) for a in broker.accounts.values() if a.patterns is not None)
    channels = {ch for c in resp_clients(conn) for ch in c.subs}
    return [
        ("total_connections_received", broker.accepted[RespConnection]),
        ("total_commands_processed", stats.processed),
        ("instantaneous_ops_per_sec", round(ops)),
        ("total_net_input_bytes", stats.net_input),
        ("total_net_output_bytes", stats.net_output),
        ("instantaneous_input_kbps", f"{in_kbps:.2f}"),
        ("instantaneous_output_kbps", f"{out_kbps:.2f}"),
        ("rejected_connections", stats.rejected_connections),
        ("expired_keys", broker.keyspaces.expired_keys),
        ("evicted_keys", 0),
        ("evicted_clients", 0),
        ("keyspace_hits", broker.keyspaces.hits),
        ("keyspace_misses", broker.keyspaces.misses),
        ("pubsub_channels", len(channels)),
        ("pubsub_patterns", patterns),
        ("client_output_buffer_limit_disconnections", broker.slow_consumers),
        *(
            (name, count)
            for name, count in tracking_info(broker.keyspaces).items()
            if name != "tracking_clients"
        ),
        ("total_error_replies", stats.error_replies),
    ]


def _replication(conn: RespConnection) -> Fields:
    return [
        ("role", "master"),
        ("connected_slaves", 0),
        ("master_failover_state", "no-failover"),
        ("master_replid", replication_id(conn)),
        ("master_replid2", "0" * 40),
        ("master_repl_offset", 0),
        ("second_repl_offset", -1),
        ("repl_backlog_active", 0),
        ("repl_backlog_size", 1048576),
        ("repl_backlog_first_byte_offset", 0),
        ("repl_backlog_histlen", 0),
    ]


def _cpu(conn: RespConnection) -> Fields:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    fields: Fields = [
        ("used_cpu_sys", f"{own.ru_stime:.6f}"),
        ("used_cpu_user", f"{own.ru_utime:.6f}"),
        ("used_cpu_sys_children", f"{children.ru_stime:.6f}"),
        ("used_cpu_user_children", f"{children.ru_utime:.6f}"),
    ]
    thread = getattr(resource, "RUSAGE_THREAD", None)
    if thread is not None:
        main = resource.getrusage(thread)
        fields += [
            ("used_cpu_sys_main_thread", f"{main.ru_stime:.6f}"),
            ("used_cpu_user_main_thread", f"{main.ru_utime:.6f}"),
        ]
    return fields


def _errorstats(conn: RespConnection) -> Fields:
    return [(f"errorstat_{code}", f"count={n}") for code, n in conn.broker.redis_stats.errors.items()]


def _commandstats(conn: RespConnection) -> Fields:
    fields: Fields = []
    for name, stat in conn.broker.redis_stats.commands.items():
        per_call = stat.usec / stat.calls if stat.calls else 0.0
        fields.append(
            (
                f"cmdstat_{name}",
                f"calls={stat.calls},usec={stat.usec},usec_per_call={per_call:.2f},"
                f"rejected_calls={stat.rejected},failed_calls={stat.failed}",
            )
        )
    return fields


def _latencystats(conn: RespConnection) -> Fields:
    shares = conn.broker.redis_settings.latency_percentiles
    fields: Fields = []
    for name, stat in conn.broker.redis_stats.commands.items():
        if stat.tracked:
            shown = ",".join(f"p{share:g}={stat.percentile(share):.3f}" for share in shares)
            fields.append((f"latency_percentiles_usec_{name}", shown))
    return fields


def _keyspace(conn: RespConnection) -> Fields:
    databases = conn.broker.keyspaces.keyspace(conn.account.name).databases()
    return [
        (f"db{n}", f"keys={len(db)},expires={db.expiring()},avg_ttl=0")
        for n, db in sorted(databases.items())
        if len(db)
    ]


def _none(conn: RespConnection) -> Fields:
    return []


def _cluster(conn: RespConnection) -> Fields:
    return [("cluster_enabled", 0)]


def _fields(title: str, read: Callable[[RespConnection], Fields]) -> Callable[[RespConnection], str]:
    """A section written from its fields."""

    def section(conn: RespConnection) -> str:
        return f"# {title}\r\n" + "".join(f"{name}:{value}\r\n" for name, value in read(conn))

    return section


_SECTIONS: Final[dict[bytes, Callable[[RespConnection], str]]] = {
    b"server": _fields("Server", _server),
    b"clients": _fields("Clients", _clients),
    b"memory": memory_info,
    b"persistence": _fields("Persistence", _persistence),
    b"stats": _fields("Stats", _stats),
    b"replication": _fields("Replication", _replication),
    b"cpu": _fields("CPU", _cpu),
    b"modules": _fields("Modules", _none),
    b"commandstats": _fields("Commandstats", _commandstats),
    b"errorstats": _fields("Errorstats", _errorstats),
    b"latencystats": _fields("Latencystats", _latencystats),
    b"cluster": _fields("Cluster", _cluster),
    b"keyspace": _fields("Keyspace", _keyspace),
}
"""Every section, in redis-server's order."""
_DEFAULT: Final = frozenset(_SECTIONS) - {b"commandstats", b"latencystats"}


def _info(conn: RespConnection, args: list[bytes]) -> None:
    wanted = {arg.lower() for arg in args[1:]} or {b"default"}
    chosen: set[bytes] = set()
    if wanted & {b"all", b"everything"}:
        chosen.update(_SECTIONS)
    if b"default" in wanted:
        chosen.update(_DEFAULT)
    chosen.update(wanted & _SECTIONS.keys())
    text = "\r\n".join(section(conn) for key, section in _SECTIONS.items() if key in chosen)
    conn.reply(conn.writer.verbatim(text.encode()))


COMMANDS: Final = (Command("info", -1, _info),)
