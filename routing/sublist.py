"""The local subscriptions of one account: the question every publish asks first."""

from __future__ import annotations

from typing import Final

from routing.subscription import Subscription
from routing.trie import Groups, SubjectTrie

__all__ = ["SubList", "SubListResult"]


class SubListResult:
    """Who matched a subject: plain subscribers, and the members of each queue group.

    Immutable, and built once per (cached) subject; the publish path iterates it without copying.
    A plain class with read-only fields rather than a frozen attrs one: compiled, the publish path
    reads them as C struct members.

    Attributes:
        plain: every plain subscription that matched.
        queues: one tuple of members per queue group that matched (each message goes to one of them).
    """

    __slots__ = ("plain", "queues")

    def __init__(
        self,
        plain: tuple[Subscription, ...] = (),
        queues: tuple[tuple[Subscription, ...], ...] = (),
    ) -> None:
        self.plain: Final = plain
        self.queues: Final = queues

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SubListResult) and (self.plain, self.queues) == (
            other.plain,
            other.queues,
        )

    def __hash__(self) -> int:
        return hash((self.plain, self.queues))

    def __repr__(self) -> str:
        return f"SubListResult(plain={self.plain!r}, queues={self.queues!r})"

    @property
    def fanout(self) -> int:
        """Deliveries one message costs: each plain subscriber plus one per queue group."""
        return len(self.plain) + len(self.queues)

    def __bool__(self) -> bool:
        return bool(self.plain or self.queues)


EMPTY_RESULT: Final = SubListResult()


def _build(plain: list[Subscription], queues: Groups) -> SubListResult:
    return SubListResult(tuple(plain), tuple(map(tuple, queues.values())) if queues else ())


class SubList(SubjectTrie[SubListResult]):
    """Local subscriptions of one account, matched through a subject trie with a result cache.

    ``match`` hands out ``SubListResult`` snapshots; every miss returns the one shared empty result.

    Args:
        cache: keep match results by subject (nats-server's default). Turning it off suits accounts
            whose publishes rarely repeat a subject, where the cache only costs memory and sweeps.
    """

    __slots__ = ()

    def __init__(self, *, cache: bool = True) -> None:
        super().__init__(_build, EMPTY_RESULT, cache=cache)
