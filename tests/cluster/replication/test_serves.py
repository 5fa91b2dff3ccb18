"""A leader serves commands on its state machine only once it has applied every entry committed
before its term: a node elected with entries of an earlier leader it has not applied yet must wait
for them (a command run on the older state would contradict them: an XADD ID at or below one the
log already holds, a counter incremented from a stale value)."""

from __future__ import annotations

import random
from pathlib import Path

from cluster.config import ReplicationConfig
from cluster.raft import Entry, HardState, Persisted, Raft, RaftConfig, Role
from cluster.replication.group import Group, GroupSpec
from cluster.replication.storage import RaftStorage
from tests.cluster.replication.machines import Recorder


def test_a_new_leader_serves_only_after_applying_the_entries_before_its_term(tmp_path: Path) -> None:
    spec = GroupSpec("g1", frozenset(["a"]))
    group = Group(spec, "a", RaftStorage(tmp_path), Recorder(), lambda to, m: None, ReplicationConfig())
    assert not group.serves()  # (not running)
    earlier = tuple(Entry(i, 1, b"x%d" % i) for i in (1, 2, 3))
    raft = Raft(
        RaftConfig(id="a", voters=spec.voters, rng=random.Random(1), election_ticks=10),
        Persisted(HardState(term=1, vote="a", commit=2), None, earlier),
    )
    group.raft = raft
    while not leads(raft):
        raft.tick()
        while not leads(raft) and (ready := raft.ready()):
            raft.advance(ready)
    assert raft.log.applied < 3
    assert not group.serves()  # (it leads, but entries 1..3 are not applied yet)
    while ready := raft.ready():
        raft.advance(ready)
    assert raft.log.applied == raft.log.last_index == 4
    assert group.serves()


def leads(raft: Raft) -> bool:
    return raft.role is Role.LEADER
