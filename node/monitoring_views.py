"""The documents the monitoring endpoints serve, built from a broker's live state.

Field names, their order, and which fields are left out when empty follow nats-server's structs
(``Varz``, ``Connz``/``ConnInfo``, ``Subsz``/``SubDetail``, ``Routez``/``RouteInfo``, ``Gatewayz``),
because the tools that read them were written against nats-server. Everything is read synchronously
on the trio thread that runs the broker and its routes, so each document is a consistent snapshot.
"""

from __future__ import annotations

import collections
import enum
import os
import resource
import time
from collections.abc import Callable
from typing import Any

import attrs

from cluster.config import parse_url
from cluster.gateways import GatewayManager
from cluster.link import Link
from cluster.peer import Gateway, Peer
from cluster.routes import RouteManager
from node.accounts import DEFAULT_ACCOUNT
from node.assembly import Node
from node.broker import Broker
from node.client import ClientConnection
from node.gofmt import go_duration, go_time, uptime
from routing import RemoteEntry, SubListStats, Subscription, is_valid_literal_subject, subject_matches

__all__ = [
    "DEFAULT_LIST_SIZE",
    "BadRequest",
    "ConnState",
    "ConnzOptions",
    "CpuMeter",
    "GatewayzOptions",
    "MonitorState",
    "RoutezOptions",
    "SubszOptions",
    "connz",
    "gatewayz",
    "routez",
    "subsz",
    "varz",
]

DEFAULT_LIST_SIZE = 1024
"""nats-server's page size for /connz and /subsz when ``limit`` is absent or not positive."""
_SECOND = 10**9


class BadRequest(ValueError):
    """A query the endpoint cannot answer; the message is the 400 body, in nats-server's words."""


class CpuMeter:
    """Process CPU use in percent of one core, as /varz reports it.

    nats-server samples every second in the background; here a new sample is taken when one is asked
    for and the last is at least a second old, which gives the same figure without a timer task.
    """

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._cpu = time.process_time()
        self._percent = 0.0

    def read(self) -> float:
        wall, cpu = time.monotonic(), time.process_time()
        if wall - self._wall >= 1.0:
            self._percent = round(100 * (cpu - self._cpu) / (wall - self._wall), 1)
            self._wall, self._cpu = wall, cpu
        return self._percent


@attrs.define
class MonitorState:
    """What the monitoring server knows beyond the broker: its own address and request counts."""

    node: Node
    http_host: str
    http_port: int = 0
    requests: collections.Counter[str] = attrs.field(factory=collections.Counter)
    cpu: CpuMeter = attrs.field(factory=CpuMeter)

    @property
    def broker(self) -> Broker:
        return self.node.broker


def _resident_bytes() -> int:
    """Resident set size now; where /proc is missing, the peak the kernel reports instead."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _stats(broker: Broker, account: str = "") -> SubListStats:
    return SubListStats.combine(
        a.stats() for a in broker.accounts.values() if not account or a.name == account
    )


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


def varz(state: MonitorState) -> dict[str, Any]:
    broker = state.broker
    config = broker.config
    now = time.time_ns()
    in_msgs, in_bytes, out_msgs, out_bytes = broker.traffic()
    slow = _slow_consumer_stats(broker)
    cluster = state.node.routes
    routes, remotes = _route_counts(cluster)
    doc = broker.identity()
    if config.auth_required:
        doc["auth_required"] = True
    doc["max_connections"] = config.max_connections
    if config.max_subscriptions:
        doc["max_subscriptions"] = config.max_subscriptions
    doc |= {
        "ping_interval": round(config.ping_interval * _SECOND),
        "ping_max": config.ping_max,
        "http_host": state.http_host,
        "http_port": state.http_port,
        "http_base_path": "",
        "https_port": 0,
        "auth_timeout": config.auth_timeout,
        "max_control_line": config.max_control_line,
        "max_payload": config.max_payload,
        "max_pending": config.max_pending,
        "cluster": _cluster_options(cluster),
        "gateway": _gateway_options(state.node.gateways),
        "leaf": {},
        "mqtt": {},
        "websocket": {},
        "jetstream": {},
        "write_deadline": round(config.write_deadline * _SECOND),
        "start": go_time(broker.start_ns),
        "now": go_time(now),
        "uptime": uptime(now - broker.start_ns),
        "mem": _resident_bytes(),
        "cores": os.cpu_count() or 1,
        "gomaxprocs": 1,  # Python code runs on one thread at a time
        "cpu": state.cpu.read(),
        "connections": len(broker.clients),
        "total_connections": broker.total_connections,
        "routes": routes,
        "remotes": remotes,
        "leafnodes": 0,
        "in_msgs": in_msgs,
        "in_bytes": in_bytes,
        "out_msgs": out_msgs,
        "out_bytes": out_bytes,
        "slow_consumers": sum(slow.values()),
        "stale_connections": broker.stale_connections,
        "subscriptions": _stats(broker).num_subscriptions,
        "http_req_stats": dict(sorted(state.requests.items())),
        "config_load_time": go_time(broker.start_ns),
        "slow_consumer_stats": slow,
        "stale_connection_stats": {"clients": broker.stale_connections, **_NO_LINKS},
    }
    return doc


# -- /connz ----------------------------------------------------------------------------------------


class ConnState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"
    ALL = "all"


@attrs.frozen
class ConnzOptions:
    """The /connz query, decoded."""

    sort: str = "cid"
    auth: bool = False
    subs: bool = False
    subs_detail: bool = False
    offset: int = 0
    limit: int = DEFAULT_LIST_SIZE
    cid: int = 0
    state: ConnState = ConnState.OPEN
    user: str = ""
    account: str = ""


def _end(conn: ClientConnection, now: int) -> int:
    """When a connection's clock stops: now while open, at its close once closed."""
    return conn.stop_ns or now


_SortKey = Callable[[ClientConnection, int], Any]
# Each sort: the key, and whether the largest comes first (nats-server's directions).
_SORTS: dict[str, tuple[_SortKey, bool]] = {
    "cid": (lambda c, now: c.cid, False),
    "start": (lambda c, now: c.start_ns, False),
    "subs": (lambda c, now: len(c.subs), True),
    "pending": (lambda c, now: c.pending_bytes, True),
    "msgs_to": (lambda c, now: c.out_msgs, True),
    "msgs_from": (lambda c, now: c.in_msgs, True),
    "bytes_to": (lambda c, now: c.out_bytes, True),
    "bytes_from": (lambda c, now: c.in_bytes, True),
    "last": (lambda c, now: c.last_activity_ns, True),
    "idle": (lambda c, now: _end(c, now) - c.last_activity_ns, True),
    "uptime": (lambda c, now: _end(c, now) - c.start_ns, False),
    "stop": (lambda c, now: c.stop_ns, True),
    "reason": (lambda c, now: c.closing or "", False),
    "rtt": (lambda c, now: c.rtt_ns, True),
}


def _rtt(ns: int) -> str:
    """nats-server shows round trips under a millisecond to the microsecond, others to the nanosecond."""
    return go_duration(ns - ns % 1000 if 1000 < ns < 1_000_000 else ns)


def _sub_detail(sub: Subscription, cid: int, account: str | None) -> dict[str, Any]:
    detail: dict[str, Any] = {"account": account} if account else {}
    detail["subject"] = sub.subject
    if sub.queue:
        detail["qgroup"] = sub.queue
    detail |= {"sid": sub.sid.decode("utf-8", "replace"), "msgs": sub.delivered}
    if sub.max_msgs:
        detail["max"] = sub.max_msgs
    detail["cid"] = cid
    return detail


def _conn_info(conn: ClientConnection, now: int, opts: ConnzOptions) -> dict[str, Any]:
    end = _end(conn, now)
    info: dict[str, Any] = {
        "cid": conn.cid,
        "kind": "Client",
        "type": "nats",
        "ip": conn.host,
        "port": conn.port,
        "start": go_time(conn.start_ns),
        "last_activity": go_time(conn.last_activity_ns),
    }
    if conn.stop_ns:
        info["stop"] = go_time(conn.stop_ns)
    if conn.closing:
        info["reason"] = conn.closing
    info |= {
        "rtt": _rtt(conn.rtt_ns),
        "uptime": uptime(end - conn.start_ns),
        "idle": uptime(end - conn.last_activity_ns),
        "pending_bytes": conn.pending_bytes,
        "in_msgs": conn.in_msgs,
        "out_msgs": conn.out_msgs,
        "in_bytes": conn.in_bytes,
        "out_bytes": conn.out_bytes,
        "subscriptions": len(conn.subs),
    }
    for key in ("name", "lang", "version"):
        value = conn.options.get(key)
        if value:
            info[key] = str(value)
    if opts.auth:
        if conn.user is not None and conn.user.user:
            info["authorized_user"] = conn.user.user
        if conn.account.name != DEFAULT_ACCOUNT:
            info["account"] = conn.account.name
    if conn.subs and opts.subs_detail:
        info["subscriptions_list_detail"] = [_sub_detail(s, conn.cid, None) for s in conn.subs.values()]
    elif conn.subs and opts.subs:
        info["subscriptions_list"] = [s.subject for s in conn.subs.values()]
    return info


def _connections(broker: Broker, state: ConnState) -> list[ClientConnection]:
    """NATS client connections in the asked state, by connection id."""
    found: list[object] = []
    if state is not ConnState.CLOSED:
        found += broker.clients.values()
    if state is not ConnState.OPEN:
        found += broker.closed
    return sorted((c for c in found if isinstance(c, ClientConnection)), key=lambda c: c.cid)


def connz(broker: Broker, opts: ConnzOptions) -> dict[str, Any]:
    """/connz: connections in the asked state and filters, sorted, then paged.

    Raises:
        BadRequest: an unknown sort, or a sort that only closed connections have.
    """
    if opts.sort not in _SORTS:
        raise BadRequest(f"invalid sorting option: {opts.sort}")
    if opts.sort in ("stop", "reason") and opts.state is not ConnState.CLOSED:
        raise BadRequest(f"sort by {opts.sort} only valid on closed connections")
    now = time.time_ns()
    conns = [
        c
        for c in _connections(broker, opts.state)
        if (not opts.user or (c.user is not None and c.user.user == opts.user))
        and (not opts.account or c.account.name == opts.account)
    ]
    total = len(conns)
    limit = opts.limit
    if opts.cid:
        conns = [c for c in conns if c.cid == opts.cid]
        limit = 1
    key, descending = _SORTS[opts.sort]
    conns.sort(key=lambda c: key(c, now), reverse=descending)
    start = min(opts.offset, len(conns))
    page = conns[start : start + limit]
    return {
        "server_id": broker.server_id,
        "now": go_time(now),
        "num_connections": len(page),
        "total": total,
        "offset": opts.offset,
        "limit": limit,
        "connections": [_conn_info(c, now, opts) for c in page],
    }


# -- /subsz ----------------------------------------------------------------------------------------


@attrs.frozen
class SubszOptions:
    """The /subsz query, decoded."""

    subs: bool = False
    offset: int = 0
    limit: int = DEFAULT_LIST_SIZE
    test: str = ""
    account: str = ""


def _natural(sid: bytes) -> tuple[int, bytes]:
    """Order numeric sids by value (``2`` before ``10``), as clients number them."""
    return len(sid), sid


def subsz(broker: Broker, opts: SubszOptions) -> dict[str, Any]:
    """/subsz: match statistics summed over accounts and, when asked, the subscriptions, paged.

    Raises:
        BadRequest: ``test`` is not a subject one could publish to.
    """
    if opts.test and not is_valid_literal_subject(opts.test):
        raise BadRequest(f"invalid test subject, must be valid publish subject: {opts.test}")
    stats = _stats(broker, opts.account)
    doc: dict[str, Any] = {"server_id": broker.server_id, "now": go_time(time.time_ns())}
    doc |= attrs.asdict(stats)
    details: list[dict[str, Any]] = []
    if opts.subs:
        found = sorted(
            (
                (account.name, sub.owner.cid, _natural(sub.sid), sub)
                for account, sub in broker.subscriptions()
                if isinstance(sub.owner, ClientConnection)
                and (not opts.account or account.name == opts.account)
                and (not opts.test or subject_matches(sub.subject, opts.test))
            ),
            key=lambda entry: entry[:3],
        )
        details = [_sub_detail(sub, cid, name) for name, cid, _, sub in found]
    start = min(opts.offset, len(details))
    page = details[start : start + opts.limit]
    doc |= {"total": len(details), "offset": opts.offset, "limit": opts.limit}
    if page:
        doc["subscriptions_list"] = page
    return doc


# -- /routez, and the cluster in /varz -------------------------------------------------------------


@attrs.frozen
class RoutezOptions:
    """The /routez query, decoded."""

    subs: bool = False
    subs_detail: bool = False


def _links_in_use(routes: RouteManager | None) -> list[Link]:
    """The route connections that carry traffic, by rid: every pooled connection to every peer, as
    nats-server lists and counts them. A duplicate refused at the handshake, or a connection being
    replaced, carries nothing and is left out."""
    if routes is None:
        return []
    return [link for link in routes.links if link.registered]


def _route_counts(routes: RouteManager | None) -> tuple[int, int]:
    """/varz's ``routes`` (connections, pooled ones each counted) and ``remotes`` (peers reached)."""
    if routes is None:
        return 0, 0
    return len(_links_in_use(routes)), sum(1 for peer in routes.peers.values() if peer.slots)


def _host_port(url: str) -> str:
    """A route URL as nats-server shows configured routes (host:port); one that does not parse,
    as given."""
    try:
        host, port = parse_url(url)
    except ValueError:
        return url
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _cluster_options(routes: RouteManager | None) -> dict[str, Any]:
    """/varz's ``cluster`` (nats-server's ``ClusterOptsVarz``): every field is left out when empty,
    so a standalone node shows ``{}``."""
    if routes is None:
        return {}
    config = routes.config
    doc = {
        "name": config.name,
        "addr": config.host,
        "cluster_port": config.port,
        "urls": [_host_port(url) for url in config.seeds],
        "pool_size": config.pool_size,
    }
    return {key: value for key, value in doc.items() if value}


def _gateway_options(manager: GatewayManager | None) -> dict[str, Any]:
    """/varz's ``gateway`` (nats-server's ``GatewayOptsVarz``): empty fields left out, so a node
    without gateways shows ``{}``; ``gateways`` lists the configured remote clusters."""
    if manager is None:
        return {}
    config = manager.config
    doc = {
        "name": config.name,
        "host": config.host,
        "port": config.port,
        "advertise": config.advertise or "",
        "gateways": [
            {"name": name, "urls": [_host_port(url) for url in urls]} for name, urls in config.gateways
        ],
    }
    return {key: value for key, value in doc.items() if value}


def _interest_by_account(broker: Broker, peer: Peer) -> dict[str, list[RemoteEntry[Any]]]:
    found: dict[str, list[RemoteEntry[Any]]] = {}
    for entry in broker.route_interest.entries(peer):
        found.setdefault(entry.account, []).append(entry)
    return found


def _remote_sub_detail(entry: RemoteEntry[Any]) -> dict[str, Any]:
    detail = {"account": entry.account, "subject": entry.subject}
    if entry.queue:
        detail["qgroup"] = entry.queue
    return detail


def _route_info(
    link: Link, entries: list[RemoteEntry[Any]], configured: bool, now: int, opts: RoutezOptions
) -> dict[str, Any]:
    peer: Peer = link.peer
    end = link.stop_ns or now
    host, port = link.address
    info: dict[str, Any] = {
        "rid": link.rid,
        "remote_id": peer.server_id,
        "remote_name": peer.name,
        "did_solicit": link.solicited,
        "is_configured": configured,
        "ip": host,
        "port": port,
        "start": go_time(link.start_ns),
        "last_activity": go_time(link.last_activity_ns),
        "rtt": _rtt(round(link.rtt * _SECOND)),
        "uptime": uptime(end - link.start_ns),
        "idle": uptime(end - link.last_activity_ns),
        "pending_size": link.pending_bytes,
        "in_msgs": link.in_msgs,
        "out_msgs": link.out_msgs,
        "in_bytes": link.in_bytes,
        "out_bytes": link.out_bytes,
        "subscriptions": len(entries),
    }
    if entries and opts.subs_detail:
        info["subscriptions_list_detail"] = [_remote_sub_detail(e) for e in entries]
    elif entries and opts.subs:
        info["subscriptions_list"] = [e.subject for e in entries]
    if isinstance(link.slot, str):
        info["account"] = link.slot  # a pinned account's own connection
    return info


def routez(node: Node, opts: RoutezOptions) -> dict[str, Any]:
    """/routez: every route connection in use, with its traffic and the interest it brought.

    Remote interest is recorded per peer and account, and each account travels on one connection
    of its peer, so a connection's subscriptions are its peer's entries for the accounts it carried.
    """
    broker, routes = node.broker, node.routes
    now = time.time_ns()
    links = _links_in_use(routes)
    seeds = {_host_port(url) for url in routes.config.seeds} if routes is not None else set()
    interest: dict[Peer, dict[str, list[RemoteEntry[Any]]]] = {}
    infos = []
    for link in links:
        peer: Peer = link.peer
        if peer not in interest:
            interest[peer] = _interest_by_account(broker, peer)
        by_account = interest[peer]
        entries = sorted(
            (entry for account in link.accounts for entry in by_account.get(account, ())),
            key=lambda e: (e.account, e.subject, e.queue or ""),
        )
        infos.append(_route_info(link, entries, _host_port(peer.url) in seeds, now, opts))
    return {
        "server_id": broker.server_id,
        "server_name": broker.server_name,
        "now": go_time(now),
        "num_routes": len(links),
        "routes": infos,
    }


# -- /gatewayz ------------------------------------------------------------------------------------

INTEREST_ONLY_THRESHOLD = 1000
"""nats-server reports the number of no-interest replies after which an account would switch to
interest-only; pubmesh's gateways are interest-only from the first message, and report the same."""


@attrs.frozen
class GatewayzOptions:
    """The /gatewayz query, decoded: ``gw_name``, ``accs``, ``acc_name`` (implies ``accs``), ``subs``."""

    name: str = ""
    accounts: bool = False
    account: str = ""
    subs: bool = False
    subs_detail: bool = False


def _gateway_conn(link: Link, now: int) -> dict[str, Any]:
    """A gateway link as nats-server's ``ConnInfo`` shows one (kind ``Gateway``, named by the
    remote server's id)."""
    end = link.stop_ns or now
    host, port = link.address
    info: dict[str, Any] = {
        "cid": link.rid,
        "kind": "Gateway",
        "ip": host,
        "port": port,
        "start": go_time(link.start_ns),
        "last_activity": go_time(link.last_activity_ns),
        "rtt": _rtt(round(link.rtt * _SECOND)),
        "uptime": uptime(end - link.start_ns),
        "idle": uptime(end - link.last_activity_ns),
        "pending_bytes": link.pending_bytes,
        "in_msgs": link.in_msgs,
        "out_msgs": link.out_msgs,
        "in_bytes": link.in_bytes,
        "out_bytes": link.out_bytes,
        "subscriptions": 0,
    }
    if link.remote is not None and link.remote.id:
        info["name"] = link.remote.id
    return info


def _account_interest(
    name: str, entries: list[RemoteEntry[Any]], opts: GatewayzOptions
) -> dict[str, Any]:
    """An account's interest on one link (nats-server's ``AccountGatewayz``)."""
    doc: dict[str, Any] = {
        "name": name,
        "interest_mode": "Interest-Only",
        "interest_only_threshold": INTEREST_ONLY_THRESHOLD,
    }
    if entries:
        doc["num_subs"] = len(entries)
    queues = sum(1 for e in entries if e.queue)
    if queues:
        doc["num_queue_subs"] = queues
    if entries and opts.subs_detail:
        doc["subscriptions_list_detail"] = [_remote_sub_detail(e) for e in entries]
    elif entries and opts.subs:
        doc["subscriptions_list"] = [e.subject for e in entries]
    return doc


def _outbound_accounts(broker: Broker, gateway: Gateway, opts: GatewayzOptions) -> list[dict[str, Any]]:
    """The interest the remote cluster announced, per account: what decides whether a message
    crosses this link."""
    by_account: dict[str, list[RemoteEntry[Any]]] = {}
    for entry in broker.gateway_interest.entries(gateway):
        by_account.setdefault(entry.account, []).append(entry)
    names = [opts.account] if opts.account else sorted(by_account)
    return [
        _account_interest(name, sorted(by_account[name], key=lambda e: (e.subject, e.queue or "")), opts)
        for name in names
        if name in by_account
    ]


def _inbound_accounts(manager: GatewayManager, opts: GatewayzOptions) -> list[dict[str, Any]]:
    """The accounts this cluster announces interest in, each in interest-only mode (inbound links
    carry no per-link counts in nats-server either)."""
    names = sorted({change.account for change in manager.interest.snapshot()})
    if opts.account:
        names = [opts.account] if opts.account in names else []
    return [_account_interest(name, [], opts) for name in names]


def gatewayz(node: Node, opts: GatewayzOptions) -> dict[str, Any]:
    """/gatewayz: this node's outbound link to each other cluster and the inbound links from them,
    with their traffic and, when asked (``accs``), the interest per account."""
    now = time.time_ns()
    broker, manager = node.broker, node.gateways
    doc: dict[str, Any] = {"server_id": broker.server_id, "now": go_time(now)}
    if manager is None:
        return doc | {"outbound_gateways": {}, "inbound_gateways": {}}
    config = manager.config
    doc |= {"name": manager.name, "host": config.host, "port": config.port}
    accounts = opts.accounts or bool(opts.account)
    outbound: dict[str, Any] = {}
    inbound: dict[str, list[dict[str, Any]]] = {}
    for name, gateway in sorted(manager.remotes.items()):
        if opts.name and name != opts.name:
            continue
        link = gateway.outbound
        if link is not None and link.registered:
            remote: dict[str, Any] = {
                "configured": gateway.configured,
                "connection": _gateway_conn(link, now),
            }
            found = _outbound_accounts(broker, gateway, opts) if accounts else []
            if found:  # (left out when empty, as there)
                remote["accounts"] = found
            outbound[name] = remote
        links = sorted(
            (each for each in gateway.inbound.values() if each.registered), key=lambda each: each.rid
        )
        announced = _inbound_accounts(manager, opts) if accounts else []
        if links:
            inbound[name] = [
                {"configured": False, "connection": _gateway_conn(each, now)}
                | ({"accounts": announced} if announced else {})
                for each in links
            ]
    return doc | {"outbound_gateways": outbound, "inbound_gateways": inbound}
