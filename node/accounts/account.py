"""Accounts: separate subject namespaces. Nothing published in one is ever seen in another."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, TypeAlias

import attrs

from cluster.host import Forwarder
from routing import (
    EMPTY_MATCH,
    PatternIndex,
    PatternSubscriber,
    RemoteInterest,
    RemoteMatch,
    SubList,
    SubListResult,
    SubListStats,
    Subscription,
)

__all__ = ["DEFAULT_ACCOUNT", "Account", "Importer", "Interest"]

DEFAULT_ACCOUNT = "$G"
"""nats-server's global account, used when no accounts are configured."""

_CACHE_MAX = 4096

# (A string, because compiled generic classes cannot be subscripted at run time.)
Interest: TypeAlias = "tuple[SubListResult, RemoteMatch[Forwarder], RemoteMatch[Forwarder]]"
"""Who wants a subject: local subscribers, routes, gateways."""


class Importer(Protocol):
    """What an account that imports streams does as its subscriptions come and go
    (``node.accounts.imports``)."""

    def subscribed(self, sub: Subscription) -> None: ...

    def unsubscribed(self, subs: Collection[Subscription]) -> None: ...


class Account:
    """One account's local subscriptions, and the cache the publish path asks first.

    The publish path has the subject as ``bytes``; decoding it for every message only to look the
    result up in the SubList's ``str``-keyed cache would cost more than the lookup. So the account
    keeps its own cache, keyed by the subject as it came off the wire, holding local and remote
    interest together. It is dropped whenever any of the three sources changes (their ``genid``
    moves); misses then fall through to the tries' own caches, which are invalidated more finely.

    Args:
        name: the account's name.
        routes, gateways: remote interest of the node's links (shared by all accounts).
    """

    __slots__ = (
        "_cache",
        "_gateways",
        "_gateways_genid",
        "_hits",
        "_local_genid",
        "_routes",
        "_routes_genid",
        "closed_traffic",
        "imports",
        "name",
        "patterns",
        "slow_consumers",
        "sublist",
    )

    def __init__(
        self, name: str, routes: RemoteInterest[Forwarder], gateways: RemoteInterest[Forwarder]
    ) -> None:
        self.name = name
        self.sublist = SubList()
        self._routes = routes
        self._gateways = gateways
        self._cache: dict[bytes, Interest] = {}
        self._local_genid = self._routes_genid = self._gateways_genid = 0
        self._hits = 0
        self.patterns: PatternIndex[PatternSubscriber] | None = None
        """Redis pattern subscriptions (PSUBSCRIBE) on this node, once there are any."""
        self.imports: Importer | None = None
        """Its stream imports, if it has any: told of every subscription (never of a message)."""
        self.closed_traffic = [0, 0, 0, 0]
        """Messages and bytes in and out of its client connections that have closed (open ones
        count their own), so /accstatz totals survive them."""
        self.slow_consumers = 0
        """Its client connections cut as slow consumers."""

    def match(self, subject: bytes) -> Interest:
        """Local and remote interest in ``subject`` (bytes off the wire; not necessarily UTF-8)."""
        sublist, routes, gateways = self.sublist, self._routes, self._gateways
        if (
            sublist.genid != self._local_genid
            or routes.genid != self._routes_genid
            or gateways.genid != self._gateways_genid
        ):
            self._cache.clear()
            self._local_genid = sublist.genid
            self._routes_genid = routes.genid
            self._gateways_genid = gateways.genid
        found = self._cache.get(subject)
        if found is not None:
            self._hits += 1
            return found
        text = subject.decode("utf-8", "surrogateescape")
        name = self.name
        found = (
            sublist.match(text),
            routes.match_remote(name, text) if len(routes) else EMPTY_MATCH,
            gateways.match_remote(name, text) if len(gateways) else EMPTY_MATCH,
        )
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[subject] = found
        return found

    def stats(self) -> SubListStats:
        """The SubList's counters, with this cache's hits counted as the cache hits they are."""
        stats = self.sublist.stats()
        matches = stats.num_matches + self._hits
        hits = stats.cache_hit_rate * stats.num_matches + self._hits
        return attrs.evolve(
            stats, num_matches=matches, cache_hit_rate=hits / matches if matches else 0.0
        )

    def __repr__(self) -> str:
        return f"Account({self.name!r})"
