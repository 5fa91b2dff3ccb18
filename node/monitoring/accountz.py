"""The node's accounts: /accountz (their names, or one account's details) and /accstatz (their
connections and traffic), as nats-server's ``Accountz`` and ``AccountStatz`` show them.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import attrs

from node.accounts.account import Account
from node.broker import Broker
from node.monitoring.gofmt import go_time
from node.monitoring.pacing import Pacer
from node.monitoring.state import BadRequest

__all__ = [
    "AccountStatzOptions",
    "AccountzOptions",
    "accountz",
    "accstatz",
    "connections_by_account",
    "msg_bytes",
]


@attrs.frozen
class AccountzOptions:
    """The /accountz query, decoded: ``acc`` asks for one account's details instead of the list."""

    account: str = ""


def connections_by_account(broker: Broker) -> collections.Counter[str]:
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
    conns = connections_by_account(broker)[account.name]
    return doc | {"account_detail": _account_info(broker, account, conns)}


@attrs.frozen
class AccountStatzOptions:
    """The /accstatz query (``unused``), or a system request's ``accounts`` and ``include_unused``."""

    accounts: tuple[str, ...] = ()
    """Only these (all when empty)."""
    include_unused: bool = False
    """Also accounts without a connection on this node."""


def msg_bytes(msgs: int, size: int) -> dict[str, int]:
    """nats-server's ``MsgBytes``: a count of messages and of their bytes."""
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
                "sent": msg_bytes(out_msgs, out_bytes),
                "received": msg_bytes(in_msgs, in_bytes),
                "slow_consumers": account.slow_consumers,
            }
        )
        await pace.tick()
    return {"server_id": broker.server_id, "now": go_time(time.time_ns()), "account_statz": found}
