"""The node's summaries: /varz (nats-server's ``Varz``, with pubmesh's Redis and streams blocks) and
STATSZ (nats-server's ``ServerStats``, which the system account sends).

Field names, their order, and which fields are left out when empty follow nats-server's structs,
because the tools that read them were written against nats-server.
"""

from __future__ import annotations

import os
import time
from typing import Any

from cluster.gateways import GatewayManager
from cluster.link import Link
from cluster.peer import peer_of
from node.accounts.account import Account
from node.broker import Broker, Client
from node.monitoring.accountz import connections_by_account, msg_bytes
from node.monitoring.gofmt import SECOND, go_time, uptime
from node.monitoring.links import cluster_options, gateway_options, links_in_use, route_counts
from node.monitoring.pacing import Pacer, paced_map
from node.monitoring.state import MonitorState
from node.monitoring.streamz import streams_block
from node.monitoring.subsz import num_patterns, sublist_stats
from node.process_memory import resident_bytes
from node.resp.connection import RespConnection
from transport.tls import DEFAULT_TIMEOUT as DEFAULT_TLS_TIMEOUT

__all__ = ["statsz", "varz"]


# Stale connections are counted among clients only (a link gone silent is redialed, not counted),
# and there are no leaf nodes: those report zero, in the shape nats-server uses.
_NO_LINKS = {"routes": 0, "gateways": 0, "leafs": 0}


def _slow_consumer_stats(broker: Broker) -> dict[str, int]:
    """Connections cut as slow consumers, by kind (their sum is /varz ``slow_consumers``)."""
    links = broker.slow_links
    return {
        "clients": broker.slow_consumers,
        "routes": links["Route"],
        "gateways": links["Gateway"],
        "leafs": 0,
    }


async def varz(state: MonitorState, pace: Pacer) -> dict[str, Any]:
    """/varz: nats-server's fields, ``redis`` for the Redis (RESP) front door (see
    ``_redis_block``) and ``streams`` for the keys it holds (see ``streams_block``), and
    ``unauthenticated_connections``: the client connections of either protocol that must still
    sign in (NATS: no CONNECT accepted yet; Redis: no AUTH), which nats-server does not report."""
    broker = state.broker
    config = broker.config
    redis = await _redis_block(broker, pace)  # (first: its traffic is part of the totals read next)
    streams = await streams_block(state.node, pace)
    signed_in = await paced_map(_authenticated, broker.clients.values(), pace)
    now = time.time_ns()
    in_msgs, in_bytes, out_msgs, out_bytes = broker.traffic()
    slow = _slow_consumer_stats(broker)
    cluster = state.node.routes
    routes, remotes = route_counts(cluster)
    doc = broker.identity()
    if config.auth_required:
        doc["auth_required"] = True
    tls = config.tls
    if tls is not None:
        doc["tls_required"] = True
        if tls.verify or tls.verify_and_map:
            doc["tls_verify"] = True
    if broker.connect_urls:
        doc["connect_urls"] = list(broker.connect_urls)
    doc["max_connections"] = config.max_connections
    if config.max_subscriptions:
        doc["max_subscriptions"] = config.max_subscriptions
    doc |= {
        "ping_interval": round(config.ping_interval * SECOND),
        "ping_max": config.ping_max,
        "http_host": state.http_host,
        "http_port": state.http_port if config.https_port is None else 0,
        "http_base_path": "",
        "https_port": state.http_port if config.https_port is not None else 0,
        "auth_timeout": config.auth_timeout,
        "tls_timeout": tls.timeout if tls is not None else DEFAULT_TLS_TIMEOUT,
        "max_control_line": config.max_control_line,
        "max_payload": config.max_payload,
        "max_pending": config.max_pending,
        "cluster": cluster_options(cluster),
        "gateway": gateway_options(state.node.gateways),
        "leaf": {},
        "mqtt": {},
        "websocket": {},
        "redis": redis,
        "streams": streams,
        "jetstream": {},
        "write_deadline": round(config.write_deadline * SECOND),
        "start": go_time(broker.start_ns),
        "now": go_time(now),
        "uptime": uptime(now - broker.start_ns),
        "mem": resident_bytes(),
        "cores": os.cpu_count() or 1,
        "gomaxprocs": 1,  # Python code runs on one thread at a time
        "cpu": state.cpu.read(),
        "connections": len(broker.clients),
        "total_connections": broker.total_connections,
        "unauthenticated_connections": signed_in.count(False),
        "routes": routes,
        "remotes": remotes,
        "leafnodes": 0,
        "in_msgs": in_msgs,
        "in_bytes": in_bytes,
        "out_msgs": out_msgs,
        "out_bytes": out_bytes,
        "slow_consumers": sum(slow.values()),
        "stale_connections": broker.stale_connections,
        "subscriptions": sublist_stats(broker).num_subscriptions,
        "http_req_stats": dict(sorted(state.requests.items())),
        "config_load_time": go_time(broker.start_ns),
    }
    if broker.system_account is not None:
        doc["system_account"] = broker.system_account.name
    doc |= {
        "slow_consumer_stats": slow,
        "stale_connection_stats": {"clients": broker.stale_connections, **_NO_LINKS},
    }
    return doc


def _authenticated(client: Client) -> bool:
    return client.authenticated


async def _redis_block(broker: Broker, pace: Pacer) -> dict[str, Any]:
    """/varz's ``redis``: the RESP listener and its clients; ``{}`` without one, as the blocks of
    other listeners that are not configured.

    ``host``, ``port``, ``hard_limit``, ``soft_limit`` and ``soft_seconds`` are the listener's
    settings (output-buffer limits in bytes and seconds). ``connections`` are the Redis connections
    open now and ``total_connections`` those accepted since start. ``subscriptions`` counts channel
    subscriptions (SUBSCRIBE and SSUBSCRIBE, one per client and channel) and ``channels`` the
    distinct channels they name; ``pattern_subscriptions`` counts PSUBSCRIBE patterns per client and
    ``patterns`` the distinct ones (PUBSUB NUMPAT); distinct means per account, summed over
    accounts. ``in_msgs``, ``in_bytes``, ``out_msgs``, ``out_bytes``: PUBLISHes taken and
    deliveries sent by Redis connections since start, payload bytes only (they are part of the
    node's totals above). ``maxmemory`` is the limit in force (0: none; CONFIG SET changes it) and
    ``used_memory`` what it limits, as INFO memory reports it: a fixed overhead, what the keys hold
    and the clients' output buffers.
    """
    config = broker.config.redis
    if config is None:
        return {}
    connections = subscriptions = pattern_subscriptions = 0
    channels: dict[str, set[bytes]] = {}
    for conn in list(broker.clients.values()):
        if isinstance(conn, RespConnection):
            connections += 1
            subscriptions += len(conn.subs) + len(conn.shard)
            pattern_subscriptions += len(conn.patterns)
            named = channels.setdefault(conn.account.name, set())
            named.update(conn.subs)
            named.update(conn.shard)
            await pace.tick()
    in_msgs, in_bytes, out_msgs, out_bytes = broker.traffic(RespConnection)
    return {
        "host": config.host or broker.config.host,
        "port": config.port,
        "hard_limit": config.hard_limit,
        "soft_limit": config.soft_limit,
        "soft_seconds": config.soft_seconds,
        "connections": connections,
        "total_connections": broker.accepted[RespConnection],
        "subscriptions": subscriptions,
        "channels": sum(len(named) for named in channels.values()),
        "pattern_subscriptions": pattern_subscriptions,
        "patterns": num_patterns(broker),
        "in_msgs": in_msgs,
        "in_bytes": in_bytes,
        "out_msgs": out_msgs,
        "out_bytes": out_bytes,
        "maxmemory": broker.keyspaces.maxmemory,
        "used_memory": (
            broker.keyspaces.overhead + broker.keyspaces.dataset_bytes + broker.pending_output()
        ),
    }


# -- STATSZ, the system account's summary of a node -------------------------------------------------


def _route_stat(link: Link[Account]) -> dict[str, Any]:
    """nats-server's ``RouteStat``."""
    peer = peer_of(link)
    stat: dict[str, Any] = {"rid": link.rid}
    if peer.name:
        stat["name"] = peer.name
    return stat | {
        "sent": msg_bytes(link.out_msgs, link.out_bytes),
        "received": msg_bytes(link.in_msgs, link.in_bytes),
        "pending": link.pending_bytes,
    }


def _gateway_stats(manager: GatewayManager[Account] | None) -> list[dict[str, Any]]:
    """nats-server's ``GatewayStat``: per remote cluster, the outbound link's traffic out and the
    inbound links' traffic in."""
    if manager is None:
        return []
    stats = []
    for name, gateway in sorted(manager.remotes.items()):
        link = gateway.outbound
        if link is None or not link.registered:
            continue
        inbound = [each for each in gateway.inbound.values() if each.registered]
        stats.append(
            {
                "gwid": link.rid,
                "name": name,
                "sent": msg_bytes(link.out_msgs, link.out_bytes),
                "received": msg_bytes(
                    sum(each.in_msgs for each in inbound), sum(each.in_bytes for each in inbound)
                ),
                "inbound_connections": len(inbound),
            }
        )
    return stats


async def statsz(state: MonitorState, pace: Pacer) -> dict[str, Any]:
    """nats-server's ``ServerStats`` (the ``statsz`` of a STATSZ answer). ``sent`` and ``received``
    count client traffic, as /varz's ``out_msgs`` and ``in_msgs`` do; each route and gateway reports
    its own in ``routes`` and ``gateways``. Fields nats-server leaves out when empty are left out."""
    broker = state.broker
    in_msgs, in_bytes, out_msgs, out_bytes = broker.traffic()
    slow = _slow_consumer_stats(broker)
    doc: dict[str, Any] = {
        "start": go_time(broker.start_ns),
        "mem": resident_bytes(),
        "cores": os.cpu_count() or 1,
        "cpu": state.cpu.read(),
        "connections": len(broker.clients),
        "total_connections": broker.total_connections,
        "active_accounts": len(connections_by_account(broker)),
        "subscriptions": sublist_stats(broker).num_subscriptions,
        "sent": msg_bytes(out_msgs, out_bytes),
        "sent_to_clients": msg_bytes(out_msgs, out_bytes),
        "received": msg_bytes(in_msgs, in_bytes),
        "received_from_clients": msg_bytes(in_msgs, in_bytes),
        "slow_consumers": sum(slow.values()),
    }
    if any(slow.values()):
        doc["slow_consumer_stats"] = slow
    if broker.stale_connections:
        doc["stale_connections"] = broker.stale_connections
        doc["stale_connection_stats"] = {"clients": broker.stale_connections, **_NO_LINKS}
    routes = await paced_map(_route_stat, links_in_use(state.node.routes), pace)
    if routes:
        doc["routes"] = routes
    gateways = _gateway_stats(state.node.gateways)
    if gateways:
        doc["gateways"] = gateways
    doc["gomaxprocs"] = 1
    return doc
