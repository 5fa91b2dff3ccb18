"""Read barriers (Raft's read index) on a group driven over the direct in-process network: a
leader reads only once a majority confirms it still leads and it applied what was committed."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from cluster.replication.group import NotLeaderError, ProposalError
from tests.cluster.replication.test_group_faults import NAMES, Net
from tests.support import until

pytestmark = pytest.mark.timeout(60)


async def test_a_leader_cut_off_from_its_followers_confirms_no_read(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    net = Net(nursery, tmp_path)
    for name in NAMES:
        await net.start(name)
    old = await until(net.formed)
    await old.propose(b"before")
    await old.read_barrier()
    net.cut.add(old.node)
    assert old.role.value == "leader"  # (it has not noticed yet)
    with pytest.raises(ProposalError):
        await old.read_barrier()
    # The others elect a leader, which takes a write the old one never sees.
    new = await until(
        lambda: next(
            (g for g in net.groups.values() if g.node != old.node and g.role.value == "leader"), None
        )
    )
    await new.propose(b"after")
    with pytest.raises(ProposalError):
        await old.read_barrier()
    assert net.machines[old.node].applied == [b"before"]


async def test_a_new_leader_reads_only_once_it_applied_every_committed_entry(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    net = Net(nursery, tmp_path)
    for name in NAMES:
        await net.start(name)
    old = await until(net.formed)
    written = [b"%d" % n for n in range(20)]
    for data in written:
        await old.propose(data)
    net.cut.add(old.node)
    others = [g for g in net.groups.values() if g.node != old.node]
    while True:  # (ask every one of them as soon as it may lead; the others refuse)
        for group in others:
            try:
                await group.read_barrier()
            except NotLeaderError:
                continue
            assert net.machines[group.node].applied == written
            return
        await trio.sleep(0.005)


async def test_a_follower_refuses_a_read_barrier_and_a_stopped_group_too(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    net = Net(nursery, tmp_path)
    for name in NAMES:
        await net.start(name)
    leader = await until(net.formed)
    follower = next(g for g in net.groups.values() if g is not leader)
    with pytest.raises(NotLeaderError, match=f"the leader is {leader.node}"):
        await follower.read_barrier()
    net.scopes[follower.node].cancel()
    await until(lambda: follower.stopped)
    with pytest.raises(ProposalError, match="stopped"):
        await follower.read_barrier()
    await leader.read_barrier()  # (two of three still confirm it)
