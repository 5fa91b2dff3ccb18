"""Raft's safety properties, checked over a whole group's live nodes after every step.

Election safety (one leader per term), log matching, leader completeness, state machine safety
(nobody applies or installs something else at an index someone applied), committed entries never
replaced, and at most one uncommitted membership change in a leader's log. The checker sees the
nodes' ``Raft`` objects directly; it is fed by ``pubmesh_testing.raft_sim.Simulation``.
"""

from __future__ import annotations

from cluster.raft import Entry, EntryKind, Raft, Role

__all__ = ["SafetyChecker", "SafetyViolation"]


class SafetyViolation(AssertionError):
    """A Raft safety property failed."""


class SafetyChecker:
    """Raft's safety properties, checked over the whole group after every step."""

    def __init__(self) -> None:
        self.leaders: dict[int, str] = {}
        self.committed: dict[int, tuple[Entry, int]] = {}
        """Every entry seen committed, with the term of the node that first saw it so."""
        self.applied: dict[int, Entry] = {}
        self._checked: dict[str, tuple[Raft, int]] = {}
        self.highest_committed = 0

    def on_apply(self, node: str, entry: Entry) -> None:
        seen = self.applied.setdefault(entry.index, entry)
        if seen != entry:
            raise SafetyViolation(
                f"state machine safety: {node} applied {entry} where {seen} was applied"
            )

    def on_install(self, node: str, commands: dict[int, bytes]) -> None:
        for index, data in commands.items():
            seen = self.applied.get(index)
            if seen is not None and seen.data != data:
                raise SafetyViolation(f"state machine safety: {node} installed {data!r} at {index}")

    def check(self, live: list[Raft]) -> None:
        """Check the live nodes' ``Raft`` states (after every step)."""
        for raft in live:
            if raft.role is Role.LEADER and self.leaders.setdefault(raft.term, raft.id) != raft.id:
                raise SafetyViolation(
                    f"election safety: {self.leaders[raft.term]} and {raft.id} lead {raft.term}"
                )
            self._record_commits(raft)
        for raft in live:
            self._check_committed_kept(raft)
            self._check_one_change_pending(raft)
        for position, a in enumerate(live):
            for b in live[position + 1 :]:
                self._check_log_matching(a, b)

    def _record_commits(self, raft: Raft) -> None:
        """Record newly committed entries, checking them against what others committed there.

        A node's own committed entries cannot change afterwards (its log refuses to overwrite
        them), so each node's log is read once per index, from where the last check stopped.
        """
        log = raft.log
        known, checked = self._checked.get(raft.id, (None, 0))
        start = checked + 1 if known is raft else log.first_index
        for index in range(max(start, log.first_index), log.committed + 1):
            entry = log.slice(index, index)[0]
            seen = self.committed.setdefault(index, (entry, raft.term))
            if seen[0] != entry:
                raise SafetyViolation(
                    f"committed entry {index} replaced: {seen[0]} then {entry} on {raft.id}"
                )
        self._checked[raft.id] = (raft, log.committed)
        self.highest_committed = max(self.highest_committed, log.committed)

    def _check_committed_kept(self, raft: Raft) -> None:
        """A leader's log holds every entry committed in an earlier term (leader completeness).

        Entries up to the leader's own commit were checked as it committed them; beyond that, its
        log must agree with every entry committed under a lower term.
        """
        if raft.role is not Role.LEADER:
            return
        log = raft.log
        for index in range(log.committed + 1, self.highest_committed + 1):
            if index not in self.committed:
                continue  # committed while every node we watched had it compacted: never seen
            entry, term = self.committed[index]
            if raft.term > term and (index > log.last_index or log.slice(index, index)[0] != entry):
                raise SafetyViolation(f"leader completeness: {raft.id} (term {raft.term}) lacks {entry}")

    @staticmethod
    def _check_one_change_pending(raft: Raft) -> None:
        """A leader's log holds at most one uncommitted membership change."""
        if raft.role is not Role.LEADER:
            return
        log = raft.log
        tail = log.slice(log.committed + 1, log.last_index) if log.last_index > log.committed else ()
        changes = [entry.index for entry in tail if entry.kind is EntryKind.CONFIG]
        if len(changes) > 1:
            raise SafetyViolation(f"{raft.id} (term {raft.term}) has uncommitted changes {changes}")

    @staticmethod
    def _check_log_matching(a: Raft, b: Raft) -> None:
        lo = max(a.log.first_index, b.log.first_index)
        hi = min(a.log.last_index, b.log.last_index)
        for index in range(hi, lo - 1, -1):
            if a.log.term(index) == b.log.term(index):
                if a.log.slice(lo, index) != b.log.slice(lo, index):
                    raise SafetyViolation(
                        f"log matching: {a.id} and {b.id} agree at {index} but differ before"
                    )
                return
