"""The log alone: matching, conflicts, up-to-dateness, compaction (etcd's log_test.go behaviours)."""

from __future__ import annotations

import pytest

from cluster.raft import CompactionError, Snapshot
from cluster.raft.log import RaftLog
from tests.cluster.raft.nodes import entries

EMPTY = Snapshot(0, 0, frozenset("abc"))


def log_of(*terms: int) -> RaftLog:
    return RaftLog(EMPTY, entries(*terms))


def test_terms_and_bounds() -> None:
    log = log_of(1, 1, 2)
    assert (log.first_index, log.last_index, log.last_term) == (1, 3, 2)
    assert [log.term(i) for i in range(5)] == [0, 1, 1, 2, None]


def test_up_to_date_compares_last_term_then_index() -> None:
    log = log_of(1, 2, 2)
    assert log.is_up_to_date(3, 2)
    assert log.is_up_to_date(1, 3)
    assert not log.is_up_to_date(2, 2)
    assert not log.is_up_to_date(9, 1)


def test_append_after_a_mismatch_is_refused() -> None:
    log = log_of(1, 1)
    assert log.maybe_append(2, 2, entries(2, start=3)) is None
    assert log.maybe_append(3, 1, entries(2, start=4)) is None
    assert log.last_index == 2


def test_a_late_duplicate_does_not_shorten_the_log() -> None:
    log = log_of(1, 1, 1, 1)
    assert log.maybe_append(1, 1, entries(1, start=2)) == 2
    assert log.last_index == 4


def test_a_conflict_truncates_from_the_first_difference() -> None:
    log = log_of(1, 1, 1, 1)
    log.persisted = 4
    assert log.maybe_append(1, 1, entries(1, 2, start=2)) == 3
    assert [log.term(i) for i in range(1, 5)] == [1, 1, 2, None]
    assert log.persisted == 2, "what storage holds past the conflict is no longer the log"


def test_committed_entries_are_never_overwritten() -> None:
    log = log_of(1, 1)
    log.commit_to(2)
    with pytest.raises(ValueError, match="committed"):
        log.append(entries(2, start=2))


def test_find_conflict_by_term_skips_a_higher_term_tail() -> None:
    log = log_of(1, 3, 3, 4, 4, 5, 5, 5, 6)
    assert log.find_conflict_by_term(8, 3) == (3, 3)
    assert log.find_conflict_by_term(9, 1) == (1, 1)
    assert log.find_conflict_by_term(20, 9) == (9, 6)
    assert log.find_conflict_by_term(9, 0) == (0, 0)


def test_compaction_keeps_the_tail_and_refuses_unapplied_or_compacted_indexes() -> None:
    log = log_of(1, 1, 2, 2)
    log.commit_to(4)
    log.applied_to(3)
    with pytest.raises(CompactionError):
        log.compact(4, b"")
    snapshot = log.compact(2, b"state")
    assert (snapshot.index, snapshot.term) == (2, 1)
    assert (log.first_index, log.term(2), log.term(1)) == (3, 1, None)
    with pytest.raises(CompactionError):
        log.compact(2, b"")
    with pytest.raises(CompactionError):
        log.slice(2, 3)
    assert log.find_conflict_by_term(1, 1) == (1, 0), "a compacted index may match: term unknown"


def test_restore_replaces_everything() -> None:
    log = log_of(1, 1, 2)
    log.restore(Snapshot(10, 3, EMPTY.voters, b"x"))
    assert (log.last_index, log.last_term, log.committed, log.applied) == (10, 3, 10, 10)
    assert log.unapplied() == ()
