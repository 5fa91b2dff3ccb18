"""A group's state machine that fails while the group is being stopped (a rebuild of its keys
stops it while it waits for the disk) stops the group, not the node."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from cluster.config import ReplicationConfig
from cluster.replication.group import GroupSpec, ProposalError
from cluster.replication.replicas import Replicas
from tests.cluster.replication.machines import Recorder
from tests.support import until
from transport.records import Disk

pytestmark = pytest.mark.timeout(30)

VOTERS = frozenset(["a"])


async def test_a_failure_to_apply_while_stopping_stops_the_group_not_the_node(tmp_path: Path) -> None:
    stop: list[str | int] = []
    """The group to stop, and at which of its next fsyncs (counting down)."""
    replicas: Replicas

    def fsync(fd: int) -> None:
        os.fsync(fd)
        if stop:
            stop[1] = int(stop[1]) - 1
            if stop[1] == 0:  # (asked to stop while this save is under way)
                trio.from_thread.run_sync(replicas.stop_group, str(stop[0]))

    config = ReplicationConfig(tick=0.01, election_ticks=10, propose_timeout=5.0)
    replicas = Replicas("a", tmp_path, config, lambda to, frame: False, disk=Disk(fsync=fsync))
    async with trio.open_nursery() as nursery:
        await nursery.start(replicas.run)
        for nth in range(1, 6):  # (whichever save comes just before the entry is applied)
            spec = GroupSpec(f"g{nth}", VOTERS)
            group = await replicas.start_group(spec, Recorder())
            await until(group.serves)
            assert await group.propose(b"fine") == 1
            stop[:] = [spec.name, nth]
            with pytest.raises(ProposalError):
                await group.propose(b"boom")  # (the Recorder cannot apply it)
            await until(lambda: spec.name not in replicas.groups)  # noqa: B023
            stop.clear()
        other = await replicas.start_group(GroupSpec("h", VOTERS), Recorder())
        await until(other.serves)  # (the node carries on)
        assert await other.propose(b"fine") == 1
        nursery.cancel_scope.cancel()
