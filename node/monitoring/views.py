"""The documents the monitoring endpoints serve, built from a broker's live state.

Field names, their order, and which fields are left out when empty follow nats-server's structs
(``Varz``, ``Connz``/``ConnInfo``, ``Subsz``/``SubDetail``, ``Routez``/``RouteInfo``, ``Gatewayz``),
because the tools that read them were written against nats-server.

The views run on the trio loop that runs the broker and its routes, and a listing may hold a hundred
thousand subscriptions: built in one go, it would stop every connection of the node for a second. So
the views that list things are coroutines that give the loop back whenever they have worked for a
``Pacer`` slice. They read the broker only on the loop, from copies of its collections taken in one
step (so a change between steps never breaks an iteration), and each connection or subscription is
read as it is at the moment it is listed, much as nats-server locks one connection at a time.
"""

from __future__ import annotations

import collections
import enum
import heapq
import itertools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio
import trio.lowlevel

from cluster.config import parse_url
from cluster.gateways import GatewayManager
from cluster.link import Link
from cluster.peer import Gateway, Peer, peer_of
from cluster.routes import RouteManager
from node.accounts.account import DEFAULT_ACCOUNT, Account
from node.broker import Broker, Client
from node.data.capture import CAPTURE_DB
from node.data.keyspace import DATABASES, Database
from node.data.streams import Stream, format_id, group_infos
from node.monitoring.gofmt import go_duration, go_time, uptime
from node.nats.client import ClientConnection
from node.resp.connection import RespConnection
from node.run.process import resident_bytes
from routing import (
    RemoteEntry,
    SubListStats,
    Subscription,
    glob_match,
    is_valid_literal_subject,
    pattern_subject,
    subject_channel,
    subject_matches,
)
from transport.tls import DEFAULT_TIMEOUT as DEFAULT_TLS_TIMEOUT

if TYPE_CHECKING:  # (the node's assembly imports its system account, which uses these views)
    from node.run.assembly import Node

__all__ = [
    "DEFAULT_LIST_SIZE",
    "AccountStatzOptions",
    "AccountzOptions",
    "BadRequest",
    "ConnState",
    "ConnzOptions",
    "CpuMeter",
    "GatewayzOptions",
    "MonitorState",
    "Pacer",
    "RoutezOptions",
    "StreamzOptions",
    "SubszOptions",
    "accountz",
    "accstatz",
    "connz",
    "gatewayz",
    "link_problems",
    "routez",
    "statsz",
    "streamz",
    "subsz",
    "varz",
]

DEFAULT_LIST_SIZE = 1024
"""nats-server's page size for /connz and /subsz when ``limit`` is absent or not positive."""
_SECOND = 10**9
_RUN = 1024
"""Items sorted in one step; longer lists are sorted in runs of this size and merged."""

T = TypeVar("T")
R = TypeVar("R")


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


class Pacer:
    """Gives the loop back to other tasks each time the monitoring work of one task step has run for
    ``step`` seconds, so a document of any size delays the node's connections by about that much at
    a time rather than by the time the whole document takes."""

    def __init__(self, step: float = 0.002) -> None:
        self.step = step
        self._until = time.perf_counter() + step

    async def tick(self) -> None:
        """Called after each small unit of work (one item listed, sorted or written)."""
        if time.perf_counter() >= self._until:
            await trio.lowlevel.checkpoint()
            self._until = time.perf_counter() + self.step


async def _paced_map(func: Callable[[T], R], items: Iterable[T], pace: Pacer) -> list[R]:
    """``[func(item) for item in items]``, over a copy of ``items`` taken in one step."""
    out: list[R] = []
    for item in list(items):
        out.append(func(item))
        await pace.tick()
    return out


async def _paced_sorted(
    items: Sequence[T], key: Callable[[T], Any], pace: Pacer, count: int | None = None
) -> list[T]:
    """``sorted(items, key=key)[:count]``, sorted in runs and merged lazily, so that sorting any
    number of items never holds the loop for long. Each key is read once; ties keep their order."""
    keyed: list[tuple[Any, int]] = []
    for seq, item in enumerate(items):
        keyed.append((key(item), seq))
        await pace.tick()
    runs: list[list[tuple[Any, int]]] = []
    for start in range(0, len(keyed), _RUN):
        runs.append(sorted(keyed[start : start + _RUN]))
        await pace.tick()
    out: list[T] = []
    for _, seq in itertools.islice(heapq.merge(*runs), count):
        out.append(items[seq])
        await pace.tick()
    return out


@attrs.define
class MonitorState:
    """What the monitoring server knows beyond the broker: its own address and request counts."""

    node: Node
    http_host: str
    http_port: int = 0
    requests: collections.Counter[str] = attrs.field(factory=collections.Counter)
    cpu: CpuMeter = attrs.field(factory=CpuMeter)
    listing: trio.Lock = attrs.field(factory=trio.Lock)
    """Held while a document that lists connections or subscriptions is built: one at a time, so
    concurrent requests for large ones cannot multiply the memory they take."""

    @property
    def broker(self) -> Broker:
        return self.node.broker


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


async def varz(state: MonitorState, pace: Pacer) -> dict[str, Any]:
    """/varz: nats-server's fields, ``redis`` for the Redis (RESP) front door (see
    ``_redis_block``) and ``streams`` for the keys it holds (see ``_streams_block``), and
    ``unauthenticated_connections``: the client connections of either protocol that must still
    sign in (NATS: no CONNECT accepted yet; Redis: no AUTH), which nats-server does not report."""
    broker = state.broker
    config = broker.config
    redis = await _redis_block(broker, pace)  # (first: its traffic is part of the totals read next)
    streams = await _streams_block(state.node, pace)
    signed_in = await _paced_map(_authenticated, broker.clients.values(), pace)
    now = time.time_ns()
    in_msgs, in_bytes, out_msgs, out_bytes = broker.traffic()
    slow = _slow_consumer_stats(broker)
    cluster = state.node.routes
    routes, remotes = _route_counts(cluster)
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
        "ping_interval": round(config.ping_interval * _SECOND),
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
        "cluster": _cluster_options(cluster),
        "gateway": _gateway_options(state.node.gateways),
        "leaf": {},
        "mqtt": {},
        "websocket": {},
        "redis": redis,
        "streams": streams,
        "jetstream": {},
        "write_deadline": round(config.write_deadline * _SECOND),
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
        "subscriptions": _stats(broker).num_subscriptions,
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
    ``used_memory`` what it limits, as INFO memory reports it: what the keys hold plus the clients'
    output buffers.
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
        "patterns": _num_patterns(broker),
        "in_msgs": in_msgs,
        "in_bytes": in_bytes,
        "out_msgs": out_msgs,
        "out_bytes": out_bytes,
        "maxmemory": broker.keyspaces.maxmemory,
        "used_memory": broker.keyspaces.dataset_bytes + broker.pending_output(),
    }


def _num_patterns(broker: Broker, account: str = "") -> int:
    """Distinct Redis patterns per account (PUBSUB NUMPAT), summed over the accounts asked for."""
    return sum(
        len(a.patterns)
        for a in broker.accounts.values()
        if a.patterns is not None and (not account or a.name == account)
    )


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


Connection = ClientConnection | RespConnection
"""What /connz lists: NATS and Redis client connections."""


def _num_subs(conn: Connection) -> int:
    """A connection's subscriptions; a Redis client's shard channels (SSUBSCRIBE) are ones too."""
    if isinstance(conn, RespConnection):
        return len(conn.subs) + len(conn.shard)
    return len(conn.subs)


def _subs_of(conn: Connection) -> list[Subscription]:
    """A connection's subscriptions (as ``_num_subs`` counts them), copied in one step."""
    if isinstance(conn, RespConnection) and conn.shard:
        return [*conn.subs.values(), *conn.shard.values()]
    return list(conn.subs.values())


def _end(conn: Connection, now: int) -> int:
    """When a connection's clock stops: now while open, at its close once closed."""
    return conn.stop_ns or now


_SortKey = Callable[[Connection, int], Any]
# Each sort: the key, and whether the largest comes first (nats-server's directions). Ties go by cid.
_SORTS: dict[str, tuple[_SortKey, bool]] = {
    "cid": (lambda c, now: c.cid, False),
    "start": (lambda c, now: c.start_ns, False),
    "subs": (lambda c, now: _num_subs(c), True),
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
    """nats-server's ``SubDetail``; a Redis client's subscription also names its ``channel``
    (whose subject is ``$R.`` and the channel in hex when it is not a subject itself)."""
    detail: dict[str, Any] = {"account": account} if account else {}
    detail["subject"] = sub.subject
    if isinstance(sub.owner, RespConnection):
        detail["channel"] = sub.sid.decode("utf-8", "replace")
    if sub.queue:
        detail["qgroup"] = sub.queue
    detail |= {"sid": sub.sid.decode("utf-8", "replace"), "msgs": sub.delivered}
    if sub.max_msgs:
        detail["max"] = sub.max_msgs
    detail["cid"] = cid
    return detail


def _subject(sub: Subscription) -> str:
    return sub.subject


async def _conn_info(conn: Connection, now: int, opts: ConnzOptions, pace: Pacer) -> dict[str, Any]:
    end = _end(conn, now)
    info: dict[str, Any] = {
        "cid": conn.cid,
        "kind": "Client",
        "type": "resp" if isinstance(conn, RespConnection) else "nats",
        "ip": conn.host,
        "port": conn.port,
        "start": go_time(conn.start_ns),
        "last_activity": go_time(conn.last_activity_ns),
    }
    if isinstance(conn, RespConnection):
        info["resp_version"] = conn.writer.version  # (2 or 3, as HELLO chose)
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
        "subscriptions": _num_subs(conn),
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
    subs = _subs_of(conn) if opts.subs or opts.subs_detail else []
    if subs and opts.subs_detail:
        cid = conn.cid
        details = await _paced_map(lambda s: _sub_detail(s, cid, None), subs, pace)
        info["subscriptions_list_detail"] = details
    elif subs:
        info["subscriptions_list"] = await _paced_map(_subject, subs, pace)
    return info


def _connections(broker: Broker, state: ConnState) -> list[object]:
    """Connections in the asked state (of any kind), copied in one step."""
    found: list[object] = []
    if state is not ConnState.CLOSED:
        found += broker.clients.values()
    if state is not ConnState.OPEN:
        found += broker.closed
    return found


async def connz(broker: Broker, opts: ConnzOptions, pace: Pacer) -> dict[str, Any]:
    """/connz: NATS client connections in the asked state and filters, sorted, then paged.

    Raises:
        BadRequest: an unknown sort, or a sort that only closed connections have.
    """
    if opts.sort not in _SORTS:
        raise BadRequest(f"invalid sorting option: {opts.sort}")
    if opts.sort in ("stop", "reason") and opts.state is not ConnState.CLOSED:
        raise BadRequest(f"sort by {opts.sort} only valid on closed connections")
    now = time.time_ns()
    conns: list[Connection] = []
    for c in _connections(broker, opts.state):
        if (
            isinstance(c, (ClientConnection, RespConnection))
            and (not opts.user or (c.user is not None and c.user.user == opts.user))
            and (not opts.account or c.account.name == opts.account)
        ):
            conns.append(c)
        await pace.tick()
    total = len(conns)
    limit = opts.limit
    if opts.cid:
        conns = [c for c in conns if c.cid == opts.cid]
        limit = 1
    key, descending = _SORTS[opts.sort]
    ordered = await _paced_sorted(
        conns, lambda c: (-key(c, now) if descending else key(c, now), c.cid), pace, opts.offset + limit
    )
    page = ordered[opts.offset :]
    return {
        "server_id": broker.server_id,
        "now": go_time(now),
        "num_connections": len(page),
        "total": total,
        "offset": opts.offset,
        "limit": limit,
        "connections": [await _conn_info(c, now, opts, pace) for c in page],
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


async def _client_subscriptions(broker: Broker, opts: SubszOptions, pace: Pacer) -> list[Subscription]:
    """The subscriptions of client connections, and the node's own, that the query asks for
    (local ones only, as nats-server lists them), from each connection's own table.

    Only the subscriptions themselves are collected, never a record per subscription that refers to
    one: records that hold references would be tracked by the garbage collector, and a hundred
    thousand of them are enough to set off a full collection, a stall of its own."""
    found: list[Subscription] = []
    for conn in list(broker.clients.values()):
        if not isinstance(conn, (ClientConnection, RespConnection)):
            continue
        if opts.account and conn.account.name != opts.account:
            continue
        for sub in _subs_of(conn):
            if not opts.test or subject_matches(sub.subject, opts.test):
                found.append(sub)
            await pace.tick()
    for sub in broker.internal_subscriptions:
        if (not opts.account or sub.owner.account.name == opts.account) and (
            not opts.test or subject_matches(sub.subject, opts.test)
        ):
            found.append(sub)
    return found


def _natural(sub: Subscription) -> tuple[str, int, int, bytes]:
    """By account, connection, then sid, numeric sids by value (``2`` before ``10``) as clients
    number them."""
    owner: Connection = sub.owner
    return owner.account.name, owner.cid, len(sub.sid), sub.sid


def _listed_detail(sub: Subscription) -> dict[str, Any]:
    owner: Connection = sub.owner
    return _sub_detail(sub, owner.cid, owner.account.name)


async def subsz(broker: Broker, opts: SubszOptions, pace: Pacer) -> dict[str, Any]:
    """/subsz: match statistics summed over accounts and, when asked, the subscriptions, paged.

    Redis channel subscriptions are subscriptions like any other (counted, and listed with their
    ``channel``); ``num_patterns`` adds the distinct Redis patterns (PUBSUB NUMPAT) per account.
    Listings also hold Redis pattern subscriptions apart: ``patterns_total`` of them, paged by the
    same ``offset`` and ``limit`` into ``patterns_list`` (``account``, ``pattern``, the ``subject``
    routes and gateways announce it as, ``cid``); with
    ``test``, those whose pattern matches the channel of that subject.

    Raises:
        BadRequest: ``test`` is not a subject one could publish to.
    """
    if opts.test and not is_valid_literal_subject(opts.test):
        raise BadRequest(f"invalid test subject, must be valid publish subject: {opts.test}")
    stats = _stats(broker, opts.account)
    doc: dict[str, Any] = {"server_id": broker.server_id, "now": go_time(time.time_ns())}
    doc |= attrs.asdict(stats)
    doc["num_patterns"] = _num_patterns(broker, opts.account)
    found = await _client_subscriptions(broker, opts, pace) if opts.subs else []
    ordered = await _paced_sorted(found, _natural, pace, opts.offset + opts.limit)
    page = await _paced_map(_listed_detail, ordered[opts.offset :], pace)
    doc |= {"total": len(found), "offset": opts.offset, "limit": opts.limit}
    if page:
        doc["subscriptions_list"] = page
    if opts.subs:
        patterns = await _pattern_subscriptions(broker, opts, pace)
        ordered_patterns = await _paced_sorted(patterns, _itself, pace, opts.offset + opts.limit)
        doc["patterns_total"] = len(patterns)
        if listed := ordered_patterns[opts.offset :]:
            doc["patterns_list"] = await _paced_map(_pattern_detail, listed, pace)
    return doc


_Pattern = tuple[str, int, bytes]
"""A Redis pattern subscription as /subsz lists it: account, cid, pattern (plain data, which the
garbage collector soon stops tracking, as ``_Remote`` explains)."""


async def _pattern_subscriptions(broker: Broker, opts: SubszOptions, pace: Pacer) -> list[_Pattern]:
    """The Redis pattern subscriptions the query asks for; with ``test``, those that a message on
    that subject would reach (its channel matches their pattern)."""
    channel = subject_channel(opts.test.encode()) if opts.test else None
    found: list[_Pattern] = []
    for conn in list(broker.clients.values()):
        if not isinstance(conn, RespConnection):
            continue
        if opts.account and conn.account.name != opts.account:
            continue
        for pattern in list(conn.patterns):
            if channel is None or glob_match(pattern, channel):
                found.append((conn.account.name, conn.cid, pattern))
            await pace.tick()
    return found


def _itself(entry: _Pattern) -> _Pattern:
    return entry


def _pattern_detail(entry: _Pattern) -> dict[str, Any]:
    account, cid, pattern = entry
    return {
        "account": account,
        "pattern": pattern.decode("utf-8", "replace"),
        "subject": pattern_subject(pattern),  # (what routes and gateways announce it as)
        "cid": cid,
    }


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


_Remote = tuple[str, str, str | None]
"""A piece of remote interest as the views keep it: account, subject, queue. A plain tuple of text
is soon untracked by the garbage collector, where a ``RemoteEntry`` (which refers to its link) would
count towards a full collection, a stall of its own when there are a hundred thousand of them."""


async def _by_account(entries: Iterable[RemoteEntry[Any]], pace: Pacer) -> dict[str, list[_Remote]]:
    """Remote interest grouped by account (``RemoteInterest.entries`` copies what it walks, so
    the walk may pause)."""
    found: dict[str, list[_Remote]] = {}
    for entry in entries:
        found.setdefault(entry.account, []).append((entry.account, entry.subject, entry.queue))
        await pace.tick()
    return found


def _remote_sub_detail(entry: _Remote) -> dict[str, Any]:
    account, subject, queue = entry
    detail = {"account": account, "subject": subject}
    if queue:
        detail["qgroup"] = queue
    return detail


def _remote_subject(entry: _Remote) -> str:
    return entry[1]


async def _route_info(
    link: Link,
    entries: list[_Remote],
    configured: bool,
    now: int,
    opts: RoutezOptions,
    pace: Pacer,
) -> dict[str, Any]:
    peer = peer_of(link)
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
        info["subscriptions_list_detail"] = await _paced_map(_remote_sub_detail, entries, pace)
    elif entries and opts.subs:
        info["subscriptions_list"] = await _paced_map(_remote_subject, entries, pace)
    if isinstance(link.slot, str):
        info["account"] = link.slot  # a pinned account's own connection
    return info


def _remote_order(entry: _Remote) -> tuple[str, str, str]:
    account, subject, queue = entry
    return account, subject, queue or ""


async def routez(node: Node, opts: RoutezOptions, pace: Pacer) -> dict[str, Any]:
    """/routez: every route connection in use, with its traffic and the interest it brought.

    Remote interest is recorded per peer and account, and each account travels on one connection
    of its peer, so a connection's subscriptions are its peer's entries for the accounts it carried.
    """
    broker, routes = node.broker, node.routes
    now = time.time_ns()
    links = _links_in_use(routes)
    seeds = {_host_port(url) for url in routes.config.seeds} if routes is not None else set()
    interest: dict[Peer, dict[str, list[_Remote]]] = {}
    infos = []
    for link in links:
        peer = peer_of(link)
        if peer not in interest:
            interest[peer] = await _by_account(broker.route_interest.entries(peer), pace)
        by_account = interest[peer]
        carried = [entry for account in link.accounts for entry in by_account.get(account, ())]
        entries = await _paced_sorted(carried, _remote_order, pace)
        infos.append(await _route_info(link, entries, _host_port(peer.url) in seeds, now, opts, pace))
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


async def _account_interest(
    name: str, entries: list[_Remote], opts: GatewayzOptions, pace: Pacer
) -> dict[str, Any]:
    """An account's interest on one link (nats-server's ``AccountGatewayz``)."""
    doc: dict[str, Any] = {
        "name": name,
        "interest_mode": "Interest-Only",
        "interest_only_threshold": INTEREST_ONLY_THRESHOLD,
    }
    if entries:
        doc["num_subs"] = len(entries)
    queues = sum(1 for _, _, queue in entries if queue)
    if queues:
        doc["num_queue_subs"] = queues
    if entries and opts.subs_detail:
        doc["subscriptions_list_detail"] = await _paced_map(_remote_sub_detail, entries, pace)
    elif entries and opts.subs:
        doc["subscriptions_list"] = await _paced_map(_remote_subject, entries, pace)
    return doc


async def _outbound_accounts(
    broker: Broker, gateway: Gateway, opts: GatewayzOptions, pace: Pacer
) -> list[dict[str, Any]]:
    """The interest the remote cluster announced, per account: what decides whether a message
    crosses this link."""
    by_account = await _by_account(broker.gateway_interest.entries(gateway), pace)
    names = [opts.account] if opts.account else sorted(by_account)
    return [
        await _account_interest(
            name, await _paced_sorted(by_account[name], _remote_order, pace), opts, pace
        )
        for name in names
        if name in by_account
    ]


async def _inbound_accounts(
    manager: GatewayManager, opts: GatewayzOptions, pace: Pacer
) -> list[dict[str, Any]]:
    """The accounts this cluster announces interest in, each in interest-only mode (inbound links
    carry no per-link counts in nats-server either)."""
    names: set[str] = set()
    for change in manager.interest.snapshot():
        names.add(change.account)
        await pace.tick()
    if opts.account:
        names &= {opts.account}
    return [await _account_interest(name, [], opts, pace) for name in sorted(names)]


async def gatewayz(node: Node, opts: GatewayzOptions, pace: Pacer) -> dict[str, Any]:
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
    announced = await _inbound_accounts(manager, opts, pace) if accounts else []
    for name, gateway in sorted(manager.remotes.items()):
        if opts.name and name != opts.name:
            continue
        link = gateway.outbound
        if link is not None and link.registered:
            remote: dict[str, Any] = {
                "configured": gateway.configured,
                "connection": _gateway_conn(link, now),
            }
            found = await _outbound_accounts(broker, gateway, opts, pace) if accounts else []
            if found:  # (left out when empty, as there)
                remote["accounts"] = found
            outbound[name] = remote
        links = sorted(
            (each for each in gateway.inbound.values() if each.registered), key=lambda each: each.rid
        )
        if links:
            inbound[name] = [
                {"configured": False, "connection": _gateway_conn(each, now)}
                | ({"accounts": announced} if announced else {})
                for each in links
            ]
    return doc | {"outbound_gateways": outbound, "inbound_gateways": inbound}


# -- /healthz?links=1 ------------------------------------------------------------------------------


def link_problems(node: Node) -> list[tuple[str, str]]:
    """Why this node is cut off, as (``route`` or ``gateway``, what): empty while it is linked to
    a majority of its cluster (the other nodes its seeds name, counting itself) and holds an
    outbound gateway to every configured cluster.

    A majority, not every node: with one node of three down the other two are well, while a node
    left alone, or on the small side of a split, is not. A seed that answered as this node does not
    count, so one configuration can list every node of the cluster.
    """
    problems: list[tuple[str, str]] = []
    routes, gateways = node.routes, node.gateways
    if routes is not None:
        own = routes.server_id
        others = [
            url for url in routes.config.seeds if url != routes.url and routes.seed_ids.get(url) != own
        ]
        linked = sum(1 for peer in routes.peers.values() if peer.slots)
        if others and 2 * (linked + 1) <= len(others) + 1:
            problems.append(
                ("route", f"routed to {linked} of the {len(others)} other nodes of cluster "
                          f"{routes.config.name!r}: not a majority")
            )  # fmt: skip
    if gateways is not None:
        for name, _ in gateways.config.gateways:
            remote = gateways.remotes.get(name)
            if remote is None or remote.outbound is None or not remote.outbound.registered:
                problems.append(("gateway", f"no outbound gateway to cluster {name!r}"))
    return problems


# -- streams: /varz's block and /streamz -----------------------------------------------------------

_StreamKey = tuple[str, int, bytes]
"""A stream as the views find it: account, database, key (plain data, as ``_Remote`` explains)."""


def _live_stream(db: Database, key: bytes, now_ms: int) -> Stream | None:
    """The stream at ``key`` unless it has expired (monitoring only reads: it removes nothing)."""
    when = db.expires_at(key)
    if when is not None and when <= now_ms:
        return None
    return db.keys.get(key)


async def _stream_keys(
    broker: Broker, now_ms: int, pace: Pacer, account: str = "", index: int | None = None
) -> list[_StreamKey]:
    """Every live stream key, in the accounts and database asked for, copied a step at a time."""
    found: list[_StreamKey] = []
    for name, keyspace in broker.keyspaces.accounts().items():
        if account and name != account:
            continue
        for number, db in keyspace.databases().items():
            if index is not None and number != index:
                continue
            for key in list(db.keys):
                if _live_stream(db, key, now_ms) is not None:
                    found.append((name, number, key))
                await pace.tick()
    return found


def _journal_fields(broker: Broker) -> dict[str, Any]:
    """The journal as /varz's ``streams`` and /streamz show it: ``journal`` (whether changes are
    journaled), ``log_size`` (its bytes), ``fsync_lag`` (seconds since the oldest write it has not
    yet made durable; 0 when all is), ``log_writable`` (false while it cannot be written and
    writes are refused), ``log_error`` (why, else empty) and ``log_discards`` (batches taken back
    since start because they could not be written)."""
    journal = broker.keyspaces.journal
    if journal is None:
        return {
            "journal": False,
            "log_size": 0,
            "fsync_lag": 0.0,
            "log_writable": True,
            "log_error": "",
            "log_discards": 0,
        }
    refusal = journal.refusal
    return {
        "journal": True,
        "log_size": journal.size_bytes,
        "fsync_lag": journal.fsync_lag_seconds,
        "log_writable": refusal is None,
        "log_error": (refusal or "").removeprefix("-"),
        "log_discards": journal.discards,
    }


async def _streams_block(node: Node, pace: Pacer) -> dict[str, Any]:
    """/varz's ``streams``: ``streams`` (stream keys of every account and database), ``entries``
    (their lengths summed), ``bytes`` (the memory they hold, as MEMORY USAGE counts it), ``groups``
    (consumer groups), ``captures`` (configured streams that capture subjects), ``captured`` (messages
    they stored since start), ``refused`` (messages they could not store), and the journal's
    fields (``_journal_fields``)."""
    broker = node.broker
    now_ms = time.time_ns() // 1_000_000
    streams = entries = size = groups = 0
    for account, index, key in await _stream_keys(broker, now_ms, pace):
        stream = _live_stream(broker.keyspaces.database(account, index), key, now_ms)
        if stream is not None:
            streams += 1
            entries += stream.length
            size += stream.memory_usage()
            groups += len(stream.groups)
        await pace.tick()
    captures = node.captures.streams if node.captures is not None else []
    return {
        "streams": streams,
        "entries": entries,
        "bytes": size,
        "groups": groups,
        "captures": len(captures),
        "captured": sum(c.captured for c in captures),
        "refused": sum(c.refused for c in captures),
        **_journal_fields(broker),
    }


@attrs.frozen
class StreamzOptions:
    """The /streamz query, decoded: ``acc``, ``db`` (a database number), ``name`` (a key), and
    ``offset`` and ``limit`` as /connz pages."""

    account: str = ""
    db: int | None = None
    name: str = ""
    offset: int = 0
    limit: int = DEFAULT_LIST_SIZE

    def __attrs_post_init__(self) -> None:
        if self.db is not None and not 0 <= self.db < DATABASES:
            raise BadRequest(f"invalid db {self.db}: databases are numbered 0 to {DATABASES - 1}")


def _text_of(name: bytes) -> str:
    return name.decode("utf-8", "replace")


def _id_text(entry_id: int) -> str:
    return format_id(entry_id).decode()


def _stream_detail(entry: _StreamKey, stream: Stream) -> dict[str, Any]:
    account, index, key = entry
    return {
        "account": account,
        "db": index,
        "name": _text_of(key),
        "length": stream.length,
        "bytes": stream.memory_usage(),
        "first_id": _id_text(stream.first_id),
        "last_id": _id_text(stream.last_id),
        "max_deleted_id": _id_text(stream.max_deleted_id),
        "entries_added": stream.entries_added,
        "groups": [
            {
                "name": _text_of(group.name),
                "consumers": group.consumers,
                "pending": group.pending,
                "last_delivered_id": _id_text(group.last_id),
                "entries_read": group.entries_read,
                "lag": group.lag,
            }
            for group in group_infos(stream)
        ],
    }


async def streamz(node: Node, opts: StreamzOptions, pace: Pacer) -> dict[str, Any]:
    """/streamz: the streams asked for (by account, database, then key), paged, each with its length,
    first and last IDs and its consumer groups with their lag (null where Redis's XINFO cannot
    tell it); and the streams configured to capture subjects, with their counts."""
    broker = node.broker
    now = time.time_ns()
    now_ms = now // 1_000_000
    found = await _stream_keys(broker, now_ms, pace, opts.account, opts.db)
    if opts.name:
        wanted = opts.name.encode("utf-8", "surrogateescape")
        found = [entry for entry in found if entry[2] == wanted]
    ordered = await _paced_sorted(found, _itself, pace, opts.offset + opts.limit)
    listed: list[dict[str, Any]] = []
    for entry in ordered[opts.offset :]:
        stream = _live_stream(broker.keyspaces.database(entry[0], entry[1]), entry[2], now_ms)
        if stream is not None:  # (gone while the list was made: left out)
            listed.append(_stream_detail(entry, stream))
        await pace.tick()
    captures = node.captures.streams if node.captures is not None else []
    return {
        "server_id": broker.server_id,
        "now": go_time(now),
        **_journal_fields(broker),
        "num_streams": len(listed),
        "total": len(found),
        "offset": opts.offset,
        "limit": opts.limit,
        "streams": listed,
        "captures": [
            {
                "account": c.config.account,
                "name": c.config.name,
                "subjects": list(c.config.subjects),
                "maxlen": c.config.maxlen,
                "max_age": c.config.max_age,
                "max_bytes": c.config.max_bytes,
                "captured": c.captured,
                "refused": c.refused,
            }
            for c in captures
            if (not opts.account or c.config.account == opts.account)
            and (not opts.name or c.config.name == opts.name)
            and opts.db in (None, CAPTURE_DB)
        ],
    }


# -- accounts: /accountz, /accstatz ----------------------------------------------------------------


@attrs.frozen
class AccountzOptions:
    """The /accountz query, decoded: ``acc`` asks for one account's details instead of the list."""

    account: str = ""


def _connections_by_account(broker: Broker) -> collections.Counter[str]:
    """Open client connections (NATS and Redis) per account name."""
    return collections.Counter(client.account.name for client in list(broker.clients.values()))


def _account_info(broker: Broker, account: Account, conns: int) -> dict[str, Any]:
    """nats-server's ``AccountInfo`` for an account defined in the configuration: no JWT, no
    mappings, and no imports or exports (which pubmesh's configuration cannot declare), so those
    fields are left out as there when empty."""
    stats = account.stats()
    doc: dict[str, Any] = {"account_name": account.name, "update_time": go_time(broker.start_ns)}
    if account is broker.system_account:
        doc["is_system"] = True
    return doc | {
        "expired": False,
        "complete": True,
        "jetstream_enabled": False,
        "leafnode_connections": 0,
        "client_connections": conns,
        "subscriptions": stats.num_subscriptions,
        "sublist_stats": attrs.asdict(stats),
    }


async def accountz(broker: Broker, opts: AccountzOptions, pace: Pacer) -> dict[str, Any]:
    """/accountz: the accounts this node knows, by name, or with ``acc`` that one's details.

    Raises:
        BadRequest: ``acc`` names no account.
    """
    doc: dict[str, Any] = {"server_id": broker.server_id, "now": go_time(time.time_ns())}
    if broker.system_account is not None:
        doc["system_account"] = broker.system_account.name
    if not opts.account:
        return doc | {"accounts": sorted(broker.accounts)}
    account = broker.accounts.get(opts.account)
    if account is None:
        raise BadRequest(f"Account {opts.account} does not exist")
    conns = _connections_by_account(broker)[account.name]
    return doc | {"account_detail": _account_info(broker, account, conns)}


@attrs.frozen
class AccountStatzOptions:
    """The /accstatz query (``unused``), or a system request's ``accounts`` and ``include_unused``."""

    accounts: tuple[str, ...] = ()
    """Only these (all when empty)."""
    include_unused: bool = False
    """Also accounts without a connection on this node."""


def _msg_bytes(msgs: int, size: int) -> dict[str, int]:
    return {"msgs": msgs, "bytes": size}


async def accstatz(broker: Broker, opts: AccountStatzOptions, pace: Pacer) -> dict[str, Any]:
    """/accstatz: per account, its client connections on this node, their subscriptions, and the
    messages and bytes its clients published (``received``) and were delivered (``sent``) since
    start, closed connections included. Traffic over routes and gateways is not counted per
    account, so nats-server's ``routes``, ``gateways`` and ``leafs`` breakdowns are left out."""
    traffic: dict[str, list[int]] = {}
    conns: collections.Counter[str] = collections.Counter()
    for client in list(broker.clients.values()):
        name = client.account.name
        conns[name] += 1
        totals = traffic.setdefault(name, [0, 0, 0, 0])
        totals[0] += client.in_msgs
        totals[1] += client.in_bytes
        totals[2] += client.out_msgs
        totals[3] += client.out_bytes
        await pace.tick()
    names = opts.accounts or tuple(sorted(broker.accounts))
    found: list[dict[str, Any]] = []
    for name in names:
        account = broker.accounts.get(name)
        if account is None or not (conns[name] or opts.include_unused):
            continue
        live = traffic.get(name, [0, 0, 0, 0])
        in_msgs, in_bytes, out_msgs, out_bytes = (
            a + b for a, b in zip(live, account.closed_traffic, strict=True)
        )
        found.append(
            {
                "acc": name,
                "name": name,
                "conns": conns[name],
                "leafnodes": 0,
                "total_conns": conns[name],
                "num_subscriptions": account.stats().num_subscriptions,
                "sent": _msg_bytes(out_msgs, out_bytes),
                "received": _msg_bytes(in_msgs, in_bytes),
                "slow_consumers": account.slow_consumers,
            }
        )
        await pace.tick()
    return {"server_id": broker.server_id, "now": go_time(time.time_ns()), "account_statz": found}


# -- STATSZ, the system account's summary of a node -------------------------------------------------


def _route_stat(link: Link) -> dict[str, Any]:
    """nats-server's ``RouteStat``."""
    peer = peer_of(link)
    stat: dict[str, Any] = {"rid": link.rid}
    if peer.name:
        stat["name"] = peer.name
    return stat | {
        "sent": _msg_bytes(link.out_msgs, link.out_bytes),
        "received": _msg_bytes(link.in_msgs, link.in_bytes),
        "pending": link.pending_bytes,
    }


def _gateway_stats(manager: GatewayManager | None) -> list[dict[str, Any]]:
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
                "sent": _msg_bytes(link.out_msgs, link.out_bytes),
                "received": _msg_bytes(
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
        "active_accounts": len(_connections_by_account(broker)),
        "subscriptions": _stats(broker).num_subscriptions,
        "sent": _msg_bytes(out_msgs, out_bytes),
        "sent_to_clients": _msg_bytes(out_msgs, out_bytes),
        "received": _msg_bytes(in_msgs, in_bytes),
        "received_from_clients": _msg_bytes(in_msgs, in_bytes),
        "slow_consumers": sum(slow.values()),
    }
    if any(slow.values()):
        doc["slow_consumer_stats"] = slow
    if broker.stale_connections:
        doc["stale_connections"] = broker.stale_connections
        doc["stale_connection_stats"] = {"clients": broker.stale_connections, **_NO_LINKS}
    routes = await _paced_map(_route_stat, _links_in_use(state.node.routes), pace)
    if routes:
        doc["routes"] = routes
    gateways = _gateway_stats(state.node.gateways)
    if gateways:
        doc["gateways"] = gateways
    doc["gomaxprocs"] = 1
    return doc
