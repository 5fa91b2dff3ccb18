"""What a leader knows of each voter's log, and majorities over a set of voters.

Each follower's ``Progress`` is in one of three states (as in etcd's raft):

* **probe**: where its log matches ours is unknown; send one append at ``next - 1`` and wait for
  the answer (or the next heartbeat response) before sending another;
* **replicate**: it matches up to ``match``; stream appends optimistically, ``next`` runs ahead,
  as long as what was sent and not acknowledged yet (``inflight``) stays within the configured
  bounds (a follower far behind is sent what a link holds, then more as it acknowledges; when the
  window is full and a heartbeat's answer shows no progress since the last, the oldest is freed,
  in case an append was lost);
* **snapshot**: it needs entries we compacted; a snapshot is on its way, appends wait.

``recent_active`` records whether the voter answered since the last check-quorum round,
``was_active`` whether it answered in the round before.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Mapping

import attrs

__all__ = ["Progress", "ProgressState", "committed_index", "has_quorum", "quorum"]


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


@attrs.define
class Progress:
    match: int = 0
    next: int = 1
    state: ProgressState = ProgressState.PROBE
    paused: bool = False
    pending_snapshot: int = 0
    recent_active: bool = False
    was_active: bool = False
    inflight: deque[tuple[int, int]] = attrs.Factory(deque)
    """Appends sent in the replicate state and not acknowledged: (last index, bytes of data)."""
    inflight_bytes: int = 0
    beaten_at: int = -1
    """``match`` when the last heartbeat was answered (a full window that did not move since: an
    append may have been lost)."""
    recovery: int = 0
    """The follower's last recovery heard of (``cluster.raft.recovery``; 0: none)."""
    unheard: bool = False
    """Not heard from since this leader was elected or made it a voter (it may be recovering)."""
    recovering: bool = False
    """Its last response carried that recovery."""
    floor: int = 0
    """What it must hold before it is told its recovery is complete."""
    confirm_round: int = 0
    """The round of heartbeats, started once it held ``floor``, whose answer by a majority lets
    the leader tell it its recovery is complete (0: not started)."""

    def become_probe(self) -> None:
        if self.state is ProgressState.SNAPSHOT:
            self.next = max(self.match, self.pending_snapshot) + 1
        else:
            self.next = self.match + 1
        self.state = ProgressState.PROBE
        self.pending_snapshot = 0
        self.paused = False
        self._forget_inflight()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.paused = False
        self._forget_inflight()

    def become_snapshot(self, index: int) -> None:
        self.state = ProgressState.SNAPSHOT
        self.pending_snapshot = index
        self.paused = False
        self._forget_inflight()

    def forget(self, next: int) -> None:
        """The follower lost its log: nothing it acknowledged counts; probe it from ``next``."""
        self.match = 0
        self.beaten_at = -1
        self.become_probe()
        self.next = next

    def _forget_inflight(self) -> None:
        self.inflight.clear()
        self.inflight_bytes = 0

    def sent(self, last: int, size: int) -> None:
        """An append up to index ``last``, of ``size`` bytes of data, went out (replicate state)."""
        self.inflight.append((last, size))
        self.inflight_bytes += size

    def acknowledged(self, index: int) -> None:
        """The follower holds everything up to ``index``: the appends that carried it are done."""
        while self.inflight and self.inflight[0][0] <= index:
            self.inflight_bytes -= self.inflight.popleft()[1]

    def heartbeat_answered(self, most_appends: int, most_bytes: int) -> None:
        """A heartbeat was answered: if the window is full and nothing was acknowledged since the
        last answer, forget the oldest append in flight (it may have been lost)."""
        if self.inflight and self.match == self.beaten_at and self.full(most_appends, most_bytes):
            self.inflight_bytes -= self.inflight.popleft()[1]
        self.beaten_at = self.match

    def full(self, most_appends: int, most_bytes: int) -> bool:
        """Whether no more appends may go out until some are acknowledged."""
        return len(self.inflight) >= most_appends or self.inflight_bytes >= most_bytes

    def maybe_update(self, index: int) -> bool:
        """The follower matches up to ``index``: True if that is news."""
        updated = index > self.match
        if updated:
            self.match = index
            self.paused = False
        self.next = max(self.next, index + 1)
        return updated

    def maybe_decrease(self, rejected: int, hint: int) -> bool:
        """The follower refused an append at ``rejected``; back ``next`` off to ``hint`` + 1.

        A stale rejection (for an index we already moved past) changes nothing.
        """
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, hint + 1), self.match + 1, 1)
        self.paused = False
        return True

    def is_paused(self) -> bool:
        return self.state is ProgressState.SNAPSHOT or (
            self.state is ProgressState.PROBE and self.paused
        )


def quorum(voters: Iterable[str]) -> int:
    return len(frozenset(voters)) // 2 + 1


def has_quorum(voters: frozenset[str], yes: Iterable[str]) -> bool:
    return len(voters & frozenset(yes)) >= quorum(voters)


def committed_index(matches: Mapping[str, int]) -> int:
    """The highest index a majority of voters hold (each voter's ``match`` given)."""
    ordered = sorted(matches.values(), reverse=True)
    return ordered[quorum(matches) - 1]
