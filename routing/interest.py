"""Reference counts of interest, turned into the announcements a link must carry (RS+ / RS-).

Peers do not need to know about every subscription, only about whether there is interest at all: two
clients on ``foo`` are one RS+, and the RS- waits for the last of them. Queue groups are different,
because the far side picks members by weight, so inside a cluster every change of a group's size is
announced. Across gateways a cluster speaks for itself as a whole and a queue group is just present or
absent (``queue_weights=False``).

The tracker is synchronous and returns each change as it happens, so a caller that queues the
change at once on the account's one connection keeps every account's announcements in order. That
is what closes nats-server's RS+/RS- reordering bug (#8233): there is no later re-read that could
overtake an earlier one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import attrs

__all__ = ["InterestChange", "InterestTracker"]

Key = tuple[str, str | None]
"""(subject, queue) within one account."""


@attrs.frozen(slots=True)
class InterestChange:
    """One announcement: interest in ``subject`` (as ``queue``) now has ``weight``; 0 withdraws it.

    Plain interest is always announced with weight 1.
    """

    account: str
    subject: str
    queue: str | None
    weight: int

    @property
    def withdrawn(self) -> bool:
        return self.weight == 0


class InterestTracker:
    """Counts interest per (account, subject, queue) and reports the changes peers must hear.

    Args:
        queue_weights: announce every change of a queue group's count (within a cluster). When
            False a group is announced with weight 1 on its first member and withdrawn with its
            last, as across gateways.
    """

    __slots__ = ("_counts", "_queue_weights")

    def __init__(self, *, queue_weights: bool = True) -> None:
        self._queue_weights = queue_weights
        self._counts: dict[str, dict[Key, int]] = {}

    def update(
        self, account: str, subject: str, queue: str | None = None, delta: int = 1
    ) -> InterestChange | None:
        """Apply ``delta`` to a key's count; return the announcement it causes, if any.

        Raises:
            ValueError: the count would go below zero (a caller's bookkeeping bug).
        """
        counts = self._counts.get(account)
        key = (subject, queue)
        before = counts.get(key, 0) if counts is not None else 0
        after = before + delta
        if after < 0:
            raise ValueError(f"interest in {account}/{subject}/{queue} would drop below zero")
        if after == before:
            return None
        if after:
            if counts is None:
                counts = self._counts[account] = {}
            counts[key] = after
        else:
            assert counts is not None
            del counts[key]
            if not counts:
                del self._counts[account]
        return self._change(account, key, before, after)

    def update_batch(self, account: str, deltas: Mapping[Key, int]) -> list[InterestChange]:
        """Apply several deltas to one account (a connection closing); return the changes in order."""
        changes = [self.update(account, subject, queue, d) for (subject, queue), d in deltas.items()]
        return [c for c in changes if c is not None]

    def _change(self, account: str, key: Key, before: int, after: int) -> InterestChange | None:
        subject, queue = key
        if queue is not None and self._queue_weights:
            return InterestChange(account, subject, queue, after)
        if before and after:
            return None
        return InterestChange(account, subject, queue, 1 if after else 0)

    def count(self, account: str, subject: str, queue: str | None = None) -> int:
        """The current count of one key."""
        return self._counts.get(account, {}).get((subject, queue), 0)

    def accounts(self) -> list[str]:
        """Accounts with any interest."""
        return list(self._counts)

    def snapshot(self, accounts: Iterable[str] | None = None) -> Iterator[InterestChange]:
        """The current interest as announcements, for a peer that has just connected."""
        names = list(self._counts) if accounts is None else list(accounts)
        for account in names:
            for key, count in list(self._counts.get(account, {}).items()):
                change = self._change(account, key, 0, count)
                assert change is not None
                yield change

    def __len__(self) -> int:
        return sum(len(counts) for counts in self._counts.values())
