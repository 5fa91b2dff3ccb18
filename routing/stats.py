"""Trie counters in the shape nats-server reports them, so monitoring tools read them unchanged."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

__all__ = ["SubListStats"]


@attrs.frozen
class SubListStats:
    """Counters of one trie, or the sum over several (``combine``), with nats-server's field names."""

    num_subscriptions: int
    num_cache: int
    num_inserts: int
    num_removes: int
    num_matches: int
    cache_hit_rate: float
    max_fanout: int
    avg_fanout: float

    @classmethod
    def combine(cls, parts: Iterable[SubListStats]) -> SubListStats:
        """Aggregate per-account stats: sums, with rates and averages re-weighted by their counts.

        The hit rate of the whole is total hits over total matches, not the mean of the rates, so an
        idle account does not dilute a busy one.
        """
        items = list(parts)
        matches = sum(s.num_matches for s in items)
        hits = sum(s.cache_hit_rate * s.num_matches for s in items)
        cached = sum(s.num_cache for s in items)
        fanout_total = sum(s.avg_fanout * s.num_cache for s in items)
        return cls(
            num_subscriptions=sum(s.num_subscriptions for s in items),
            num_cache=cached,
            num_inserts=sum(s.num_inserts for s in items),
            num_removes=sum(s.num_removes for s in items),
            num_matches=matches,
            cache_hit_rate=hits / matches if matches else 0.0,
            max_fanout=max((s.max_fanout for s in items), default=0),
            avg_fanout=fanout_total / cached if cached else 0.0,
        )
