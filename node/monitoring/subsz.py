"""/subsz: the node's subscriptions, as nats-server's ``Subsz`` and ``SubDetail`` show them, with
Redis's channel and pattern subscriptions beside them; and the subscription counts /varz and STATSZ
report.
"""

from __future__ import annotations

import time
from typing import Any, cast

import attrs

from node.broker import Broker, Owner
from node.connection import Connection
from node.monitoring.connz import sub_detail, subs_of
from node.monitoring.gofmt import go_time
from node.monitoring.pacing import Pacer, itself, paced_map, paced_sorted
from node.monitoring.state import DEFAULT_LIST_SIZE, BadRequest
from node.resp.connection import RespConnection
from routing import (
    SubListStats,
    Subscription,
    glob_match,
    is_valid_literal_subject,
    pattern_subject,
    subject_channel,
    subject_matches,
)

__all__ = ["SubszOptions", "num_patterns", "sublist_stats", "subsz"]


def sublist_stats(broker: Broker, account: str = "") -> SubListStats:
    """The match statistics of the accounts asked for (all when ``account`` is empty), summed."""
    return SubListStats.combine(
        a.stats() for a in broker.accounts.values() if not account or a.name == account
    )


def num_patterns(broker: Broker, account: str = "") -> int:
    """Distinct Redis patterns per account (PUBSUB NUMPAT), summed over the accounts asked for."""
    return sum(
        len(a.patterns)
        for a in broker.accounts.values()
        if a.patterns is not None and (not account or a.name == account)
    )


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
        if not isinstance(conn, Connection):
            continue
        if opts.account and conn.account.name != opts.account:
            continue
        for sub in subs_of(conn):
            if not opts.test or subject_matches(sub.subject, opts.test):
                found.append(sub)
            await pace.tick()
    for sub in broker.internal_subscriptions:
        if (not opts.account or _owner(sub).account.name == opts.account) and (
            not opts.test or subject_matches(sub.subject, opts.test)
        ):
            found.append(sub)
    return found


def _owner(sub: Subscription) -> Owner:
    """Whom a listed subscription belongs to: every one listed is a client connection's or the
    node's own (``Broker.internal_subscriptions``), and both kinds are ``Owner``s."""
    return cast(Owner, sub.owner)


def _natural(sub: Subscription) -> tuple[str, int, int, bytes]:
    """By account, connection, then sid, numeric sids by value (``2`` before ``10``) as clients
    number them."""
    owner = _owner(sub)
    return owner.account.name, owner.cid, len(sub.sid), sub.sid


def _listed_detail(sub: Subscription) -> dict[str, Any]:
    owner = _owner(sub)
    return sub_detail(sub, owner.cid, owner.account.name)


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
    stats = sublist_stats(broker, opts.account)
    doc: dict[str, Any] = {"server_id": broker.server_id, "now": go_time(time.time_ns())}
    doc |= attrs.asdict(stats)
    doc["num_patterns"] = num_patterns(broker, opts.account)
    found = await _client_subscriptions(broker, opts, pace) if opts.subs else []
    ordered = await paced_sorted(found, _natural, pace, opts.offset + opts.limit)
    page = await paced_map(_listed_detail, ordered[opts.offset :], pace)
    doc |= {"total": len(found), "offset": opts.offset, "limit": opts.limit}
    if page:
        doc["subscriptions_list"] = page
    if opts.subs:
        patterns = await _pattern_subscriptions(broker, opts, pace)
        ordered_patterns = await paced_sorted(patterns, itself, pace, opts.offset + opts.limit)
        doc["patterns_total"] = len(patterns)
        if listed := ordered_patterns[opts.offset :]:
            doc["patterns_list"] = await paced_map(_pattern_detail, listed, pace)
    return doc


_Pattern = tuple[str, int, bytes]
"""A Redis pattern subscription as /subsz lists it: account, cid, pattern (plain data, as
``node.monitoring.pacing`` explains)."""


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


def _pattern_detail(entry: _Pattern) -> dict[str, Any]:
    account, cid, pattern = entry
    return {
        "account": account,
        "pattern": pattern.decode("utf-8", "replace"),
        "subject": pattern_subject(pattern),  # (what routes and gateways announce it as)
        "cid": cid,
    }
