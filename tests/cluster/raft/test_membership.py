"""Membership changes one voter at a time (Raft dissertation §4.1; etcd's add/remove node behaviours)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.raft import (
    AddVoter,
    ChangeEntry,
    ChangePending,
    EntryKind,
    HardState,
    InvalidChange,
    LeadershipTransferring,
    NotLeader,
    Persisted,
    Raft,
    RemoveVoter,
    Role,
    Snapshot,
    UnknownPeer,
)
from cluster.raft.log import RaftLog
from cluster.raft.messages import (
    AppendEntries,
    AppendResponse,
    Entry,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from pubmesh_testing.raft_sim import Simulation
from tests.cluster.raft.nodes import ack, entries, flush, leader_of, node, of_type, ticks

ABC = frozenset("abc")


def change_entry(index: int, term: int, change: AddVoter | RemoveVoter, voters: str) -> Entry:
    return Entry(index, term, ChangeEntry(change, frozenset(voters)).encode(), EntryKind.CONFIG)


def settled_leader(voters: tuple[str, ...] = ("a", "b", "c")) -> Raft:
    """Leader "a" whose first entry (index 1) is committed and held by every voter, so it may
    change membership (it has heard from them all: none of them is recovering)."""
    leader = leader_of(voters=voters)
    for voter in voters[1:]:
        ack(leader, voter, 1)
    assert leader.log.committed == 1
    return leader


def alone() -> Raft:
    """A single-voter group's leader, its first entry committed."""
    raft = node("a", voters=("a",))
    ticks(raft, 20)
    flush(raft)
    assert raft.role is Role.LEADER
    assert raft.log.committed == 1
    return raft


def test_an_added_voter_counts_at_once_and_is_sent_the_log() -> None:
    leader = settled_leader()
    index = leader.propose_change(AddVoter("d"))
    assert index == 2
    assert leader.voters == {"a", "b", "c", "d"}
    assert "d" in leader.progress
    sent = flush(leader)
    assert any(isinstance(m, AppendEntries) and m.to == "d" for m in sent)
    ack(leader, "b", 2)
    assert leader.log.committed == 1, "two of four voters are no majority"
    ack(leader, "d", 2)
    assert leader.log.committed == 2


def test_change_entries_reach_the_host_as_config_entries() -> None:
    leader = settled_leader()
    leader.propose_change(AddVoter("d"))
    flush(leader)
    ack(leader, "b", 2)
    leader.step(AppendResponse(sender="c", to="a", term=leader.term, index=2))
    (entry,) = leader.ready().apply
    assert entry.kind is EntryKind.CONFIG
    assert ChangeEntry.decode(entry.data) == ChangeEntry(AddVoter("d"), frozenset("abcd"))


def test_one_change_at_a_time() -> None:
    leader = settled_leader()
    assert leader.propose_change(AddVoter("d")) == 2
    assert leader.propose_change(RemoveVoter("c")) == ChangePending(2)
    flush(leader)
    ack(leader, "b", 2)
    ack(leader, "c", 2)
    assert leader.propose_change(RemoveVoter("c")) == 3
    assert leader.voters == {"a", "b", "d"}


def test_a_new_leader_changes_nothing_before_an_entry_of_its_term_commits() -> None:
    leader = leader_of()
    assert leader.propose_change(AddVoter("d")) == ChangePending(1)
    ack(leader, "b", 1)
    ack(leader, "c", 1)
    assert leader.propose_change(AddVoter("d")) == 2


def test_only_the_leader_takes_changes_and_senseless_ones_raise() -> None:
    assert node("b").propose_change(AddVoter("d")) == NotLeader(None)
    leader = settled_leader()
    with pytest.raises(InvalidChange):
        leader.propose_change(AddVoter("b"))
    with pytest.raises(InvalidChange):
        leader.propose_change(RemoveVoter("z"))
    with pytest.raises(InvalidChange):
        alone().propose_change(RemoveVoter("a"))


def test_a_removal_commits_what_the_smaller_majority_holds() -> None:
    leader = settled_leader(("a", "b"))
    assert leader.propose(b"x") == 2
    flush(leader)
    assert leader.log.committed == 1, "b has not acknowledged entry 2"
    assert leader.propose_change(RemoveVoter("b")) == 3
    assert leader.voters == {"a"}
    assert set(leader.progress) == {"a"}
    flush(leader)
    assert leader.log.committed == 3


def test_a_removed_voter_is_no_longer_replicated_to_or_heard() -> None:
    leader = settled_leader()
    leader.propose_change(RemoveVoter("c"))
    flush(leader)
    ack(leader, "b", 2)
    assert leader.log.committed == 2
    leader.propose(b"x")
    leader.tick()
    assert all(m.to != "c" for m in flush(leader))
    ack(leader, "c", 3)
    assert "c" not in leader.progress


def test_check_quorum_counts_an_added_voter() -> None:
    raft = settled_leader()
    assert raft.propose_change(AddVoter("d")) == 2
    flush(raft)
    for _ in range(2 * raft.config.election_ticks):  # (a whole check-quorum round after c's ack)
        raft.tick()
        raft.step(HeartbeatResponse(sender="b", to="a", term=raft.term))
    assert (raft.role, raft.leader) == (Role.FOLLOWER, None), "c and d never answered: no quorum"


def test_a_read_needs_the_added_voter() -> None:
    raft = settled_leader()
    raft.propose_change(AddVoter("d"))
    flush(raft)
    raft.read_index(b"r")
    assert not raft.ready().read_states
    raft.step(HeartbeatResponse(sender="b", to="a", term=raft.term, read_seq=1))
    assert not raft.ready().read_states, "a and b are no majority of four"
    raft.step(HeartbeatResponse(sender="d", to="a", term=raft.term, read_seq=1))
    assert [s.context for s in raft.ready().read_states] == [b"r"]


def test_a_removed_leader_leads_until_the_change_commits_then_hands_over() -> None:
    leader = settled_leader()
    assert leader.propose_change(RemoveVoter("a")) == 2
    flush(leader)
    assert leader.role is Role.LEADER
    ack(leader, "b", 2)
    assert leader.log.committed == 1, "its own copy no longer counts"
    leader.step(AppendResponse(sender="c", to="a", term=leader.term, index=2))
    assert (leader.log.committed, leader.role) == (2, Role.FOLLOWER)
    handover = of_type(flush(leader), TimeoutNow)
    assert [m.to for m in handover] == ["b"]
    ticks(leader, 10 * leader.config.election_ticks)
    assert (leader.role, leader.term) == (Role.FOLLOWER, 1)
    assert not of_type(flush(leader), VoteRequest), "a removed node never campaigns"


def test_a_node_outside_the_voters_does_not_campaign_even_when_told_to() -> None:
    joiner = node("d")
    ticks(joiner, 100)
    joiner.step(TimeoutNow(sender="a", to="d", term=1))
    assert joiner.role is Role.FOLLOWER
    assert not of_type(flush(joiner), VoteRequest)


def test_a_non_voters_lease_lapses_when_its_leader_goes_quiet() -> None:
    joiner = node("d")
    joiner.step(Heartbeat(sender="a", to="d", term=1, commit=0))
    ticks(joiner, 3 * joiner.config.election_ticks)
    joiner.step(VoteRequest(sender="b", to="d", term=2, last_index=0, last_term=0))
    (vote,) = of_type(flush(joiner), VoteResponse)
    assert vote.granted, "d may be the vote a new leader needs"


def test_requests_are_heard_whether_or_not_the_sender_is_a_voter_we_know() -> None:
    follower = node("b")
    follower.step(VoteRequest(sender="d", to="b", term=5, last_index=9, last_term=4))
    (vote,) = of_type(flush(follower), VoteResponse)
    assert vote.granted, "d may be a voter added by a change b has not received yet"
    follower.step(
        AppendEntries(
            sender="d", to="b", term=6, prev_index=0, prev_term=0, entries=entries(6), commit=0
        )
    )
    assert (follower.term, follower.leader, follower.log.last_index) == (6, "d", 1)


def test_a_removed_node_neither_deposes_the_leader_nor_disrupts_its_followers() -> None:
    leader = settled_leader()
    leader.propose_change(RemoveVoter("c"))
    flush(leader)
    ack(leader, "b", 2)
    leader.step(AppendResponse(sender="c", to="a", term=leader.term + 5, index=0))
    assert (leader.role, leader.term) == (Role.LEADER, 1)
    follower = node("b")
    follower.step(Heartbeat(sender="a", to="b", term=1, commit=0))
    follower.step(VoteRequest(sender="c", to="b", term=2, last_index=9, last_term=1, pre=True))
    assert not of_type(flush(follower), VoteResponse), "b heard its leader: its lease holds"


def test_a_joiner_takes_the_log_and_the_change_that_adds_it() -> None:
    joiner = node("d")
    log = (Entry(1, 1, kind=EntryKind.NOOP), change_entry(2, 1, AddVoter("d"), "abcd"))
    joiner.step(
        AppendEntries(sender="a", to="d", term=1, prev_index=0, prev_term=0, entries=log, commit=2)
    )
    flush(joiner)
    assert joiner.voters == {"a", "b", "c", "d"}
    assert joiner.log.committed == 2


def test_truncating_an_uncommitted_change_restores_the_voters_before_it() -> None:
    follower = node("b")
    log = (Entry(1, 1, kind=EntryKind.NOOP), change_entry(2, 1, RemoveVoter("c"), "ab"))
    follower.step(
        AppendEntries(sender="a", to="b", term=1, prev_index=0, prev_term=0, entries=log, commit=1)
    )
    assert follower.voters == {"a", "b"}
    follower.step(
        AppendEntries(
            sender="c", to="b", term=2, prev_index=1, prev_term=1, entries=entries(2, start=2), commit=1
        )
    )
    assert follower.log.term(2) == 2
    assert follower.voters == ABC


def test_a_snapshot_records_the_voters_in_force_at_its_index() -> None:
    log = RaftLog(
        Snapshot(0, 0, ABC),
        (*entries(1, 1), change_entry(3, 1, AddVoter("d"), "abcd"), *entries(1, start=4)),
        committed=4,
    )
    log.applied_to(4)
    assert log.voters == {"a", "b", "c", "d"}
    assert log.compact(2, b"").voters == ABC
    assert log.voters == {"a", "b", "c", "d"}, "the change after the snapshot is still in force"
    assert log.compact(4, b"").voters == {"a", "b", "c", "d"}
    assert log.voters == {"a", "b", "c", "d"}


def test_installing_a_snapshot_adopts_its_voters() -> None:
    follower = node("b")
    snapshot = Snapshot(10, 3, frozenset("abd"), b"state")
    follower.step(InstallSnapshot(sender="a", to="b", term=3, snapshot=snapshot))
    assert follower.voters == {"a", "b", "d"}
    assert flush(follower)


@pytest.mark.parametrize("compacted", [False, True])
def test_a_restart_reproduces_the_voters(compacted: bool) -> None:
    log = (*entries(1, 1), change_entry(3, 1, RemoveVoter("c"), "ab"), *entries(1, start=4))
    snapshot = Snapshot(3, 1, frozenset("ab")) if compacted else None
    tail = log[3:] if compacted else log
    raft = node("b", persisted=Persisted(HardState(1, "a", 4), snapshot, tail))
    assert raft.voters == {"a", "b"}


def test_transfer_only_to_a_voter_in_force() -> None:
    leader = settled_leader()
    with pytest.raises(UnknownPeer):
        leader.transfer_leader("d")
    leader.propose_change(RemoveVoter("c"))
    with pytest.raises(UnknownPeer):
        leader.transfer_leader("c")


def test_no_change_while_leadership_is_handed_over() -> None:
    leader = settled_leader()
    leader.transfer_leader("c")
    assert leader.propose_change(RemoveVoter("b")) == LeadershipTransferring("c")


def test_a_dead_voter_is_replaced_and_its_replacement_catches_up() -> None:
    sim = Simulation(3, seed=11, compact_every=5, spares=1)
    sim.wait_until(sim.converged, within=100)
    for _ in range(12):
        sim.commit_one(within=50)
    leader = sim.leader()
    assert leader is not None
    dead = next(n for n in ("n1", "n2", "n3") if n != leader.id)
    sim.crash(dead)
    assert sim.change(dead) is not None
    sim.commit_one(within=50)
    assert sim.change("n4") is not None
    sim.commit_one(within=100)
    sim.wait_until(sim.converged, within=200)
    leader = sim.leader()
    assert leader is not None
    assert leader.voters == {"n1", "n2", "n3", "n4"} - {dead}
    assert all(sim.nodes["n4"].commands.get(i) == d for i, d in sim.acked.items())
    survivor = next(n for n in leader.voters if n not in (leader.id, "n4"))
    sim.crash(survivor)
    sim.commit_one(within=200)
    assert "n4" in leader.voters, "the replacement is counted: two of three still commit"


@given(
    st.sampled_from([AddVoter, RemoveVoter]),
    st.text(min_size=1, max_size=8),
    st.frozensets(st.text(max_size=8), max_size=6),
)
def test_change_entries_round_trip(
    kind: type[AddVoter] | type[RemoveVoter], node_id: str, voters: frozenset[str]
) -> None:
    record = ChangeEntry(kind(node_id), voters)
    assert ChangeEntry.decode(record.encode()) == record
