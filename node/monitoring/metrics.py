"""The monitoring numbers in Prometheus's text format, under prometheus-nats-exporter's names.

Dashboards and alerts written for NATS query the exporter's series (``gnatsd_varz_in_msgs``,
``gnatsd_connz_pending_bytes``, ``gnatsd_healthz_status`` ...). Serving those names from the node
itself lets them work unchanged without running the exporter beside every node. The values come from
the same documents /varz, /connz and /subsz serve, so the two views never disagree. Every series
carries the ``server_id`` label, with the node's own id (the exporter's ``-use_internal_server_id``).

The Redis front door's numbers (/varz's ``redis`` block, which the exporter would not read, being
nested) are ``pubmesh_redis_*`` series, present only on a node with a Redis port; the numbers of
its Redis streams (/varz's ``streams`` block) are ``pubmesh_streams_*`` series, always present.
"""

from __future__ import annotations

from typing import Any

from node.monitoring.connz import ConnzOptions, connz
from node.monitoring.pacing import Pacer
from node.monitoring.state import MonitorState
from node.monitoring.subsz import SubszOptions, subsz
from node.monitoring.varz import varz

__all__ = ["CONTENT_TYPE", "exposition"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_VARZ = {
    "connections": "Client connections open now",
    "total_connections": "Client connections accepted since start",
    "routes": "Route connections in use now, each pooled connection counted",
    "remotes": "Cluster peers connected now",
    "leafnodes": "Leaf node connections open now",
    "in_msgs": "Messages received since start",
    "out_msgs": "Messages sent since start",
    "in_bytes": "Payload bytes received since start",
    "out_bytes": "Payload bytes sent since start",
    "slow_consumers": "Connections closed as slow consumers since start",
    "stale_connections": "Connections closed for not answering pings since start",
    "subscriptions": "Subscriptions held across all accounts",
    "mem": "Resident memory of the process in bytes",
    "cpu": "Process CPU use in percent of one core",
    "cores": "CPU cores of the host",
    "max_connections": "Configured limit of client connections",
    "max_payload": "Configured largest message payload in bytes",
    "max_pending": "Configured pending bytes at which a client is a slow consumer",
    "max_control_line": "Configured longest protocol line in bytes",
    "ping_interval": "Configured interval between pings in nanoseconds",
    "ping_max": "Configured unanswered pings before a connection is stale",
    "auth_timeout": "Configured seconds a client has to authenticate",
    "write_deadline": "Configured time a write may take in nanoseconds",
    "port": "Client port",
    "http_port": "Monitoring port",
}
_SUBSZ = {
    "num_subscriptions": "Subscriptions held across all accounts",
    "num_cache": "Subjects held in the match caches",
    "num_inserts": "Subscriptions added since start",
    "num_removes": "Subscriptions removed since start",
    "num_matches": "Subject lookups since start",
    "cache_hit_rate": "Share of lookups answered from a cache",
    "max_fanout": "Most subscribers one cached subject reaches",
    "avg_fanout": "Mean subscribers a cached subject reaches",
    "num_patterns": "Distinct Redis patterns subscribed to, per account, summed",
}
_REDIS_GAUGES = {
    "connections": "Redis client connections open now",
    "subscriptions": "Channel subscriptions of Redis clients (SUBSCRIBE and SSUBSCRIBE)",
    "channels": "Distinct channels Redis clients subscribe to, per account, summed",
    "pattern_subscriptions": "Pattern subscriptions of Redis clients (PSUBSCRIBE)",
    "patterns": "Distinct Redis patterns subscribed to, per account, summed",
    "maxmemory": "Bytes past which commands that add data are refused (0: no limit)",
    "used_memory": "Bytes the keys and the clients' output buffers hold, as maxmemory counts them",
}
_REDIS_COUNTERS = {
    "total_connections": "Redis client connections accepted since start",
    "in_msgs": "Messages published by Redis clients since start",
    "in_bytes": "Payload bytes published by Redis clients since start",
    "out_msgs": "Messages delivered to Redis clients since start",
    "out_bytes": "Payload bytes delivered to Redis clients since start",
}
_STREAMS_GAUGES = {
    "streams": "Redis stream keys held, in every account and database",
    "entries": "Entries in those streams",
    "bytes": "Memory those streams hold in bytes",
    "groups": "Consumer groups of those streams",
    "captures": "Configured streams that capture subjects",
    "log_size": "Bytes of the journal of key changes (0 without one)",
    "fsync_lag": "Seconds since the oldest journal write not yet made durable (0 when all is)",
    "log_writable": "1 while the journal can be written, 0 while it fails and writes are refused",
}
_STREAMS_COUNTERS = {
    "captured": "Messages captured into streams since start",
    "refused": "Messages a capturing stream could not store since start",
    "log_discards": "Batches of changes taken back since start because the journal failed",
}
_CONNZ_GAUGES = {
    "pending_bytes": "Bytes waiting to be written to clients",
    "subscriptions": "Subscriptions of the open client connections",
}
_CONNZ_COUNTERS = {
    "in_msgs": "Messages received from the open client connections",
    "out_msgs": "Messages sent to the open client connections",
    "in_bytes": "Payload bytes received from the open client connections",
    "out_bytes": "Payload bytes sent to the open client connections",
}


_LABEL_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})
_LABEL_ESCAPES.update(dict.fromkeys(range(0xD800, 0xE000), "\ufffd"))


def _escape(value: str) -> str:
    """A label value as the format quotes it; text decoded from bytes that were not UTF-8 (a server
    name from the command line) shows U+FFFD for each such byte, as in the JSON documents."""
    return value.translate(_LABEL_ESCAPES)


class _Exposition:
    """Metric families being written, each with its HELP and TYPE lines before its samples."""

    def __init__(self, server_id: str) -> None:
        self._labels = f'server_id="{_escape(server_id)}"'
        self.lines: list[str] = []

    def add(
        self, name: str, sample: float, help_text: str, *, kind: str = "gauge", **labels: str
    ) -> None:
        extra = "".join(f',{key}="{_escape(text)}"' for key, text in labels.items())
        if isinstance(sample, bool):  # (a flag is a gauge of 1 or 0)
            sample = int(sample)
        self.lines += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} {kind}",
            f"{name}{{{self._labels}{extra}}} {sample!r}",
        ]


async def exposition(state: MonitorState, pace: Pacer) -> str:
    """Every series, in the text format Prometheus scrapes."""
    broker = state.broker
    out = _Exposition(broker.server_id)
    doc = await varz(state, pace)
    for key, help_text in _VARZ.items():
        out.add(f"gnatsd_varz_{key}", doc[key], help_text)
    start_ms = broker.start_ns // 10**6
    out.add("gnatsd_varz_start", start_ms, "When the server started, in Unix milliseconds")
    out.add("gnatsd_varz_config_load_time", start_ms, "When the configuration was loaded, in Unix ms")
    out.add("gnatsd_varz_version", 1, "The server's version", value=doc["version"])
    out.add("gnatsd_varz_server_name", 1, "The server's name", value=doc["server_name"])
    cluster = doc["cluster"]  # {} when standalone: the exporter then writes no cluster series
    if "name" in cluster:
        out.add("gnatsd_varz_cluster_name", 1, "The cluster's name", value=cluster["name"])
    if "pool_size" in cluster:
        out.add("gnatsd_varz_cluster_pool_size", cluster["pool_size"], "Route connections per peer")
    for kind, count in doc["slow_consumer_stats"].items():
        out.add(f"gnatsd_varz_slow_consumer_stats_{kind}", count, f"Slow consumers among {kind}")
    for path, count in doc["http_req_stats"].items():
        name = "gnatsd_varz_http_req_stats_" + path.strip("/").replace("/", "_")
        out.add(name, count, f"Monitoring requests for {path}")
    redis = doc["redis"]  # {} without a Redis port: then no Redis series
    if redis:
        out.add("pubmesh_redis_port", redis["port"], "Redis (RESP) port")
        for key, help_text in _REDIS_GAUGES.items():
            out.add(f"pubmesh_redis_{key}", redis[key], help_text)
        for key, help_text in _REDIS_COUNTERS.items():
            out.add(f"pubmesh_redis_{key}", redis[key], help_text, kind="counter")
    streams = doc["streams"]
    for key, help_text in _STREAMS_GAUGES.items():
        out.add(f"pubmesh_streams_{key}", streams[key], help_text)
    for key, help_text in _STREAMS_COUNTERS.items():
        out.add(f"pubmesh_streams_{key}", streams[key], help_text, kind="counter")

    # One page holding every open connection, so the sums cover them all.
    page = await connz(broker, ConnzOptions(limit=max(len(broker.clients), 1)), pace)
    conns: list[dict[str, Any]] = page["connections"]
    conn_totals = {key: sum(c[key] for c in conns) for key in (*_CONNZ_GAUGES, *_CONNZ_COUNTERS)}
    out.add("gnatsd_connz_num_connections", page["num_connections"], "Client connections listed")
    out.add("gnatsd_connz_total", page["total"], "Client connections open now")
    for key, help_text in _CONNZ_GAUGES.items():
        out.add(f"gnatsd_connz_{key}", conn_totals[key], help_text)
    for key, help_text in _CONNZ_COUNTERS.items():
        out.add(f"gnatsd_connz_{key}", conn_totals[key], help_text, kind="counter")

    stats = await subsz(broker, SubszOptions(), pace)
    for key, help_text in _SUBSZ.items():
        out.add(f"gnatsd_subsz_{key}", stats[key], help_text)
    out.add("gnatsd_routez_num_routes", doc["routes"], "Route connections in use now (as /routez lists)")
    out.add("gnatsd_healthz_status", 0, "Health: 0 when the server is ok, 1 when it is not")
    out.add("gnatsd_healthz_status_value", 1, "Health as a label: 1 for the status named", value="ok")
    return "\n".join(out.lines) + "\n"
