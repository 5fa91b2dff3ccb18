"""What Raft peers say to each other, and what their logs hold: typed, frozen records.

Every message names its sender, its recipient and the sender's term. Transport is not this
package's concern: a message is handed to whatever carries it and stepped into the recipient's
``Raft`` as it arrives, in any order, any number of times, or never; the protocol tolerates all of
that. Pre-votes carry the term the sender *would* campaign at (its term + 1) and do not change any
term; a granted pre-vote response echoes the request's term.
"""

from __future__ import annotations

import enum

import attrs

__all__ = [
    "AppendEntries",
    "AppendResponse",
    "Entry",
    "EntryKind",
    "Heartbeat",
    "HeartbeatResponse",
    "InstallSnapshot",
    "Message",
    "Snapshot",
    "TimeoutNow",
    "VoteRequest",
    "VoteResponse",
]


class EntryKind(enum.Enum):
    COMMAND = "command"
    """Data the application proposed; applied to its state machine once committed."""
    NOOP = "noop"
    """The empty entry a new leader appends to commit its predecessors' entries (Raft §5.4.2)."""
    CONFIG = "config"
    """A membership change (``cluster.raft.membership.ChangeEntry``): in force once in the log."""


@attrs.frozen
class Entry:
    index: int
    term: int
    data: bytes = b""
    kind: EntryKind = EntryKind.COMMAND


@attrs.frozen
class Snapshot:
    """The state machine as of ``index`` (whose entry had ``term``), and the voters then."""

    index: int
    term: int
    voters: frozenset[str]
    data: bytes = b""


@attrs.frozen(kw_only=True)
class VoteRequest:
    sender: str
    to: str
    term: int
    last_index: int
    last_term: int
    pre: bool = False
    """A pre-vote: "would you vote for me at ``term``?"; nobody's term or vote changes."""
    transfer: bool = False
    """Campaigning because the leader handed over: voters ignore their leader lease."""
    recovering: int = 0
    """The candidate's recovery (``cluster.raft.recovery``): only voters recovering too, from an
    empty log, vote for it (0: it is not recovering)."""


@attrs.frozen(kw_only=True)
class VoteResponse:
    sender: str
    to: str
    term: int
    granted: bool
    pre: bool = False


@attrs.frozen(kw_only=True)
class AppendEntries:
    """Entries following (``prev_index``, ``prev_term``) in the leader's log, and its commit."""

    sender: str
    to: str
    term: int
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit: int


@attrs.frozen(kw_only=True)
class AppendResponse:
    """Success: the follower's log matches the leader's up to ``index``.

    Rejection: no match at ``index``; (``hint_index``, ``hint_term``) is the follower's guess of
    the last place the logs may agree (its last entry with a term <= the probe's), so the leader
    skips a whole divergent term per round trip instead of one entry.
    """

    sender: str
    to: str
    term: int
    index: int
    reject: bool = False
    hint_index: int = 0
    hint_term: int = 0
    recovering: int = 0
    """The follower's recovery (``cluster.raft.recovery``), 0 once it is over or if it never began."""
    recovered: int = 0
    """The follower's last recovery that is over (0: none since its store began)."""


@attrs.frozen(kw_only=True)
class Heartbeat:
    sender: str
    to: str
    term: int
    commit: int
    """The leader's commit, capped at what the follower is known to hold."""
    read_seq: int = 0
    """The newest read-index request this heartbeat confirms leadership for (0: none)."""
    recovered: int = 0
    """The follower's recovery the leader holds complete (``cluster.raft.recovery``; 0: none)."""


@attrs.frozen(kw_only=True)
class HeartbeatResponse:
    sender: str
    to: str
    term: int
    read_seq: int = 0
    recovering: int = 0
    """As in ``AppendResponse``."""
    recovered: int = 0
    """As in ``AppendResponse``."""


@attrs.frozen(kw_only=True)
class InstallSnapshot:
    sender: str
    to: str
    term: int
    snapshot: Snapshot


@attrs.frozen(kw_only=True)
class TimeoutNow:
    """The leader hands over: the recipient campaigns at once, without a pre-vote."""

    sender: str
    to: str
    term: int


Message = (
    VoteRequest
    | VoteResponse
    | AppendEntries
    | AppendResponse
    | Heartbeat
    | HeartbeatResponse
    | InstallSnapshot
    | TimeoutNow
)
