"""One replica group on one node: the Raft core driven by a trio task, a clock, links and a disk.

A ``Group`` owns a ``cluster.raft.Raft``, the group's ``RaftStorage`` and the ``StateMachine`` the
group replicates. Its task (``run``) loops:

1. take what arrived: messages from peers (``receive``), ticks of the clock (one every
   ``ReplicationConfig.tick`` seconds), proposals, leadership transfers;
2. while the core has a ``Ready``: **persist** it (fsynced; on a disk failure the same save is
   tried again with backoff, and until it works nothing else happens: no message leaves, nothing
   is applied, nothing is acknowledged), **send** its messages (to a peer whose link is down they
   are dropped; Raft resends), **apply** committed entries to the state machine (or restore a
   snapshot from the leader), then **advance** the core;
3. once ``snapshot_entries`` entries were applied since the last snapshot, snapshot the state
   machine and let the core drop the log before it (saved on disk by the next ``Ready``); if the
   state machine cannot take one now (it holds changes not committed yet), try again later.

``await group.propose(data)`` returns what the state machine's ``apply`` returned for the entry,
once it is committed and applied on this node, or raises a ``ProposalError``: ``NotLeaderError``
(naming the leader if known), ``ProposalTimeout``, ``ProposalLost`` (a new leader replaced the entry:
it was never committed), ``GroupStopped``, or ``ProposalError`` itself when a snapshot from a new
leader covered the entry (committed or not: unknown). An entry whose proposal timed out may still commit
later: a caller that retries must make its data idempotent (the keyspace will carry client ids).

``await group.propose_change(AddVoter(name))`` (or ``RemoveVoter``) changes the group's voters one at
a time (``cluster.raft.membership``): it returns the voter set once the change is committed and
applied here, or raises as ``propose`` does, or ``ChangeRefused`` when another change is still
uncommitted (retry) or the change makes no sense for the voters in force. A node to be added
should run its side of the group first (started with the group's founding voters), so it catches
up before it counts.

``await group.read_barrier()`` returns once a read of this node's state machine is linearizable:
this node confirmed with a majority of the voters (a round of heartbeats, Raft's read index) that
it still led when the barrier was asked for, and has applied the log up to the commit index it had
then; it raises a ``ProposalError`` as ``propose`` does (``NotLeaderError``, ``ProposalTimeout``
when no majority answered in ``propose_timeout``, ``GroupStopped``). Barriers asked for while the
task is busy share one round.

``take_leadership`` has this node campaign at once (an operator's failover to it);
``transfer_leadership`` hands leadership over (maintenance, lame duck mode) to the named voter or
to the one most caught up. ``status`` describes the group for monitoring; ``serves`` says whether
this node leads it with every committed entry applied (what running commands on the state machine
directly needs).

The state machine is called only from the group's task, in log order, exactly once per committed
entry after a restart from the stored snapshot (``restore`` first, then the entries after it).
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable
from typing import Protocol

import attrs
import trio

from cluster.config import ReplicationConfig
from cluster.raft import (
    ChangeEntry,
    ChangePending,
    ConfigChange,
    EntryKind,
    InvalidChange,
    LeadershipTransferring,
    Message,
    NotLeader,
    Persist,
    Raft,
    RaftConfig,
    RaftError,
    Ready,
    Refusal,
    Role,
    VotersRecovering,
)
from cluster.replication.storage import RaftStorage, StorageFailed

__all__ = [
    "ChangeRefused",
    "Group",
    "GroupProposal",
    "GroupSpec",
    "GroupStatus",
    "GroupStopped",
    "NotLeaderError",
    "PeerStatus",
    "ProposalError",
    "ProposalLost",
    "ProposalTimeout",
    "StateMachine",
]

log = logging.getLogger("pubmesh")

MAX_INBOX = 10_000
"""Messages from peers held for the group's task at most; more are dropped (Raft resends)."""
_RETRY_FIRST, _RETRY_MOST = 0.05, 2.0


class StateMachine(Protocol):
    """What a group replicates: entries are applied in log order, on every member alike."""

    def apply(self, data: bytes) -> object:
        """Carry out one committed entry; what it returns answers the proposal (on its proposer).

        It must not raise: an entry is applied on every member alike, so one that cannot be
        applied stops the group on this node (logged) rather than let the replicas part ways."""
        ...

    def term_began(self) -> None:
        """A leader's first entry of its term (empty, for nothing but to commit its predecessors'
        entries) was committed, in its place in the log: an entry this node proposed and not yet
        applied before it is gone (a new leader's log did not have it)."""
        ...

    def snapshot(self) -> bytes | None:
        """The whole state, as ``restore`` takes it, as of the last entry applied; None if it
        cannot tell that state now (it holds changes of entries not applied yet)."""
        ...

    def restore(self, data: bytes) -> None:
        """Replace the whole state with a snapshot's."""
        ...


@attrs.frozen
class GroupSpec:
    """A replica group: its name (unique in the cluster; its directory's name) and its founding
    voters, by server name (the same on every member; ``Group.propose_change`` changes them)."""

    name: str
    voters: frozenset[str]


class ProposalError(Exception):
    """A proposal was not carried out (or its outcome is unknown)."""


class NotLeaderError(ProposalError):
    def __init__(self, group: str, leader: str | None) -> None:
        where = f"the leader is {leader}" if leader else "no leader is known"
        super().__init__(f"not the leader of group {group}: {where}")
        self.leader = leader


class ProposalTimeout(ProposalError):
    """Not applied in time: it may still be committed later."""


class ProposalLost(ProposalError):
    """Another leader's entry took its place: it was never committed."""


class ChangeRefused(ProposalError):
    """A membership change was not proposed: another is uncommitted, or it makes no sense."""


class GroupStopped(ProposalError):
    """The group stopped on this node before the proposal was applied."""


@attrs.frozen
class PeerStatus:
    name: str
    match: int
    """The last index the leader knows the peer holds."""
    lag: int
    """Entries the peer is behind the leader's log."""
    recovering: bool = False
    """It says it recovers from an empty store (``cluster.raft.recovery``)."""


@attrs.frozen
class GroupStatus:
    name: str
    node: str
    role: str
    leader: str | None
    term: int
    commit: int
    applied: int
    last_index: int
    snapshot_index: int
    peers: tuple[PeerStatus, ...]
    """Each other voter's progress (known on the leader only)."""
    disk_failure: str | None
    """Why the group cannot save (and so acknowledges nothing), if it cannot."""
    recovering: bool = False
    """This node recovers from an empty store: it votes for no one until its leader says it holds
    what the group committed (``cluster.raft.recovery``)."""


class _Waiter:
    """One proposal (or read barrier) waiting for its entry to be applied."""

    def __init__(self, term: int) -> None:
        self.term = term
        self.done = trio.Event()
        self.result: object = None
        self.error: ProposalError | None = None

    def finish(self, result: object = None, error: ProposalError | None = None) -> None:
        if not self.done.is_set():
            self.result, self.error = result, error
            self.done.set()


GroupProposal = _Waiter
"""A submitted proposal (``Group.submit``), to await with ``Group.outcome``."""


class Group:
    """One node's member of a replica group.

    Args:
        spec: the group and its voters.
        node: this node's server name (one of the voters).
        storage: the group's storage, not yet loaded (``run`` loads it).
        machine: the state machine it replicates.
        send: hands a message to the link to its recipient (dropping it if that is down).
        config: ticks and limits.
        rng: the source of election timeouts.
    """

    def __init__(
        self,
        spec: GroupSpec,
        node: str,
        storage: RaftStorage,
        machine: StateMachine,
        send: Callable[[str, Message], None],
        config: ReplicationConfig,
        rng: random.Random | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.node = node
        self.storage = storage
        self.machine = machine
        self._send = send
        self.config = config
        self._rng = rng or random.Random()
        self.raft: Raft | None = None
        self._inbox: deque[Message] = deque()
        self._proposals: deque[tuple[bytes | ConfigChange, _Waiter]] = deque()
        self._transfers: deque[str] = deque()
        self._waiters: dict[int, _Waiter] = {}
        self._barriers: list[_Waiter] = []
        """Read barriers asked for and not yet handed to the core."""
        self._confirming: dict[bytes, list[_Waiter]] = {}
        """Read barriers by their read-index context, until a majority confirms leadership."""
        self._confirmed: list[tuple[int, _Waiter]] = []
        """Read barriers confirmed, with their read index, until it is applied."""
        self._read_contexts = 0
        self._ticks = 0
        self._wake = trio.Event()
        self._changed = trio.Event()
        self.leader: str | None = None
        self.role = Role.FOLLOWER
        self.started = False
        """Whether ``run`` loaded the stored state and runs."""
        self.stopped = False
        self.dropped = 0
        """Messages from peers dropped because the inbox was full."""

    # -- what other tasks call ----------------------------------------------------------------

    def receive(self, message: Message) -> None:
        """A message from a peer (its link checked who sent it)."""
        if len(self._inbox) >= MAX_INBOX:
            self.dropped += 1
            return
        self._inbox.append(message)
        self._wake.set()

    async def propose(self, data: bytes) -> object:
        """Replicate ``data``: the state machine's answer once committed and applied here.

        Raises:
            ProposalError: not carried out (see the module docstring for which and why).
        """
        return await self.outcome(self.submit(data))

    async def propose_change(self, change: ConfigChange) -> frozenset[str]:
        """Add or remove one voter: the voters it makes, once committed and applied here.

        Raises:
            ProposalError: not carried out (``ChangeRefused``: see the module docstring).
        """
        voters = await self.outcome(self.submit(change))
        assert isinstance(voters, frozenset)
        return voters

    def submit(self, proposal: bytes | ConfigChange) -> _Waiter:
        """Queue ``proposal`` (data, or a change of voters) at once: entries are proposed in the
        order of these calls (await ``outcome``).

        Raises:
            GroupStopped: the group is stopped.
        """
        if self.stopped:
            raise GroupStopped(f"group {self.name} is stopped")
        waiter = _Waiter(0)
        self._proposals.append((proposal, waiter))
        self._wake.set()
        return waiter

    async def outcome(self, waiter: _Waiter) -> object:
        """What ``propose`` answers, for a submitted proposal.

        Raises:
            ProposalError: not carried out.
        """
        return await self._outcome(waiter, "not applied in time")

    async def read_barrier(self) -> None:
        """Return once a read of the state machine here is linearizable (see the module docstring).

        Raises:
            ProposalError: this node could not confirm it leads, in time or at all.
        """
        if self.stopped:
            raise GroupStopped(f"group {self.name} is stopped")
        waiter = _Waiter(0)
        self._barriers.append(waiter)
        self._wake.set()
        await self._outcome(waiter, "leadership not confirmed in time")

    async def _outcome(self, waiter: _Waiter, late: str) -> object:
        """Wait for the group's task to finish ``waiter``, at most ``propose_timeout``."""
        with trio.move_on_after(self.config.propose_timeout):
            await waiter.done.wait()
        if not waiter.done.is_set():
            waiter.finish(error=ProposalTimeout(f"group {self.name}: {late}"))
        if waiter.error is not None:
            raise waiter.error
        return waiter.result

    async def transfer_leadership(self, to: str | None = None, *, within: float = 5.0) -> bool:
        """Hand leadership to ``to`` (default: the voter most caught up); whether this node no
        longer leads when it returns (within ``within`` seconds)."""
        if self.raft is None or self.role is not Role.LEADER:
            return True
        if to is None:
            others = [p for p in self.raft.progress.items() if p[0] != self.node]
            if not others:
                return False
            to = max(others, key=lambda item: item[1].match)[0]
        self._transfers.append(to)
        self._wake.set()
        with trio.move_on_after(within):
            while self.role is Role.LEADER:
                await self._changed.wait()
        return self.role is not Role.LEADER

    async def take_leadership(self, *, within: float = 5.0) -> bool:
        """Campaign for leadership at once (an operator's failover to this node: ``Raft.
        take_over``); whether this node leads when it returns (within ``within`` seconds)."""
        if self.raft is None:
            return False
        if not self._leading():
            self._transfers.append(self.node)
            self._wake.set()
            with trio.move_on_after(within):
                while not self._leading():
                    await self._changed.wait()
        return self._leading()

    def _leading(self) -> bool:
        return self.role is Role.LEADER

    def serves(self) -> bool:
        """Whether this node leads the group and its state machine holds every committed entry:
        it has applied the first entry of its own term, so every entry of an earlier leader's
        before it too. A leader elected with entries it has not applied yet must not run commands
        on its state machine until then (they would see a state older than the log's)."""
        raft = self.raft
        return (
            raft is not None
            and raft.role is Role.LEADER
            and raft.log.term(raft.log.applied) == raft.term
        )

    def status(self) -> GroupStatus:
        raft = self.raft
        if raft is None:
            return GroupStatus(self.name, self.node, "starting", None, 0, 0, 0, 0, 0, (), None)
        last = raft.log.last_index
        peers = tuple(
            PeerStatus(name, progress.match, last - progress.match, progress.recovering)
            for name, progress in sorted(raft.progress.items())
            if name != self.node
        )
        return GroupStatus(
            name=self.name,
            node=self.node,
            role=raft.role.value,
            leader=raft.leader,
            term=raft.term,
            commit=raft.log.committed,
            applied=raft.log.applied,
            last_index=last,
            snapshot_index=raft.log.snapshot.index,
            peers=peers,
            disk_failure=self.storage.failure,
            recovering=bool(raft.recovering),
        )

    # -- the group's task ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the stored state and drive the group until cancelled (then stop it), or until its
        state machine fails (logged; the group stops, and ``run`` returns). A failure before the
        group started (its storage or snapshot) is raised.

        (A failure is never raised once started: had the group been asked to stop meanwhile,
        the failure and that cancellation together would leave as an exception group that no
        caller's ``except Exception`` takes, and end the node.)"""
        persisted = self.storage.load()
        try:
            config = RaftConfig(
                id=self.node,
                voters=self.spec.voters,
                rng=self._rng,
                election_ticks=self.config.election_ticks,
                heartbeat_ticks=self.config.heartbeat_ticks,
            )
            if persisted.snapshot is not None:
                self.machine.restore(persisted.snapshot.data)
            self.raft = Raft(config, persisted)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._clock)
                self.started = True
                task_status.started()
                try:
                    await self._drive(self.raft)
                except Exception as exc:  # (raised by the state machine: see ``StateMachine.apply``)
                    log.error("Group %s stopped on this node: its state machine failed: %s",
                              self.name, exc, exc_info=True)  # fmt: skip
                    nursery.cancel_scope.cancel()
        finally:
            self._stop()

    def _stop(self) -> None:
        self.stopped = True
        error = GroupStopped(f"group {self.name} stopped")
        for _, waiter in self._proposals:
            waiter.finish(error=error)
        for waiter in self._waiters.values():
            waiter.finish(error=error)
        self._fail_reads(error)
        self._proposals.clear()
        self._waiters.clear()
        self.storage.close()
        self._changed.set()

    async def _clock(self) -> None:
        while True:
            await trio.sleep(self.config.tick)
            self._ticks += 1
            self._wake.set()

    async def _drive(self, raft: Raft) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            self._take_inputs(raft)
            while ready := raft.ready():
                await self._carry_out(raft, ready)
            self._maybe_compact(raft)

    def _take_inputs(self, raft: Raft) -> None:
        while self._inbox:
            message = self._inbox.popleft()
            try:
                raft.step(message)
            except (RaftError, ValueError) as exc:  # (a peer broke the protocol: not our crash)
                log.warning("Group %s: dropped %s from %s: %s",
                            self.name, type(message).__name__, message.sender, exc)  # fmt: skip
        ticks, self._ticks = min(self._ticks, 3), 0  # (a stall does not become an election)
        for _ in range(ticks):
            raft.tick()
        while self._transfers:
            to = self._transfers.popleft()
            if to == self.node:
                raft.take_over()
            else:
                raft.transfer_leader(to)
        while self._proposals:
            proposal, waiter = self._proposals.popleft()
            if waiter.done.is_set():
                continue  # (timed out meanwhile)
            index: int | Refusal
            try:
                if isinstance(proposal, bytes):
                    index = raft.propose(proposal)
                else:
                    index = raft.propose_change(proposal)
            except InvalidChange as exc:
                waiter.finish(error=ChangeRefused(f"group {self.name}: {exc}"))
                continue
            if isinstance(index, NotLeader):
                waiter.finish(error=NotLeaderError(self.name, index.leader))
            elif isinstance(index, LeadershipTransferring):
                waiter.finish(error=NotLeaderError(self.name, index.to))
            elif isinstance(index, ChangePending):
                waiter.finish(
                    error=ChangeRefused(f"group {self.name}: a change is pending at {index.index}")
                )
            elif isinstance(index, VotersRecovering):
                waiter.finish(
                    error=ChangeRefused(
                        f"group {self.name}: {', '.join(sorted(index.voters))} may still be "
                        "recovering from an empty store, and too few voters would be left"
                    )
                )
            else:
                waiter.term = raft.term
                self._waiters[index] = waiter
        barriers = [waiter for waiter in self._barriers if not waiter.done.is_set()]
        self._barriers.clear()
        if barriers:
            self._read_contexts += 1
            context = self._read_contexts.to_bytes(8, "big")
            refusal = raft.read_index(context)
            if refusal is None:
                self._confirming[context] = barriers
            else:
                for waiter in barriers:
                    waiter.finish(error=NotLeaderError(self.name, raft.leader))

    async def _carry_out(self, raft: Raft, ready: Ready) -> None:
        await self._persist(ready.must_persist)
        for message in ready.then_send:
            self._send(message.to, message)
        if ready.install is not None:
            self.machine.restore(ready.install.data)
            for index in [i for i in self._waiters if i <= ready.install.index]:
                self._waiters.pop(index).finish(
                    error=ProposalError(f"group {self.name}: outcome unknown (snapshot installed)")
                )
        for entry in ready.apply:
            result: object = None
            if entry.kind is EntryKind.COMMAND:
                result = self.machine.apply(entry.data)
            elif entry.kind is EntryKind.CONFIG:
                result = ChangeEntry.decode(entry.data).voters
            else:
                self.machine.term_began()
            waiter = self._waiters.pop(entry.index, None)
            if waiter is None:
                continue
            if waiter.term == entry.term:
                waiter.finish(result)
            else:
                waiter.finish(error=ProposalLost(f"group {self.name}: entry {entry.index} replaced"))
        for read in ready.read_states:
            self._confirmed += [(read.index, w) for w in self._confirming.pop(read.context, ())]
        if ready.soft_state is not None:
            self.leader, self.role = ready.soft_state.leader, ready.soft_state.role
            self._changed.set()
            self._changed = trio.Event()
            if self.role is Role.LEADER:
                log.info("Group %s: %s leads in term %d", self.name, self.node, raft.term)
            else:  # (the core forgot the reads its leadership had not confirmed)
                for waiters in self._confirming.values():
                    for waiter in waiters:
                        waiter.finish(error=NotLeaderError(self.name, self.leader))
                self._confirming.clear()
        raft.advance(ready)
        if self._confirmed:
            applied = raft.log.applied
            for index, waiter in self._confirmed:
                if index <= applied:
                    waiter.finish()
            self._confirmed = [(i, w) for i, w in self._confirmed if not w.done.is_set()]

    def _fail_reads(self, error: ProposalError) -> None:
        """End every read barrier with ``error``."""
        waiting = [w for ws in self._confirming.values() for w in ws]
        for waiter in [*self._barriers, *waiting, *(w for _, w in self._confirmed)]:
            waiter.finish(error=error)
        self._barriers.clear()
        self._confirming.clear()
        self._confirmed.clear()

    async def _persist(self, persist: Persist) -> None:
        """Save, trying again with backoff until the disk takes it."""
        pause = _RETRY_FIRST
        while True:
            try:
                await self.storage.save(persist)
                return
            except StorageFailed:
                await trio.sleep(pause)
                pause = min(pause * 2, _RETRY_MOST)

    def _maybe_compact(self, raft: Raft) -> None:
        applied = raft.log.applied
        if applied - raft.log.snapshot.index < self.config.snapshot_entries:
            return
        if applied > raft.log.persisted:
            return
        data = self.machine.snapshot()
        if data is None:
            return
        raft.compact(applied, data)
        self._wake.set()
