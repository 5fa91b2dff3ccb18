"""Why Raft refused: refusals a caller expects are returned records, misuse raises.

``propose`` and ``read_index`` return a ``Refusal`` instead of raising because being refused is
ordinary (an election is under way, leadership is being handed over): the caller retries or
redirects. Exceptions derive from ``RaftError`` and mean the caller broke a contract.
"""

from __future__ import annotations

import attrs

__all__ = [
    "ChangePending",
    "CompactionError",
    "InvalidChange",
    "LeadershipTransferring",
    "NotLeader",
    "RaftError",
    "Refusal",
    "UnknownPeer",
    "VotersRecovering",
]


@attrs.frozen
class NotLeader:
    """Only the leader takes proposals and reads; ``leader`` is who is, if known."""

    leader: str | None


@attrs.frozen
class LeadershipTransferring:
    """The leader is handing over to ``to`` and takes no proposals until that ends."""

    to: str


@attrs.frozen
class ChangePending:
    """No membership change may be proposed until the entry at ``index`` commits.

    ``index`` is the previous change, still uncommitted, or a new leader's first entry: a leader
    changes membership only once an entry of its own term committed.
    """

    index: int


@attrs.frozen
class VotersRecovering:
    """No membership change that would leave the voters not known to recover from an empty store
    short of a majority (``cluster.raft.recovery``): ``voters`` are those that may be."""

    voters: frozenset[str]


Refusal = NotLeader | LeadershipTransferring | ChangePending | VotersRecovering


class RaftError(Exception):
    """The caller broke the contract of ``Raft``."""


class CompactionError(RaftError):
    """A snapshot was asked for at an index not yet applied, or already compacted."""


class InvalidChange(RaftError):
    """A membership change that makes no sense for the voters in force (adding a voter, removing a
    non-voter or the last voter)."""


class UnknownPeer(RaftError):
    """A peer id that is not a voter of the group."""
