"""Replication, commit, durability order, backtracking, snapshots and reads (Raft §5.3-5.4, §7, §8)."""

from __future__ import annotations

from cluster.raft import HardState, Persisted
from cluster.raft.messages import (
    AppendEntries,
    AppendResponse,
    Entry,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    VoteResponse,
)
from pubmesh_testing.raft_sim import Simulation
from tests.cluster.raft.nodes import ack, elect, entries, flush, leader_of, node, of_type, pump


def test_a_leader_commits_only_entries_of_its_own_term_by_counting() -> None:
    leader = leader_of(Persisted(HardState(term=2), None, entries(1, 2)))
    assert leader.term == 3
    assert leader.log.last_index == 3
    ack(leader, "b", 2)
    assert leader.log.committed == 0, "an entry of term 2 is not committed by a term-3 majority count"
    ack(leader, "b", 3)
    assert leader.log.committed == 3, "committing the term-3 entry commits the ones below it"


def test_the_leaders_own_copy_counts_only_once_persisted() -> None:
    leader = leader_of()
    ack(leader, "b", 1)
    index = leader.propose(b"x")
    assert index == 2
    leader.step(AppendResponse(sender="b", to="a", term=1, index=2))
    assert leader.log.committed == 1
    ready = leader.ready()
    assert [e.index for e in ready.must_persist.entries] == [2]
    leader.advance(ready)
    assert leader.log.committed == 2


def test_a_follower_acknowledges_entries_in_the_ready_that_persists_them() -> None:
    follower = node("b")
    follower.step(
        AppendEntries(
            sender="a", to="b", term=1, prev_index=0, prev_term=0, entries=entries(1, 1), commit=1
        )
    )
    ready = follower.ready()
    assert [e.index for e in ready.must_persist.entries] == [1, 2]
    assert ready.must_persist.hard_state == HardState(term=1, vote=None, commit=1)
    (reply,) = of_type(list(ready.then_send), AppendResponse)
    assert reply.index == 2
    assert not reply.reject
    assert [e.index for e in ready.apply] == [1]


def test_a_follower_rejects_a_gap_with_a_hint() -> None:
    follower = node("b", persisted=Persisted(HardState(term=1), None, entries(1, 1)))
    follower.step(
        AppendEntries(
            sender="a", to="b", term=2, prev_index=5, prev_term=2, entries=entries(2, start=6), commit=0
        )
    )
    (reply,) = of_type(flush(follower), AppendResponse)
    assert (reply.reject, reply.index, reply.hint_index, reply.hint_term) == (True, 5, 2, 1)


def test_divergent_tails_are_repaired_in_a_few_round_trips() -> None:
    leader_log = entries(1, 3, 3, 3, 3, 3, 3, 3, 7)
    follower_log = entries(1, 3, 3, 4, 4, 5, 5, 5, 6)
    leader = node("a", persisted=Persisted(HardState(term=7), None, leader_log), pre_vote=False)
    follower = node("b", persisted=Persisted(HardState(term=7), None, follower_log), check_quorum=False)
    elect(leader)
    leader.step(VoteResponse(sender="c", to="a", term=8, granted=True))
    delivered = pump({"a": leader, "b": follower}, flush(leader))
    rejections = [m for m in of_type(delivered, AppendResponse) if m.reject]
    assert len(rejections) <= 2
    assert follower.log.slice(1, 10) == leader.log.slice(1, 10)
    assert follower.log.committed == leader.log.committed == 10


def test_a_late_duplicate_append_does_not_truncate_a_follower() -> None:
    follower = node("b")
    early = AppendEntries(
        sender="a", to="b", term=1, prev_index=0, prev_term=0, entries=entries(1), commit=0
    )
    late = AppendEntries(
        sender="a", to="b", term=1, prev_index=1, prev_term=1, entries=entries(1, start=2), commit=0
    )
    follower.step(late)
    follower.step(early)
    follower.step(late)
    follower.step(early)
    flush(follower)
    assert follower.log.last_index == 2


def test_heartbeats_carry_commit_only_up_to_what_the_follower_holds() -> None:
    leader = leader_of()
    ack(leader, "b", 1)
    leader.propose(b"x")
    flush(leader)
    ack(leader, "b", 2)
    leader.tick()
    beats = {m.to: m for m in of_type(flush(leader), Heartbeat)}
    assert (beats["b"].commit, beats["c"].commit) == (2, 0)


def test_a_lagging_follower_catches_up_from_a_snapshot() -> None:
    sim = Simulation(3, seed=5, compact_every=6)
    sim.wait_until(sim.converged, within=100)
    leader = sim.leader()
    assert leader is not None
    lagging = next(n for n in sim.nodes if n != leader.id)
    sim.isolate(lagging)
    sim.run(1)
    for _ in range(20):
        sim.commit_one(within=50)
    assert leader.log.first_index > sim.nodes[lagging].raft.log.last_index + 1  # type: ignore[union-attr]
    sent: list[Message] = []
    original = sim.network.send

    def spy(message: Message, now: int) -> None:
        sent.append(message)
        original(message, now)

    sim.network.send = spy  # type: ignore[method-assign]
    sim.network.heal_all()
    sim.wait_until(sim.converged, within=100)
    assert any(isinstance(m, InstallSnapshot) and m.to == lagging for m in sent)
    assert all(sim.nodes[lagging].commands.get(i) == d for i, d in sim.acked.items())


def test_a_new_leader_answers_reads_only_after_committing_in_its_term() -> None:
    leader = leader_of()
    assert leader.read_index(b"r1") is None
    assert all(not r.read_states for r in [leader.ready()])
    sent = ack(leader, "b", 1)
    beats = of_type(sent, Heartbeat)
    assert beats
    assert all(b.read_seq == 1 for b in beats)
    leader.step(HeartbeatResponse(sender="c", to="a", term=1, read_seq=1))
    (state,) = leader.ready().read_states
    assert (state.index, state.context) == (1, b"r1")


def test_a_read_needs_a_quorum_of_heartbeat_answers() -> None:
    leader = leader_of()
    ack(leader, "b", 1)
    leader.read_index(b"r")
    leader.step(HeartbeatResponse(sender="b", to="a", term=1, read_seq=0))
    assert not leader.ready().read_states
    leader.step(HeartbeatResponse(sender="b", to="a", term=1, read_seq=1))
    assert leader.ready().read_states


def test_a_cut_off_leader_answers_no_read() -> None:
    sim = Simulation(3, seed=9)
    sim.wait_until(sim.converged, within=100)
    leader = sim.leader()
    assert leader is not None
    sim.isolate(leader.id)
    assert sim.read()
    sim.run(40)
    assert sim.reads_answered == 0
    assert len(sim.reads) == 1


def test_a_single_node_group_commits_and_reads_alone() -> None:
    sim = Simulation(1, seed=1)
    sim.commit_one(within=50)
    assert sim.read()
    assert sim.reads_answered == 1


def test_a_follower_commits_only_what_it_knows_matches_the_leader() -> None:
    follower = node("b", persisted=Persisted(HardState(term=2), None, entries(1, 2, 2)))
    follower.step(
        AppendEntries(sender="a", to="b", term=3, prev_index=1, prev_term=1, entries=(), commit=3)
    )
    flush(follower)
    assert follower.log.committed == 1, "entries 2 and 3 may be a divergent tail the leader lacks"


def test_a_follower_far_behind_is_sent_what_a_link_holds_then_more_as_it_acknowledges() -> None:
    """Appends carry at most ``max_bytes_per_append`` of data (one larger entry alone), and in the
    replicate state no more than ``max_inflight_bytes`` go out unacknowledged."""
    big = 300 * 1024
    log = (*tuple(Entry(i, 1, bytes(big)) for i in range(1, 101)), Entry(101, 1, bytes(3 << 20)))
    leader = leader_of(Persisted(HardState(term=1), None, log))
    config = leader.config
    last = leader.log.last_index

    def appends(messages: list[Message]) -> list[AppendEntries]:
        return [m for m in of_type(messages, AppendEntries) if m.to == "b" and m.entries]

    sent = appends(ack(leader, "b", 1))  # (b matches at 1: replicate from there)
    assert sent
    for append in sent:
        size = sum(len(e.data) for e in append.entries)
        assert size <= config.max_bytes_per_append or len(append.entries) == 1
    in_flight = sum(len(e.data) for a in sent for e in a.entries)
    assert in_flight <= config.max_inflight_bytes + config.max_bytes_per_append
    assert sent[-1].entries[-1].index < last  # (the rest waits)

    # Acknowledgements release the rest; the one entry larger than an append goes alone.
    every = list(sent)
    while every[-1].entries[-1].index < last:
        more = appends(ack(leader, "b", every[-1].entries[-1].index))
        assert more
        every += more
    assert [e.index for a in every for e in a.entries] == list(range(2, last + 1))
    assert [len(a.entries) for a in every if a.entries[-1].index == last] == [1]


def test_a_heartbeat_answer_frees_an_append_that_may_be_lost() -> None:
    log = tuple(Entry(i, 1, bytes(1 << 20)) for i in range(1, 41))
    leader = leader_of(Persisted(HardState(term=1), None, log))
    first = [m for m in of_type(ack(leader, "b", 1), AppendEntries) if m.to == "b"]
    assert first  # (the window is full now: nothing acknowledged)
    assert not [m for m in of_type(flush(leader), AppendEntries) if m.to == "b"]
    beat = HeartbeatResponse(sender="b", to="a", term=leader.term)
    leader.step(beat)  # (the first answer since the window filled: no stall seen yet)
    assert not [m for m in of_type(flush(leader), AppendEntries) if m.to == "b"]
    leader.step(beat)  # (and again with no progress: the oldest append is taken as lost)
    again = [m for m in of_type(flush(leader), AppendEntries) if m.to == "b"]
    assert again
    assert again[0].entries[0].index > first[-1].entries[-1].index
