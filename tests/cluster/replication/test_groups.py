"""Replica groups on three nodes joined by routes over real sockets on 127.0.0.1: election,
replication, failover, restart from the store, catch-up by log and by snapshot."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from cluster.config import ClusterConfig, ReplicationConfig
from cluster.replication.group import Group, GroupSpec, GroupStopped, NotLeaderError
from node.config.options import Config, UserConfig
from node.run.launch import NodeHandle
from tests.cluster.replication.machines import Recorder
from tests.node.monitoring.test_monitor import _http_get
from tests.support import PASSWORD, W, connect, in_asyncio, start_node, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

ROUTES = ClusterConfig(name="raft", host="127.0.0.1", port=0, ping_interval=0.5, ping_max=3)
NAMES = ("n1", "n2", "n3")
SYSTEM_USER = UserConfig(user="sys", password=PASSWORD, account="$SYS")
SPEC = GroupSpec("g1", frozenset(NAMES))


class Member:
    """One node of the test cluster, and its side of group g1."""

    def __init__(self, name: str, store: Path) -> None:
        self.name = name
        self.store = store
        self.handle: NodeHandle | None = None
        self.group: Group | None = None
        self.machine = Recorder()

    async def start(
        self, nursery: trio.Nursery, seeds: tuple[str, ...], replication: ReplicationConfig
    ) -> None:
        config = Config(
            server_name=self.name,
            http_port=0,
            lame_duck_grace_period=60,
            store_dir=str(self.store),
            users=(SYSTEM_USER,),
            cluster=ROUTES.evolve(seeds=seeds),
            replication=replication,
        )
        self.handle = await start_node(nursery, config)
        replicas = self.handle.node.replicas
        assert replicas is not None
        self.machine = Recorder()
        self.group = await replicas.start_group(SPEC, self.machine)

    async def stop(self) -> None:
        assert self.handle is not None
        self.handle.server.shutdown()
        with trio.fail_after(10):
            await self.handle.finished.wait()
        self.handle = None

    @property
    def seed(self) -> str:
        assert self.handle is not None
        return f"nats://127.0.0.1:{self.handle.cluster_port}"


async def start_members(
    nursery: trio.Nursery, tmp_path: Path, replication: ReplicationConfig
) -> list[Member]:
    members = [Member(name, tmp_path / name) for name in NAMES]
    await members[0].start(nursery, (), replication)
    for member in members[1:]:
        await member.start(nursery, (members[0].seed,), replication)
    return members


def leader_of(members: list[Member]) -> Member | None:
    live = [m for m in members if m.group is not None and m.handle is not None]
    leaders = [m for m in live if m.group is not None and m.group.status().role == "leader"]
    return leaders[0] if len(leaders) == 1 else None


async def raftz(member: Member) -> dict[str, Any]:
    assert member.handle is not None
    assert member.handle.http_port is not None
    reply = await trio.to_thread.run_sync(_http_get, member.handle.http_port, "/raftz")
    assert reply.status == 200
    doc: dict[str, Any] = json.loads(reply.body)
    return doc


async def raftz_by_system_request(member: Member, answers: int) -> dict[str, dict[str, Any]]:
    """Every node's RAFTZ, asked once through ``member``'s system account, by server name."""
    assert member.handle is not None
    handle = member.handle

    async def scenario() -> dict[str, dict[str, Any]]:
        sys = await connect(handle, "sys")
        inbox = sys.new_inbox()
        sub = await sys.subscribe(inbox)
        await sys.publish("$SYS.REQ.SERVER.PING.RAFTZ", b"", reply=inbox)
        docs = [json.loads((await sub.next_msg(timeout=W)).data) for _ in range(answers)]
        await sys.close()
        return {doc["server"]["name"]: doc["data"] for doc in docs}

    return await in_asyncio(scenario)


async def propose(member: Member, data: bytes) -> object:
    assert member.group is not None
    return await member.group.propose(data)


def check_agreement(members: list[Member]) -> None:
    """No applied entry differs between replicas (each is a prefix of the longest)."""
    longest = max((m.machine.applied for m in members), key=len)
    for member in members:
        assert member.machine.applied == longest[: len(member.machine.applied)], member.name


FAST = ReplicationConfig(tick=0.05, election_ticks=10, heartbeat_ticks=1)


async def test_three_nodes_elect_replicate_fail_over_and_catch_up(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    members = await start_members(nursery, tmp_path, FAST)
    leader = await until(lambda: leader_of(members))
    follower = next(m for m in members if m is not leader)
    with pytest.raises(NotLeaderError) as refused:
        await propose(follower, b"nope")
    assert refused.value.leader in (leader.name, None)

    for i in range(20):
        assert await propose(leader, b"a%d" % i) == i + 1
    await until(lambda: all(len(m.machine.applied) == 20 for m in members))
    check_agreement(members)
    doc = await raftz(leader)
    (group,) = doc["groups"]
    assert (group["name"], group["role"], group["leader"]) == ("g1", "leader", leader.name)
    assert group["applied"] == group["commit"] == group["last_index"] == 21  # (and the no-op)
    assert sorted(p["name"] for p in group["peers"]) == sorted(
        m.name for m in members[:3] if m is not leader
    )
    assert all(p["match"] + p["lag"] == 21 for p in group["peers"])
    follower_doc = await raftz(follower)
    assert follower_doc["groups"][0]["role"] == "follower"
    assert follower_doc["groups"][0]["leader"] == leader.name
    # The system account answers the same documents, one per node, wherever it is asked.
    by_request = await raftz_by_system_request(follower, answers=len(members))
    assert sorted(by_request) == sorted(NAMES)
    for name, data in by_request.items():
        (group,) = data["groups"]
        assert (group["name"], group["leader"], group["commit"]) == ("g1", leader.name, 21)
        assert group["role"] == ("leader" if name == leader.name else "follower")
    assert by_request[leader.name]["groups"][0]["peers"] == doc["groups"][0]["peers"]

    # The leader's node stops: the others elect a new one and go on.
    stopped_at = time.monotonic()
    await leader.stop()
    rest = [m for m in members if m is not leader]
    new_leader = await until(lambda: leader_of(rest))
    failover = time.monotonic() - stopped_at
    assert new_leader is not leader
    for i in range(20, 40):
        await propose(new_leader, b"a%d" % i)
    await until(lambda: all(len(m.machine.applied) == 40 for m in rest))
    print(f"failover (node stopped -> new leader): {failover:.2f} s")

    # The stopped node restarts from its store_dir and catches up from the log.
    await leader.start(nursery, (new_leader.seed,), FAST)
    await until(lambda: len(leader.machine.applied) == 40)
    assert leader.machine.applied == [b"a%d" % i for i in range(40)]
    check_agreement(members)


async def test_a_node_behind_a_compaction_catches_up_by_snapshot(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = FAST.evolve(snapshot_entries=10)
    members = await start_members(nursery, tmp_path, config)
    leader = await until(lambda: leader_of(members))
    lagging = next(m for m in members if m is not leader)
    await lagging.stop()
    for i in range(35):
        await propose(leader, b"b%d" % i)
    assert leader.group is not None
    await until(lambda: leader.group is not None and leader.group.status().snapshot_index >= 30)
    await lagging.start(nursery, (leader.seed,), config)
    await until(lambda: len(lagging.machine.applied) == 35)
    assert lagging.machine.restores >= 1
    live = [m for m in members if m.handle is not None]
    check_agreement(live)

    # A restart of a compacted node restores its snapshot, then the entries after it.
    await lagging.stop()
    await lagging.start(nursery, (leader.seed,), config)
    await until(lambda: len(lagging.machine.applied) == 35)
    assert lagging.machine.applied == [b"b%d" % i for i in range(35)]


async def test_lame_duck_mode_hands_leadership_over(nursery: trio.Nursery, tmp_path: Path) -> None:
    members = await start_members(nursery, tmp_path, FAST)
    leader = await until(lambda: leader_of(members))
    await propose(leader, b"first")
    handle = leader.handle
    assert handle is not None
    # A client keeps the lame duck node up through its grace period (far longer than the test).
    client = await trio.open_tcp_stream("127.0.0.1", handle.port)
    await client.send_all(b'CONNECT {"user":"sys","pass":"%s"}\r\nPING\r\n' % PASSWORD.encode())
    with trio.fail_after(10):
        while b"PONG" not in await client.receive_some(4096):
            pass
    handle.node.lame_duck()
    successor = await until(lambda: (m := leader_of(members)) is not leader and m)
    assert successor is not None
    assert not handle.finished.is_set()  # (handed over, not elected after the node stopped)
    await propose(successor, b"second")
    await until(lambda: all(m.machine.applied == [b"first", b"second"] for m in members))
    await client.aclose()


async def test_an_entry_the_state_machine_cannot_apply_stops_the_group_not_the_node(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    members = await start_members(nursery, tmp_path, FAST)
    leader = await until(lambda: leader_of(members))
    await propose(leader, b"fine")
    with pytest.raises(GroupStopped):
        await propose(leader, b"boom")
    for member in members:
        assert member.handle is not None
        replicas = member.handle.node.replicas
        assert replicas is not None
        await until(lambda r=replicas: not r.groups)  # type: ignore[misc]
        assert not member.handle.finished.is_set()
        assert member.machine.applied == [b"fine"]
