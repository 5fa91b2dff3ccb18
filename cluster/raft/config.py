"""How one Raft node is set up: who it is, who its peers are, and its timing in ticks.

Time is counted in ticks, which the caller delivers (``Raft.tick``) at whatever real interval it
likes (100 ms is usual): the core never reads a clock. The election timeout is drawn afresh from
[``election_ticks``, 2 * ``election_ticks``) at every reset, from ``rng``, so a seeded generator
makes a whole run reproducible.

``voters`` are the group's founding voters: those in force at the start of the log, before any
snapshot or membership change (``cluster.raft.membership``). Every node of a group is given the
same founding voters, including a node that joins later and is not among them: it starts as a
non-voter, never campaigns, and becomes a voter when the change that adds it reaches its log
(from then on, and after a restart, the log and snapshots say who the voters are).
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
    max_bytes_per_append: int = 1024 * 1024
    """Entry data one append carries at most, unless its first entry alone is larger (so that a
    follower far behind is sent what a link holds, not all it lacks at once)."""
    max_inflight_appends: int = 256
    max_inflight_bytes: int = 4 * 1024 * 1024
    """Appends (and their bytes of data) sent to one follower and not acknowledged yet, at most."""

    def __attrs_post_init__(self) -> None:
        if not 0 < self.heartbeat_ticks < self.election_ticks:
            raise ValueError("need 0 < heartbeat_ticks < election_ticks")
