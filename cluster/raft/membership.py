"""Membership changes one voter at a time, and which voters are in force at each log index.

A group's voters change by single-server changes (add one voter, or remove one), as in the Raft
dissertation §4.1; there is no joint consensus. Any majority of a voter set and any majority of
the same set with one voter added or removed share a voter, so the two sets can never elect two
leaders in one term nor commit two different entries at one index, provided the rules below hold.

**The change is a log entry.** A change is proposed (``Raft.propose_change``) as an entry of kind
``EntryKind.CONFIG`` whose data is a ``ChangeEntry``: the change, and the whole voter set it makes.
Carrying the whole set makes every change entry self-contained: the voters at any index are read
from the log alone, whatever voters a node was started with.

**In force from append, not from commit.** A node uses the voter set of the last change entry in
its log, committed or not (before any, its snapshot's voters; before any snapshot, the founding
``RaftConfig.voters``). This is the dissertation's rule rather than etcd's (which switches when the
entry is applied): the new set must already decide the commit of the very entry that introduces
it, and a node's elections, votes and commits never depend on how far its state machine has got.
If a conflicting tail holding a change is truncated, the node falls back to the set before it.

**Safety rules**, enforced by the leader (``Leadership.propose_change``):

1. at most one change is uncommitted at a time: a second is refused (``ChangePending``) until the
   first commits, so a log never holds two uncommitted changes (two steps could give disjoint
   majorities);
2. a new leader proposes no change before an entry of its own term commits (``ChangePending`` for
   its first entry): otherwise a change from a deposed leader's term that this leader never saw
   could commit beside one of its own (the flaw in the dissertation's original single-server
   algorithm, corrected on raft-dev in 2015);
3. the last voter cannot be removed (``InvalidChange``), nor a voter added twice or a non-voter
   removed.

**What each party sees.** The host gets change entries in ``Ready.apply`` like any committed entry
and must not give them to its state machine as commands; ``ChangeEntry.decode(entry.data)`` says
what changed (for instance to open links to a new voter, or to retire a replica whose node was
removed). A leader removed by a change keeps leading (without counting itself) until the change
commits, then steps down (handing over to a caught-up voter); a node outside its voter set does
not campaign, unless only an uncommitted change removed it (its log may be the only complete one:
see ``Raft._promotable``). Whom a node hears does not depend on its voter set (see
``cluster.raft.core``). Snapshots record the voters in force at their index (``VoterHistory.at``),
so a restored or restarted node reproduces the configuration from what it persisted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import attrs

from cluster.raft.errors import InvalidChange
from cluster.raft.messages import Entry, EntryKind

__all__ = ["AddVoter", "ChangeEntry", "ConfigChange", "RemoveVoter", "VoterHistory", "apply_change"]


@attrs.frozen
class AddVoter:
    """Make ``node`` a voter. It should first be started (as a non-voter) so it can catch up."""

    node: str


@attrs.frozen
class RemoveVoter:
    """Stop counting ``node`` as a voter; the leader stops replicating to it."""

    node: str


ConfigChange = AddVoter | RemoveVoter


def apply_change(voters: frozenset[str], change: ConfigChange) -> frozenset[str]:
    """The voter set ``change`` makes from ``voters``; ``InvalidChange`` if it makes no sense."""
    if isinstance(change, AddVoter):
        if change.node in voters:
            raise InvalidChange(f"{change.node!r} is already a voter")
        return voters | {change.node}
    if change.node not in voters:
        raise InvalidChange(f"{change.node!r} is not a voter")
    if voters == {change.node}:
        raise InvalidChange(f"{change.node!r} is the last voter")
    return voters - {change.node}


@attrs.frozen
class ChangeEntry:
    """The data of a ``CONFIG`` entry: the change, and the voter set in force from its index on."""

    change: ConfigChange
    voters: frozenset[str]

    def encode(self) -> bytes:
        op = "add" if isinstance(self.change, AddVoter) else "remove"
        record = {"op": op, "node": self.change.node, "voters": sorted(self.voters)}
        return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> ChangeEntry:
        """The change ``encode`` wrote; ``ValueError`` for anything else."""
        try:
            record = json.loads(data)
            op, node, voters = record["op"], record["node"], record["voters"]
        except (ValueError, TypeError, KeyError) as error:
            raise ValueError(f"not a membership change: {data[:64]!r}") from error
        if op not in ("add", "remove") or not isinstance(node, str) or not isinstance(voters, list):
            raise ValueError(f"not a membership change: {data[:64]!r}")
        if not all(isinstance(voter, str) for voter in voters):
            raise ValueError(f"voters must be names: {data[:64]!r}")
        change: ConfigChange = AddVoter(node) if op == "add" else RemoveVoter(node)
        return cls(change, frozenset(voters))


class VoterHistory:
    """The voter sets along one log: a base (at the snapshot) and each change entry after it."""

    def __init__(self, base_index: int, base: frozenset[str]) -> None:
        self.base_index = base_index
        self.base = base
        self._changes: list[tuple[int, frozenset[str]]] = []

    @property
    def voters(self) -> frozenset[str]:
        """The voters in force: those of the last change in the log."""
        return self._changes[-1][1] if self._changes else self.base

    @property
    def last_change(self) -> int:
        """The index of the last change entry in the log (the snapshot's index if none)."""
        return self._changes[-1][0] if self._changes else self.base_index

    def at(self, index: int) -> frozenset[str]:
        """The voters in force at ``index`` (which must not be below the base)."""
        voters = self.base
        for change_index, changed in self._changes:
            if change_index > index:
                break
            voters = changed
        return voters

    def appended(self, entries: Iterable[Entry]) -> None:
        """``entries`` replaced the log from the first of them on."""
        first = True
        for entry in entries:
            if first:
                self._changes = [c for c in self._changes if c[0] < entry.index]
                first = False
            if entry.kind is EntryKind.CONFIG:
                self._changes.append((entry.index, ChangeEntry.decode(entry.data).voters))

    def rebase(self, index: int, voters: frozenset[str]) -> None:
        """The log now starts after a snapshot at ``index`` taken under ``voters``."""
        self._changes = [c for c in self._changes if c[0] > index]
        self.base_index = index
        self.base = voters
