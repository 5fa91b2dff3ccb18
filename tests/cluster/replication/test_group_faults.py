"""Groups driven over a direct in-process network (no routes), to inject faults at the driver's own
seams: a crash between persisting a vote and sending it, a full disk on the leader, and a dead
member replaced by a new one."""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from cluster.config import ReplicationConfig
from cluster.raft import AddVoter, Message, RemoveVoter
from cluster.raft.messages import VoteResponse
from cluster.replication.group import ChangeRefused, Group, GroupSpec, ProposalTimeout
from cluster.replication.storage import RaftStorage
from tests.cluster.replication.machines import Recorder
from tests.support import until
from transport.records import Disk

pytestmark = pytest.mark.timeout(60)

NAMES = ("a", "b", "c")
SPEC = GroupSpec("g", frozenset(NAMES))
CONFIG = ReplicationConfig(tick=0.01, election_ticks=10, heartbeat_ticks=1, propose_timeout=0.5)


class Net:
    """Groups of one process wired to each other; a member can be started, crashed, restarted."""

    def __init__(self, nursery: trio.Nursery, root: Path) -> None:
        self.nursery = nursery
        self.root = root
        self.groups: dict[str, Group] = {}
        self.scopes: dict[str, trio.CancelScope] = {}
        self.machines: dict[str, Recorder] = {}
        self.crash_before: Callable[[Message], bool] | None = None
        """The first member about to send a message this accepts dies instead: nothing it sends
        from then on leaves, and its task is cancelled (it stops at its next checkpoint)."""
        self.crashed: list[Message] = []
        self.cut: set[str] = set()
        """Members cut off from the others: nothing they send or are sent arrives."""

    async def start(self, name: str, disk: Disk | None = None) -> Group:
        machine = self.machines[name] = Recorder()
        storage = RaftStorage(self.root / name, **({"disk": disk} if disk else {}))
        group = Group(SPEC, name, storage, machine, self.sender(name), CONFIG, random.Random(name))
        scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await group.run(task_status=task_status)

        await self.nursery.start(run)
        self.groups[name], self.scopes[name] = group, scope
        return group

    def sender(self, name: str) -> Callable[[str, Message], None]:
        def send(to: str, message: Message) -> None:
            if self.crash_before is not None and self.crash_before(message):
                self.crash_before = None
                self.crashed.append(message)
                self.scopes[name].cancel()
            group = self.groups.get(to)
            if self.cut & {name, to}:
                return
            if group is not None and not group.stopped and not self.scopes[name].cancel_called:
                group.receive(message)

        return send

    def leader(self) -> Group | None:
        leaders = [g for g in self.groups.values() if not g.stopped and g.role.value == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def formed(self) -> Group | None:
        """The leader, once no member recovers from its first start (``cluster.raft.recovery``):
        from then on the group outlives the loss of any one of them."""
        leader = self.leader()
        running = [g for g in self.groups.values() if not g.stopped]
        return None if leader is None or any(g.status().recovering for g in running) else leader


class SyncedSizes:
    """Fsyncs that remember how much of each file they made durable: a crash loses the rest."""

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}

    def fsync(self, fd: int) -> None:
        os.fsync(fd)
        self.sizes[os.readlink(f"/proc/self/fd/{fd}")] = os.fstat(fd).st_size

    def crash(self, directory: Path) -> None:
        """Cut every file in ``directory`` back to what was fsynced (nothing, if never)."""
        for path in directory.iterdir():
            if path.name != "LOCK":
                os.truncate(path, self.sizes.get(str(path.resolve()), 0))


async def test_a_vote_is_on_disk_before_the_message_granting_it_leaves(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    net = Net(nursery, tmp_path)
    net.crash_before = lambda m: isinstance(m, VoteResponse) and m.granted and not m.pre
    synced = SyncedSizes()
    for name in NAMES:
        await net.start(name, Disk(fsync=synced.fsync))
    await until(lambda: net.crashed and net.groups[net.crashed[0].sender].stopped)
    (response,) = net.crashed
    synced.crash(tmp_path / response.sender)
    voter = RaftStorage(tmp_path / response.sender)
    hard = voter.load().hard_state
    voter.close()
    assert (hard.term, hard.vote) == (response.term, response.to)


class FillableDisk:
    def __init__(self) -> None:
        self.full = False

    def write(self, fd: int, data: memoryview) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(fd, data)

    def free_bytes(self, fd: int) -> int:
        return 0 if self.full else 1 << 30


async def test_a_leader_whose_disk_is_full_acknowledges_nothing_until_it_has_room(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    net = Net(nursery, tmp_path)
    disks = {name: FillableDisk() for name in NAMES}
    for name in NAMES:
        await net.start(name, Disk(write=disks[name].write, free_bytes=disks[name].free_bytes))
    leader = await until(net.leader)
    assert await leader.propose(b"before") == 1
    disks[leader.node].full = True
    with pytest.raises(ProposalTimeout):
        await leader.propose(b"during")
    assert leader.status().disk_failure is not None
    disks[leader.node].full = False
    # The disk works again: the group goes on under whichever leader it has now.
    await until(lambda: (g := net.leader()) is not None and g.status().disk_failure is None)
    current = await until(net.leader)
    await current.propose(b"after")
    await until(lambda: all(len(m.applied) >= 2 for m in net.machines.values()))
    longest = max((m.applied for m in net.machines.values()), key=len)
    assert longest[0] == b"before"
    assert longest[-1] == b"after"
    for machine in net.machines.values():
        assert machine.applied == longest[: len(machine.applied)]


async def test_a_dead_member_is_replaced_and_its_replacement_catches_up(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    net = Net(nursery, tmp_path)
    for name in NAMES:
        await net.start(name)
    leader = await until(net.leader)
    for number in range(5):
        await leader.propose(b"w%d" % number)
    dead = next(name for name in NAMES if name != leader.node)
    net.scopes[dead].cancel()
    await until(lambda: net.groups[dead].stopped)
    survivors = frozenset(NAMES) - {dead}
    assert await leader.propose_change(RemoveVoter(dead)) == survivors
    await net.start("d")  # (with the founding voters: it is no voter yet and does not campaign)
    assert await leader.propose_change(AddVoter("d")) == survivors | {"d"}
    await leader.propose(b"after")
    await until(lambda: net.machines["d"].applied == net.machines[leader.node].applied)
    assert net.machines["d"].applied[-1] == b"after"
    with pytest.raises(ChangeRefused):
        await leader.propose_change(AddVoter("d"))
    assert {peer.name for peer in leader.status().peers} == survivors - {leader.node} | {"d"}
