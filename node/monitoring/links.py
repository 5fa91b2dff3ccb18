"""The node's links: /routez and /gatewayz as nats-server's ``Routez``/``RouteInfo`` and
``Gatewayz`` show them, the route and gateway settings and counts in /varz, and whether the node is
cut off from its cluster or from another (``/healthz?links=true``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import attrs

from cluster.config import parse_url
from cluster.gateways import GatewayManager
from cluster.link import Link
from cluster.peer import Gateway, Peer, peer_of
from cluster.routes import RouteManager
from node.accounts.account import Account
from node.broker import Broker
from node.monitoring.gofmt import SECOND, go_time, rtt, uptime
from node.monitoring.pacing import Pacer, paced_map, paced_sorted
from node.monitoring.state import MonitoredNode
from routing import RemoteEntry

__all__ = [
    "INTEREST_ONLY_THRESHOLD",
    "GatewayzOptions",
    "RoutezOptions",
    "cluster_options",
    "gateway_options",
    "gatewayz",
    "link_problems",
    "links_in_use",
    "route_counts",
    "routez",
]


# -- /routez, and the cluster in /varz -------------------------------------------------------------


@attrs.frozen
class RoutezOptions:
    """The /routez query, decoded."""

    subs: bool = False
    subs_detail: bool = False


def links_in_use(routes: RouteManager[Account] | None) -> list[Link[Account]]:
    """The route connections that carry traffic, by rid: every pooled connection to every peer, as
    nats-server lists and counts them. A duplicate refused at the handshake, or a connection being
    replaced, carries nothing and is left out."""
    if routes is None:
        return []
    return [link for link in routes.links if link.registered]


def route_counts(routes: RouteManager[Account] | None) -> tuple[int, int]:
    """/varz's ``routes`` (connections, pooled ones each counted) and ``remotes`` (peers reached)."""
    if routes is None:
        return 0, 0
    return len(links_in_use(routes)), sum(1 for peer in routes.peers.values() if peer.slots)


def _host_port(url: str) -> str:
    """A route URL as nats-server shows configured routes (host:port); one that does not parse,
    as given."""
    try:
        host, port = parse_url(url)
    except ValueError:
        return url
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def cluster_options(routes: RouteManager[Account] | None) -> dict[str, Any]:
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


def gateway_options(manager: GatewayManager[Account] | None) -> dict[str, Any]:
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
    link: Link[Account],
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
        "rtt": rtt(round(link.rtt * SECOND)),
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
        info["subscriptions_list_detail"] = await paced_map(_remote_sub_detail, entries, pace)
    elif entries and opts.subs:
        info["subscriptions_list"] = await paced_map(_remote_subject, entries, pace)
    if isinstance(link.slot, str):
        info["account"] = link.slot  # a pinned account's own connection
    return info


def _remote_order(entry: _Remote) -> tuple[str, str, str]:
    account, subject, queue = entry
    return account, subject, queue or ""


async def routez(node: MonitoredNode, opts: RoutezOptions, pace: Pacer) -> dict[str, Any]:
    """/routez: every route connection in use, with its traffic and the interest it brought.

    Remote interest is recorded per peer and account, and each account travels on one connection
    of its peer, so a connection's subscriptions are its peer's entries for the accounts it carried.
    """
    broker, routes = node.broker, node.routes
    now = time.time_ns()
    links = links_in_use(routes)
    seeds = {_host_port(url) for url in routes.config.seeds} if routes is not None else set()
    interest: dict[Peer[Account], dict[str, list[_Remote]]] = {}
    infos = []
    for link in links:
        peer = peer_of(link)
        if peer not in interest:
            interest[peer] = await _by_account(broker.route_interest.entries(peer), pace)
        by_account = interest[peer]
        carried = [entry for account in link.accounts for entry in by_account.get(account, ())]
        entries = await paced_sorted(carried, _remote_order, pace)
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


def _gateway_conn(link: Link[Account], now: int) -> dict[str, Any]:
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
        "rtt": rtt(round(link.rtt * SECOND)),
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
        doc["subscriptions_list_detail"] = await paced_map(_remote_sub_detail, entries, pace)
    elif entries and opts.subs:
        doc["subscriptions_list"] = await paced_map(_remote_subject, entries, pace)
    return doc


async def _outbound_accounts(
    broker: Broker, gateway: Gateway[Account], opts: GatewayzOptions, pace: Pacer
) -> list[dict[str, Any]]:
    """The interest the remote cluster announced, per account: what decides whether a message
    crosses this link."""
    by_account = await _by_account(broker.gateway_interest.entries(gateway), pace)
    names = [opts.account] if opts.account else sorted(by_account)
    return [
        await _account_interest(
            name, await paced_sorted(by_account[name], _remote_order, pace), opts, pace
        )
        for name in names
        if name in by_account
    ]


async def _inbound_accounts(
    manager: GatewayManager[Account], opts: GatewayzOptions, pace: Pacer
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


async def gatewayz(node: MonitoredNode, opts: GatewayzOptions, pace: Pacer) -> dict[str, Any]:
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


def link_problems(node: MonitoredNode) -> list[tuple[str, str]]:
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
