"""Elections: timeouts, votes, pre-vote, check-quorum and leadership transfer (Raft §5.2, §9.6)."""

from __future__ import annotations

import attrs
import pytest

from cluster.raft import HardState, LeadershipTransferring, NotLeader, Persisted, Role, UnknownPeer
from cluster.raft.messages import AppendEntries, Heartbeat, VoteRequest, VoteResponse
from pubmesh_testing.raft_sim import Simulation
from tests.cluster.raft.nodes import elect, entries, flush, node, of_type, take


def vote_request(
    to: str, term: int, *, last_index: int = 0, last_term: int = 0, **kw: bool
) -> VoteRequest:
    return VoteRequest(sender="b", to=to, term=term, last_index=last_index, last_term=last_term, **kw)


def test_a_node_starts_as_a_follower_of_nobody() -> None:
    raft = node()
    assert (raft.role, raft.term, raft.leader, raft.vote) == (Role.FOLLOWER, 0, None, None)


def test_election_timeouts_are_randomized_over_one_to_two_election_timeouts() -> None:
    fired = set()
    for seed in range(60):
        raft = node(seed=seed)
        for tick in range(1, 21):
            raft.tick()
            if raft.role is not Role.FOLLOWER:
                fired.add(tick)
                break
    assert fired <= set(range(10, 20))
    assert len(fired) >= 5, "timeouts must spread so one node usually fires first"


def test_without_pre_vote_a_timeout_starts_an_election_and_persists_the_vote_first() -> None:
    raft = node(pre_vote=False)
    for _ in range(20):
        raft.tick()
        if raft.role is Role.CANDIDATE:
            break
    ready = raft.ready()
    assert ready.must_persist.hard_state == HardState(term=1, vote="a", commit=0)
    requests = of_type(list(ready.then_send), VoteRequest)
    assert sorted(r.to for r in requests) == ["b", "c"]
    assert all(r.term == 1 and not r.pre for r in requests)


def test_pre_vote_changes_no_term_and_no_vote() -> None:
    raft = node()
    requests = of_type(elect(raft), VoteRequest)
    assert (raft.role, raft.term, raft.vote) == (Role.PRE_CANDIDATE, 0, None)
    assert all(r.pre and r.term == 1 for r in requests)
    raft.step(VoteResponse(sender="b", to="a", term=1, granted=True, pre=True))
    assert (raft.role, raft.term, raft.vote) == (Role.CANDIDATE, 1, "a")
    raft.step(VoteResponse(sender="c", to="a", term=1, granted=True))
    assert raft.role is Role.LEADER
    sent = flush(raft)
    appends = of_type(sent, AppendEntries)
    assert appends
    assert all(a.entries[-1].term == 1 for a in appends), "a new leader appends an entry of its term"


def test_a_candidate_rejected_by_a_majority_steps_back() -> None:
    raft = node(pre_vote=False)
    elect(raft)
    raft.step(VoteResponse(sender="b", to="a", term=1, granted=False))
    raft.step(VoteResponse(sender="c", to="a", term=1, granted=False))
    assert (raft.role, raft.term) == (Role.FOLLOWER, 1)


def test_one_vote_per_term() -> None:
    raft = node(check_quorum=False)
    raft.step(vote_request("a", 1))
    granted = of_type(flush(raft), VoteResponse)
    assert granted[0].granted
    assert raft.vote == "b"
    raft.step(VoteRequest(sender="c", to="a", term=1, last_index=5, last_term=1))
    refused = of_type(flush(raft), VoteResponse)
    assert not refused[0].granted
    assert raft.vote == "b"
    raft.step(vote_request("a", 1))
    assert of_type(flush(raft), VoteResponse)[0].granted, "the same candidate may ask again"


def test_no_vote_for_a_less_up_to_date_log() -> None:
    persisted = Persisted(HardState(term=2), None, entries(1, 2))
    raft = node(persisted=persisted, check_quorum=False)
    for last_index, last_term in ((5, 1), (1, 2)):
        raft.step(vote_request("a", 3, last_index=last_index, last_term=last_term))
        assert not of_type(flush(raft), VoteResponse)[0].granted
    raft.step(vote_request("a", 3, last_index=2, last_term=2))
    assert of_type(flush(raft), VoteResponse)[0].granted


def test_a_higher_term_is_adopted_and_a_lower_one_answered_with_ours() -> None:
    raft = node(pre_vote=False)
    elect(raft)
    raft.step(Heartbeat(sender="c", to="a", term=5, commit=0))
    assert (raft.role, raft.term, raft.leader, raft.vote) == (Role.FOLLOWER, 5, "c", None)
    flush(raft)
    raft.step(Heartbeat(sender="b", to="a", term=4, commit=0))
    (reply,) = flush(raft)
    assert reply.term == 5
    assert reply.to == "b"
    assert raft.leader == "c"


def test_pre_vote_is_granted_without_changing_anything_but_refused_from_a_stale_term() -> None:
    raft = node(persisted=Persisted(HardState(term=3, vote="c"), None, ()), check_quorum=False)
    raft.step(vote_request("a", 4, pre=True))
    (granted,) = of_type(flush(raft), VoteResponse)
    assert granted.granted
    assert granted.term == 4
    assert (raft.term, raft.vote) == (3, "c")
    raft.step(vote_request("a", 3, pre=True))
    (refused,) = of_type(flush(raft), VoteResponse)
    assert not refused.granted
    assert refused.term == 3


def test_a_follower_in_its_leaders_lease_ignores_vote_requests() -> None:
    raft = node()
    raft.step(Heartbeat(sender="c", to="a", term=1, commit=0))
    flush(raft)
    raft.step(vote_request("a", 2))
    assert flush(raft) == []
    assert raft.term == 1
    raft.step(vote_request("a", 2, transfer=True))
    assert of_type(flush(raft), VoteResponse)[0].granted


@pytest.mark.parametrize("size", [3, 5])
def test_a_group_elects_one_leader(size: int) -> None:
    sim = Simulation(size, seed=size)
    sim.wait_until(sim.converged, within=100)
    assert sum(n.raft is not None and n.raft.role is Role.LEADER for n in sim.nodes.values()) == 1


def test_pre_vote_stops_a_rejoining_node_from_deposing_the_leader() -> None:
    sim = Simulation(3, seed=7)
    sim.wait_until(sim.converged, within=100)
    leader = sim.leader()
    assert leader is not None
    follower = next(n for n in sim.nodes if n != leader.id)
    sim.isolate(follower)
    sim.run(100)
    sim.network.heal_all()
    sim.run(30)
    rejoined = sim.nodes[follower].raft
    assert rejoined is not None
    assert sim.leader() is leader
    assert leader.term == rejoined.term == 1


def test_without_pre_vote_a_rejoining_node_does_depose_the_leader() -> None:
    sim = Simulation(3, seed=7, pre_vote=False, check_quorum=False)
    sim.wait_until(sim.converged, within=100)
    leader = sim.leader()
    assert leader is not None
    follower = next(n for n in sim.nodes if n != leader.id)
    sim.isolate(follower)
    sim.run(100)
    sim.network.heal_all()
    sim.run(30)
    assert leader.term > 1, "the test above must be able to fail"


def test_a_leader_cut_off_from_the_majority_steps_down_and_acknowledges_nothing() -> None:
    sim = Simulation(5, seed=3)
    sim.wait_until(sim.converged, within=100)
    leader = sim.leader()
    assert leader is not None
    sim.isolate(leader.id)
    index = leader.propose(b"lost")
    assert isinstance(index, int)
    sim.settle()
    sim.wait_until(lambda: leader.role is not Role.LEADER, within=2 * leader.config.election_ticks)
    assert isinstance(leader.propose(b"refused"), NotLeader)
    assert leader.log.committed < index
    sim.network.heal_all()
    sim.commit_one(within=200)
    assert b"lost" not in sim.acked.values()


def test_leadership_transfer() -> None:
    sim = Simulation(3, seed=11)
    sim.wait_until(sim.converged, within=100)
    leader = sim.leader()
    assert leader is not None
    follower = sim.nodes[next(n for n in sim.nodes if n != leader.id)].raft
    assert follower is not None
    assert isinstance(follower.transfer_leader(leader.id), NotLeader)
    with pytest.raises(UnknownPeer):
        leader.transfer_leader("stranger")
    assert leader.transfer_leader(follower.id) is None
    sim.wait_until(lambda: follower.role is Role.LEADER, within=20)
    assert follower.term == 2
    assert leader.role is Role.FOLLOWER
    sim.commit_one(within=50)


def test_a_follower_takes_over_at_once_but_only_with_a_complete_log() -> None:
    """An operator's failover (CLUSTER FAILOVER): a follower campaigns at once, past the
    leader's lease, and wins if its log is as complete as a majority's; one that lags loses, and
    nothing committed is lost either way."""
    sim = Simulation(3, seed=13)
    sim.wait_until(sim.converged, within=100)
    leader = sim.leader()
    assert leader is not None
    assert not leader.take_over()  # (it leads already)
    first, second = (sim.nodes[n].raft for n in sim.nodes if n != leader.id)
    assert first is not None
    assert second is not None
    sim.commit_one(within=50)
    assert first.take_over()
    sim.wait_until(lambda: first.role is Role.LEADER, within=20)
    assert leader.role is Role.FOLLOWER
    sim.commit_one(within=50)

    sim.network.cut(first.id, second.id)  # (the second misses what the first commits now)
    sim.network.cut(leader.id, second.id)
    committed = first.log.committed
    sim.commit_one(within=50)
    assert first.log.committed > committed
    assert second.log.last_index < first.log.committed
    sim.network.heal_all()
    committed = first.log.committed
    assert second.take_over()
    sim.run(1)
    assert second.role is not Role.LEADER  # (refused: the others' logs are more complete)
    sim.wait_until(sim.converged, within=100)
    final = sim.leader()
    assert final is not None
    assert final.log.committed >= committed
    sim.commit_one(within=50)


def test_proposals_are_refused_while_leadership_is_handed_over() -> None:
    sim = Simulation(3, seed=12)
    sim.wait_until(sim.converged, within=100)
    leader = sim.leader()
    assert leader is not None
    target = next(n for n in sim.nodes if n != leader.id)
    sim.network.cut(leader.id, target)
    leader.transfer_leader(target)
    assert leader.propose(b"x") == LeadershipTransferring(target)
    sim.run(leader.config.election_ticks + 1)
    assert leader.role is Role.LEADER, "the transfer times out; the leader carries on"
    assert isinstance(leader.propose(b"y"), int)


def test_a_restarted_node_keeps_its_term_and_vote() -> None:
    raft = node(pre_vote=False)
    elect(raft)
    hard = take(raft).must_persist.hard_state or raft.hard_state
    again = node(persisted=Persisted(hard, None, ()))
    assert (again.term, again.vote) == (1, "a")


def test_a_granted_vote_is_persisted_in_the_ready_that_sends_it() -> None:
    raft = node(check_quorum=False)
    raft.step(vote_request("a", 4))
    ready = raft.ready()
    assert ready.must_persist.hard_state == HardState(term=4, vote="b", commit=0)
    assert of_type(list(ready.then_send), VoteResponse)[0].granted


def test_a_vote_request_from_an_earlier_term_is_refused_with_ours() -> None:
    raft = node(persisted=Persisted(HardState(term=5), None, ()), pre_vote=False, check_quorum=False)
    raft.step(vote_request("a", 3))
    (reply,) = of_type(flush(raft), VoteResponse)
    assert (reply.granted, reply.term, reply.pre) == (False, 5, False)
    candidate = node("b", pre_vote=False, check_quorum=False)
    elect(candidate)
    candidate.step(attrs.evolve(reply, to="b"))
    assert (candidate.role, candidate.term) == (Role.FOLLOWER, 5)
