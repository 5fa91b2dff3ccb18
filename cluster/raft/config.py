"""How one Raft node is set up: who it is, who its peers are, and its timing in ticks.

Time is counted in ticks, which the caller delivers (``Raft.tick``) at whatever real interval it
likes (100 ms is usual): the core never reads a clock. The election timeout is drawn afresh from
[``election_ticks``, 2 * ``election_ticks``) at every reset, from ``rng``, so a seeded generator
makes a whole run reproducible.

Membership is a fixed set of voters for now; changing it (joint consensus, or one voter at a time)
is a later step, and snapshots already record the voters they were taken under.
"""

from __future__ import annotations

import random

import attrs

__all__ = ["RaftConfig"]


def _voters(value: frozenset[str] | set[str] | list[str] | tuple[str, ...]) -> frozenset[str]:
    return frozenset(value)


@attrs.frozen(kw_only=True)
class RaftConfig:
    id: str
    voters: frozenset[str] = attrs.field(converter=_voters)
    rng: random.Random = attrs.field(eq=False)
    election_ticks: int = 10
    heartbeat_ticks: int = 1
    pre_vote: bool = True
    check_quorum: bool = True
    max_entries_per_append: int = 64

    @voters.validator
    def _check_voters(self, _attribute: object, value: frozenset[str]) -> None:
        if self.id not in value:
            raise ValueError(f"{self.id!r} is not among the voters {sorted(value)}")

    def __attrs_post_init__(self) -> None:
        if not 0 < self.heartbeat_ticks < self.election_ticks:
            raise ValueError("need 0 < heartbeat_ticks < election_ticks")
