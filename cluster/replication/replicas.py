"""A node's replica groups: forming its side of each, and carrying their messages over routes.

Members of a group are named by server name, which every route's HELLO carries (and the route
handshake authenticated), so a RAFT frame from a peer is taken only if the message says it is
from that peer's name and for this node; anything else is a ``LinkError`` and closes the link.
Messages for a group this node has not formed (yet) are dropped (``on_unknown`` hears of them):
Raft resends. Messages for a peer
with no route up are dropped likewise. A snapshot larger than a frame travels in parts, paced by
the link's room (``cluster.replication.transfer``); an append carrying more than a part (a large
entry) is dropped while the link to its follower holds more than ``ROOM`` bytes waiting, and Raft
sends it again as for any message lost (else a large entry, sent again at each heartbeat while
the link is still carrying it, would pile up on the link until it cut the follower).

``start_group`` forms this node's side of a group from a ``GroupSpec`` (its name and fixed
voters) and the state machine it replicates; the group's Raft state lives in
``<store_dir>/raft/<group name>/``. A node forms its side when told to: every voter must be told
the same spec, and a group with a majority of its voters formed elects a leader.

**How placement will use this.** Placement decides, for each replica group, its name and voters
(by server name) and agrees on it cluster-wide: either in a small meta group formed with this
same API over a fixed set of nodes, whose state machine is the assignment table, or by
deterministic slot assignment that is itself replicated. Each node then watches the assignment
and calls ``start_group`` for every group that names it (and ``stop_group`` for one that no longer
does), with the keyspace's state machine for the group's slots; forwarding sends a command for a
key to the leader that ``status`` (or ``NotLeaderError.leader``) names.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path

import trio

from cluster.checks import LinkError
from cluster.config import ReplicationConfig
from cluster.frames import RaftFrame
from cluster.raft import Message
from cluster.raft.messages import AppendEntries, InstallSnapshot
from cluster.replication.group import Group, GroupSpec, GroupStatus, StateMachine
from cluster.replication.storage import RaftStorage
from cluster.replication.transfer import PART, ROOM, Assembly, Pending, Transfers
from cluster.replication.wire import GROUP_NAME, SnapshotPart
from transport.records import DISK, Disk

__all__ = ["Replicas", "SendFrame"]

log = logging.getLogger("pubmesh")

SendFrame = Callable[[str, RaftFrame], bool]
"""Sends a frame to the route peer of that server name; False if no route to it is up."""


class Replicas:
    """The replica groups this node is a member of.

    Args:
        node: this node's server name.
        store_dir: the node's store directory (groups keep their state under ``raft/``).
        config: ticks and limits for every group.
        send: how frames reach a peer (``RouteManager.send_raft``).
        pending: the bytes waiting on the link to a peer (``RouteManager.raft_pending``), which
            paces a snapshot sent in parts.
        disk: the system calls storage writes with (tests pass ones that fail on purpose).
        rng: the source of election timeouts.
    """

    def __init__(
        self,
        node: str,
        store_dir: str | Path,
        config: ReplicationConfig,
        send: SendFrame,
        *,
        pending: Pending = lambda peer: 0,
        disk: Disk = DISK,
        rng: random.Random | None = None,
    ) -> None:
        if not node:
            raise ValueError("replica groups need the node to have a server name")
        self.node = node
        self.directory = Path(store_dir) / "raft"
        self.config = config
        self._send_frame = send
        self.transfers = Transfers(send, pending)
        self._pending = pending
        self._assemblies: dict[tuple[str, str], Assembly] = {}
        """Snapshot parts coming in, by sender and group."""
        self._disk = disk
        self._rng = rng or random.Random()
        self.groups: dict[str, Group] = {}
        self._scopes: dict[str, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self._handing_over = 0
        self._handed_over = trio.Event()
        self.on_unknown: Callable[[str, str], None] | None = None
        """Told of a RAFT frame (its sender, its group) for a group this node has not formed."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the groups started, until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def start_group(self, spec: GroupSpec, machine: StateMachine) -> Group:
        """Form this node's side of ``spec`` (loading what it stored before) and run it.

        Raises:
            ValueError: a bad name, this node is not a voter, or the group runs already.
            StorageError: its stored state is damaged or in use.
        """
        if self._nursery is None:
            raise RuntimeError("Replicas.run is not running")
        if not GROUP_NAME.fullmatch(spec.name):
            raise ValueError(f"bad group name {spec.name!r}")
        if self.node not in spec.voters:
            raise ValueError(f"{self.node} is not a voter of group {spec.name}")
        if spec.name in self.groups:
            raise ValueError(f"group {spec.name} runs already")
        storage = RaftStorage(self.directory / spec.name, disk=self._disk)
        group = Group(
            spec,
            self.node,
            storage,
            machine,
            lambda to, message: self._send(spec.name, to, message),
            self.config,
            random.Random(self._rng.getrandbits(64)),
        )
        scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                try:
                    await group.run(task_status=task_status)  # (raises only to start_group's caller)
                finally:
                    if self.groups.get(spec.name) is group:
                        del self.groups[spec.name]
                        del self._scopes[spec.name]

        self.groups[spec.name] = group
        self._scopes[spec.name] = scope
        try:
            await self._nursery.start(run)
        except BaseException:
            self.groups.pop(spec.name, None)
            self._scopes.pop(spec.name, None)
            raise
        return group

    def stored(self) -> list[str]:
        """The groups whose state this node's store holds (formed here before, running or not)."""
        if not self.directory.is_dir():
            return []
        return sorted(entry.name for entry in self.directory.iterdir() if entry.is_dir())

    def stop_group(self, name: str) -> None:
        """Stop this node's side of a group (its stored state stays)."""
        scope = self._scopes.get(name)
        if scope is not None:
            scope.cancel()

    def hand_over(self) -> None:
        """Hand leadership of every group this node leads to another voter (lame duck mode, or a
        step-down for maintenance), in the background; ``handed_over`` waits for it."""
        if self._nursery is None:
            return
        for group in self.groups.values():
            if group.status().role == "leader":
                self._handing_over += 1
                self._nursery.start_soon(self._hand_over, group)

    def take_over(self) -> bool:
        """Have this node campaign, in the background, for every group it follows (CLUSTER
        FAILOVER); False if it follows none."""
        following = [g for g in self.groups.values() if g.status().role != "leader"]
        if self._nursery is None or not following:
            return False
        for group in following:
            self._nursery.start_soon(partial(group.take_leadership))
        return True

    async def _hand_over(self, group: Group) -> None:
        try:
            await group.transfer_leadership()
        finally:
            self._handing_over -= 1
            if not self._handing_over:
                self._handed_over.set()
                self._handed_over = trio.Event()

    async def handed_over(self) -> None:
        """Wait until no hand-over is under way (each is bounded in time)."""
        if self._handing_over:
            await self._handed_over.wait()

    def _send(self, group: str, to: str, message: Message) -> None:
        if isinstance(message, InstallSnapshot) and len(message.snapshot.data) > PART:
            if self._nursery is not None:
                self.transfers.start(self._nursery, group, message)
            return
        if isinstance(message, AppendEntries) and sum(len(e.data) for e in message.entries) > PART:
            waiting = self._pending(to)
            if waiting is not None and waiting > ROOM:
                return  # (lost, as a message may be: Raft sends it again while the peer lacks it)
        self._send_frame(to, RaftFrame(group, message))

    def receive(self, peer: str, frame: RaftFrame) -> None:
        """A RAFT frame arrived from the route peer named ``peer``.

        Raises:
            LinkError: the message names another sender, or another recipient than this node.
        """
        message = frame.message
        if message.sender != peer or message.to != self.node:
            raise LinkError(
                f"a Raft message from {message.sender[:64]!r} to {message.to[:64]!r} "
                f"on the route from {peer[:64]!r}"
            )
        group = self.groups.get(frame.group)
        if group is None:
            if self.on_unknown is not None:
                self.on_unknown(peer, frame.group)
            return
        if isinstance(message, SnapshotPart):
            if peer not in group.spec.voters:
                raise LinkError(f"a snapshot part from {peer[:64]!r}, no voter of {frame.group}")
            assembly = self._assemblies.setdefault((peer, frame.group), Assembly())
            whole = assembly.add(message)
            if whole is None:
                return
            del self._assemblies[(peer, frame.group)]
            message = whole
        group.receive(message)

    def status(self) -> list[GroupStatus]:
        """Every group's state, by name: what /raftz shows."""
        return [self.groups[name].status() for name in sorted(self.groups)]
