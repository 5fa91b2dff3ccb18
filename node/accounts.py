"""Accounts: separate subject namespaces. Nothing published in one is ever seen in another."""

from __future__ import annotations

import attrs

from routing import SubList, SubListResult, SubListStats

__all__ = ["DEFAULT_ACCOUNT", "Account"]

DEFAULT_ACCOUNT = "$G"
"""nats-server's global account, used when no accounts are configured."""

_L1_MAX = 4096


class Account:
    """One account's local subscriptions, with a cache keyed by the subject as it came off the wire.

    The publish path has the subject as ``bytes``; decoding it for every message only to find the
    result in the SubList's ``str``-keyed cache would cost more than the lookup. This first-level
    cache is dropped whenever the SubList changes (its ``genid`` moves), after which misses fall
    through to the SubList's own cache, which is invalidated more finely.
    """

    __slots__ = ("_l1", "_l1_genid", "_l1_hits", "name", "sublist")

    def __init__(self, name: str) -> None:
        self.name = name
        self.sublist = SubList()
        self._l1: dict[bytes, SubListResult] = {}
        self._l1_genid = 0
        self._l1_hits = 0

    def match(self, subject: bytes) -> SubListResult:
        """Local interest in ``subject`` (bytes off the wire; not necessarily UTF-8)."""
        sublist = self.sublist
        if sublist.genid != self._l1_genid:
            self._l1.clear()
            self._l1_genid = sublist.genid
        result = self._l1.get(subject)
        if result is not None:
            self._l1_hits += 1
            return result
        result = sublist.match(subject.decode("utf-8", "surrogateescape"))
        if len(self._l1) >= _L1_MAX:
            self._l1.clear()
        self._l1[subject] = result
        return result

    def stats(self) -> SubListStats:
        """The SubList's counters, with this cache's hits counted as the cache hits they are."""
        stats = self.sublist.stats()
        matches = stats.num_matches + self._l1_hits
        hits = stats.cache_hit_rate * stats.num_matches + self._l1_hits
        return attrs.evolve(
            stats, num_matches=matches, cache_hit_rate=hits / matches if matches else 0.0
        )

    def __repr__(self) -> str:
        return f"Account({self.name!r})"
