"""One node's Raft log in memory: a snapshot, the entries after it, and how far they are durable.

Indexes start at 1; index 0 (or the snapshot's index) is the empty prefix every log shares. The
log keeps every entry after its snapshot in memory: the caller compacts it (``compact``) once the
state machine has a snapshot, which bounds it.

Three marks move forward along it: ``persisted`` (entries up to here are on stable storage),
``committed`` (a majority holds entries up to here) and ``applied`` (the state machine has them).
``applied <= committed``; a truncation of an uncommitted conflicting tail pulls ``persisted`` back,
because what storage holds past that point is no longer the log.

The log also knows which voters are in force (``voters``): those of its last membership change
entry, whether committed or not (see ``cluster.raft.membership``), kept in step with every append,
truncation, restore and compaction.
"""

from __future__ import annotations

from cluster.raft.errors import CompactionError
from cluster.raft.membership import VoterHistory
from cluster.raft.messages import Entry, Snapshot

__all__ = ["RaftLog"]


class RaftLog:
    def __init__(self, snapshot: Snapshot, entries: tuple[Entry, ...] = (), committed: int = 0) -> None:
        self.snapshot = snapshot
        self._entries: list[Entry] = list(entries)
        if entries and entries[0].index != snapshot.index + 1:
            raise ValueError("entries must follow the snapshot")
        self.committed = max(committed, snapshot.index)
        self.applied = snapshot.index
        self.persisted = self.last_index
        self.members = VoterHistory(snapshot.index, snapshot.voters)
        self.members.appended(entries)

    # -- reading -------------------------------------------------------------------------

    @property
    def first_index(self) -> int:
        """The first index the log still holds an entry for."""
        return self.snapshot.index + 1

    @property
    def last_index(self) -> int:
        return self._entries[-1].index if self._entries else self.snapshot.index

    @property
    def voters(self) -> frozenset[str]:
        """The voters in force: those of the last membership change in the log."""
        return self.members.voters

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.snapshot.term

    def term(self, index: int) -> int | None:
        """The term of the entry at ``index``; None if compacted away or beyond the end."""
        if index == self.snapshot.index:
            return self.snapshot.term
        if index < self.snapshot.index or index > self.last_index:
            return None
        return self._entries[index - self.snapshot.index - 1].term

    def matches(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def slice(self, lo: int, hi: int) -> tuple[Entry, ...]:
        """Entries ``lo`` to ``hi`` inclusive (``lo`` must not be compacted)."""
        if lo <= self.snapshot.index:
            raise CompactionError(f"index {lo} is compacted (snapshot at {self.snapshot.index})")
        offset = self.snapshot.index + 1
        return tuple(self._entries[lo - offset : hi - offset + 1])

    def unpersisted(self) -> tuple[Entry, ...]:
        return self.slice(self.persisted + 1, self.last_index)

    def unapplied(self) -> tuple[Entry, ...]:
        """Committed entries the state machine has not been given yet."""
        return self.slice(self.applied + 1, self.committed)

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Whether a log ending at (``last_index``, ``last_term``) is at least as up to date (§5.4.1)."""
        return (last_term, last_index) >= (self.last_term, self.last_index)

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The last (index, term) at or below ``index`` whose term is <= ``term``.

        An index we cannot see (compacted) is returned with term 0: it may match.
        """
        index = min(index, self.last_index)
        while index > 0:
            ours = self.term(index)
            if ours is None:
                return index, 0
            if ours <= term:
                return index, ours
            index -= 1
        return 0, 0

    # -- changing ------------------------------------------------------------------------

    def append(self, entries: tuple[Entry, ...]) -> None:
        """Put ``entries`` after the entry before the first of them, dropping what follows it.

        Only a real conflict truncates: the caller checks that first (``maybe_append``).
        """
        if not entries:
            return
        first = entries[0].index
        if first <= self.committed:
            raise ValueError(f"entry {first} would overwrite committed entry (commit {self.committed})")
        del self._entries[first - self.snapshot.index - 1 :]
        self._entries.extend(entries)
        self.persisted = min(self.persisted, first - 1)
        self.members.appended(entries)

    def maybe_append(self, prev_index: int, prev_term: int, entries: tuple[Entry, ...]) -> int | None:
        """Follower side of AppendEntries: the index the logs now agree up to, or None if no match.

        Entries already present with the same term are kept (a late duplicate must not shorten
        the log); from the first conflicting or missing entry on, the leader's entries win.
        """
        if not self.matches(prev_index, prev_term):
            return None
        for position, entry in enumerate(entries):
            ours = self.term(entry.index)
            if ours is None and entry.index <= self.snapshot.index:
                continue
            if ours != entry.term:
                self.append(entries[position:])
                break
        return prev_index + len(entries)

    def commit_to(self, index: int) -> bool:
        """Raise the commit mark (never lower it, never past the log's end)."""
        index = min(index, self.last_index)
        if index > self.committed:
            self.committed = index
            return True
        return False

    def persisted_to(self, index: int, term: int) -> None:
        """Storage now durably holds the log up to (``index``, ``term``), if that is still ours."""
        if index > self.persisted and self.matches(index, term):
            self.persisted = index

    def applied_to(self, index: int) -> None:
        if index > self.committed:
            raise ValueError(f"applied {index} beyond commit {self.committed}")
        self.applied = max(self.applied, index)

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the log with ``snapshot`` (installed from the leader): everything is committed."""
        self.snapshot = snapshot
        self._entries = []
        self.committed = self.applied = self.persisted = snapshot.index
        self.members = VoterHistory(snapshot.index, snapshot.voters)

    def compact(self, index: int, data: bytes) -> Snapshot:
        """Drop the entries up to ``index`` (applied), keeping a snapshot of the state there
        (and of the voters in force there)."""
        if index > self.applied or index > self.persisted:
            raise CompactionError(f"index {index} not applied yet (applied {self.applied})")
        term = self.term(index)
        if term is None or index <= self.snapshot.index:
            raise CompactionError(f"index {index} already compacted (snapshot at {self.snapshot.index})")
        voters = self.members.at(index)
        del self._entries[: index - self.snapshot.index]
        self.members.rebase(index, voters)
        self.snapshot = Snapshot(index=index, term=term, voters=voters, data=data)
        return self.snapshot
