"""A deterministic simulation of a Raft group: virtual ticks, a faulty network, crashes, checks.

Everything is driven by one seeded ``random.Random``: the same seed and fault schedule replay the
same run exactly. Each ``step`` is one tick of virtual time: every live node ticks, messages due
now are delivered, and every node's ``Ready`` is carried out as a host must (persist, then send,
then apply). After every step ``SafetyChecker`` (``pubmesh_testing.raft_safety``) asserts Raft's
safety properties.

The network (``SimNetwork``) mirrors ``cluster.network.MemoryNetwork``'s faults between pairs of
nodes (``cut``/``heal``/``heal_all``), at the level of single messages: each may be lost,
duplicated or delayed (which reorders them). A node can ``crash``, losing everything it had not
persisted (optionally between persisting a ``Ready`` and sending its messages, or before
persisting it), and ``restart`` from what its ``MemoryStorage`` holds, or lose that store
(``Wipe``: a disk lost, within what the group tolerates). A node can also ``Pause`` (a process
stopped, or a machine frozen): it neither ticks nor takes messages, which wait for it, until
``Resume``; it goes on as it was, however stale its view. ``spares`` nodes run from
the start outside the founding voters; ``ChangeVoters`` has the leader add a node as a voter or
remove it, one change at a time, so voters are replaced while faults go on.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from typing import Any

import attrs
import msgpack

from cluster.raft import (
    AddVoter,
    ChangeEntry,
    ConfigChange,
    Entry,
    EntryKind,
    HardState,
    Message,
    Persist,
    Persisted,
    Raft,
    RaftConfig,
    Ready,
    RemoveVoter,
    Role,
    Snapshot,
)
from cluster.raft.tracker import quorum
from pubmesh_testing.raft_safety import SafetyChecker, SafetyViolation

__all__ = [
    "Action",
    "ChangeVoters",
    "Crash",
    "Cut",
    "Faults",
    "Heal",
    "Isolate",
    "MemoryStorage",
    "Pause",
    "Reboot",
    "Restart",
    "Resume",
    "SafetyChecker",
    "SafetyViolation",
    "SetFaults",
    "SimNetwork",
    "SimNode",
    "Simulation",
    "Transfer",
    "Wipe",
]


@attrs.define
class Faults:
    """How unreliable the network is (probabilities per message; delays in ticks)."""

    loss: float = 0.0
    duplicate: float = 0.0
    max_delay: int = 0


@attrs.frozen
class Cut:
    a: str
    b: str


@attrs.frozen
class Isolate:
    node: str


@attrs.frozen
class Heal:
    """Heal every path (faults stay as set)."""


@attrs.frozen
class Crash:
    node: str
    point: str | None = None
    """None: crash now; "before-persist"/"before-send": in the middle of its next ``Ready``."""


@attrs.frozen
class Restart:
    node: str


@attrs.frozen
class Reboot:
    """Crash ``node`` and start it again at once from what it persisted (a supervised restart)."""

    node: str


@attrs.frozen
class Pause:
    """Stop ``node`` (as SIGSTOP does): no ticks, no messages taken, until ``Resume``."""

    node: str


@attrs.frozen
class Resume:
    """Every paused node goes on, taking the messages that waited for it, in order."""


@attrs.frozen
class Wipe:
    """Crash ``node`` and start it again on an empty store (its disk lost or replaced). Done only
    while no node recovers (``cluster.raft.recovery``) and every node counts three voters or
    more: the failures a group tolerates; otherwise it is a ``Reboot``."""

    node: str


@attrs.frozen
class SetFaults:
    faults: Faults


@attrs.frozen
class Transfer:
    """Ask the current leader to hand over to ``to``."""

    to: str


@attrs.frozen
class ChangeVoters:
    """Ask the current leader to add ``node`` as a voter, or to remove it if it is one."""

    node: str


Action = (
    Cut
    | Isolate
    | Heal
    | Crash
    | Restart
    | Reboot
    | Pause
    | Resume
    | Wipe
    | SetFaults
    | Transfer
    | ChangeVoters
)


class MemoryStorage:
    """Stable storage that survives crashes, with the semantics ``cluster.raft.ready`` requires."""

    def __init__(self) -> None:
        self.hard_state = HardState()
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []

    def save(self, persist: Persist) -> None:
        snapshot = persist.snapshot
        if snapshot is not None and (self.snapshot is None or snapshot.index > self.snapshot.index):
            keep = any(e.index == snapshot.index and e.term == snapshot.term for e in self.entries)
            self.entries = [e for e in self.entries if e.index > snapshot.index] if keep else []
            self.snapshot = snapshot
        if persist.entries:
            first = persist.entries[0].index
            self.entries = [e for e in self.entries if e.index < first] + list(persist.entries)
        if persist.hard_state is not None:
            self.hard_state = persist.hard_state

    def load(self) -> Persisted:
        fresh = self.hard_state == HardState() and self.snapshot is None and not self.entries
        return Persisted(self.hard_state, self.snapshot, tuple(self.entries), fresh)


def _voters(node: SimNode) -> frozenset[str]:
    """The voters ``node`` counts (if crashed: as it would on restarting from its store)."""
    if node.raft is not None:
        return node.raft.voters
    store = node.storage
    changes = [e for e in store.entries if e.kind is EntryKind.CONFIG]
    if changes:
        return ChangeEntry.decode(changes[-1].data).voters
    return store.snapshot.voters if store.snapshot else node.config.voters


def _rebuilding(store: MemoryStorage) -> bool:
    """Whether the node of ``store`` is recovering from an empty store, or about to."""
    return store.hard_state.recovering != 0 or store.load().fresh


def encode_state(commands: dict[int, bytes]) -> bytes:
    return bytes(msgpack.packb(sorted(commands.items())))


def decode_state(data: bytes) -> dict[int, bytes]:
    pairs: list[Any] = msgpack.unpackb(data) if data else []
    return {int(index): bytes(command) for index, command in pairs}


class SimNetwork:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self.faults = Faults()
        self._cut: set[frozenset[str]] = set()
        self._queue: list[tuple[int, int, Message]] = []
        self._seq = 0

    def cut(self, a: str, b: str) -> None:
        self._cut.add(frozenset((a, b)))

    def heal(self, a: str, b: str) -> None:
        self._cut.discard(frozenset((a, b)))

    def heal_all_paths(self) -> None:
        self._cut.clear()

    def heal_all(self) -> None:
        """Every path healed and every fault off."""
        self._cut.clear()
        self.faults = Faults()

    def is_cut(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self._cut

    def send(self, message: Message, now: int) -> None:
        faults = self.faults
        if self.is_cut(message.sender, message.to) or self._rng.random() < faults.loss:
            return
        copies = 2 if self._rng.random() < faults.duplicate else 1
        for _ in range(copies):
            self._seq += 1
            at = now + 1 + self._rng.randint(0, faults.max_delay)
            heapq.heappush(self._queue, (at, self._seq, message))

    def redeliver(self, messages: list[Message], now: int) -> None:
        """Messages that waited for a paused node, delivered next tick in their order."""
        for message in messages:
            self._seq += 1
            heapq.heappush(self._queue, (now + 1, self._seq, message))

    def due(self, now: int) -> list[Message]:
        """Messages arriving at ``now`` (a path cut meanwhile swallows them)."""
        out = []
        while self._queue and self._queue[0][0] <= now:
            _, _, message = heapq.heappop(self._queue)
            if not self.is_cut(message.sender, message.to):
                out.append(message)
        return out


@attrs.define(eq=False)
class SimNode:
    id: str
    config: RaftConfig
    storage: MemoryStorage = attrs.Factory(MemoryStorage)
    raft: Raft | None = None
    commands: dict[int, bytes] = attrs.Factory(dict)
    """The state machine: applied commands by log index."""
    crash_point: str | None = None
    """Crash while carrying out the next ``Ready``: "before-persist" or "before-send"."""
    paused: bool = False
    held: list[Message] = attrs.Factory(list)
    """Messages that arrived while it was paused."""

    def start(self, rng: random.Random) -> None:
        persisted = self.storage.load()
        self.config = attrs.evolve(self.config, rng=random.Random(rng.random()))
        self.raft = Raft(self.config, persisted)
        snapshot = persisted.snapshot
        self.commands = decode_state(snapshot.data) if snapshot else {}

    @property
    def up(self) -> bool:
        return self.raft is not None


class Simulation:
    """``size`` voters and ``spares`` non-voters over a ``SimNetwork``, all from one seed.

    ``compact_every``: a node snapshots its state machine once that many entries were applied since
    its last snapshot (0: never), keeping half of them in its log.
    """

    def __init__(
        self,
        size: int,
        seed: int,
        *,
        compact_every: int = 0,
        spares: int = 0,
        pre_vote: bool = True,
        check_quorum: bool = True,
    ) -> None:
        self.rng = random.Random(seed)
        self.network = SimNetwork(self.rng)
        self.now = 0
        self.compact_every = compact_every
        ids = [f"n{number}" for number in range(1, size + spares + 1)]
        founders = ids[:size]
        self.nodes = {
            node_id: SimNode(
                node_id,
                RaftConfig(
                    id=node_id,
                    voters=founders,
                    rng=self.rng,
                    pre_vote=pre_vote,
                    check_quorum=check_quorum,
                ),
            )
            for node_id in ids
        }
        for node in self.nodes.values():
            node.start(self.rng)
        self.checker = SafetyChecker()
        self.acked: dict[int, bytes] = {}
        """Writes acknowledged to their client: applied by the node that took the proposal."""
        self.proposed: dict[str, dict[int, bytes]] = {node_id: {} for node_id in ids}
        self.reads: dict[bytes, int] = {}
        """Pending read-index requests: the highest committed index when each was asked."""
        self.reads_answered = 0
        self._counter = 0
        self.wipes = 0
        """Stores lost so far (``Wipe``)."""

    # -- driving --------------------------------------------------------------------------

    def step(self) -> None:
        self.now += 1
        for node in self.nodes.values():
            if node.raft is not None and not node.paused:
                node.raft.tick()
        for message in self.network.due(self.now):
            node = self.nodes[message.to]
            if node.paused:
                node.held.append(message)
            elif node.raft is not None:
                node.raft.step(message)
        self.settle()

    def settle(self) -> None:
        for node in self.nodes.values():
            while node.raft is not None:
                ready = node.raft.ready()
                if not ready:
                    break
                self._carry_out(node, ready)
        self.checker.check([node.raft for node in self.nodes.values() if node.raft is not None])

    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            self.step()

    def _carry_out(self, node: SimNode, ready: Ready) -> None:
        raft = node.raft
        assert raft is not None
        if node.crash_point == "before-persist":
            self.crash(node.id)
            return
        node.storage.save(ready.must_persist)
        if node.crash_point == "before-send":
            self.crash(node.id)
            return
        for message in ready.then_send:
            self.network.send(message, self.now)
        if ready.install is not None:
            node.commands = decode_state(ready.install.data)
            self.checker.on_install(node.id, node.commands)
        for entry in ready.apply:
            self.checker.on_apply(node.id, entry)
            if entry.kind is EntryKind.COMMAND:
                node.commands[entry.index] = entry.data
                if self.proposed[node.id].get(entry.index) == entry.data:
                    self.acked[entry.index] = entry.data
        for state in ready.read_states:
            asked = self.reads.pop(state.context)
            if state.index < asked:
                raise SafetyViolation(f"read index {state.index} misses a write committed at {asked}")
            self.reads_answered += 1
        raft.advance(ready)
        if self.compact_every and raft.log.applied - raft.log.snapshot.index >= self.compact_every:
            index = raft.log.applied - self.compact_every // 2
            raft.compact(index, encode_state({i: d for i, d in node.commands.items() if i <= index}))

    # -- client operations ----------------------------------------------------------------

    def leader(self) -> Raft | None:
        """The leader of the highest term among live nodes not paused, if any."""
        leaders = [
            n.raft
            for n in self.nodes.values()
            if n.raft is not None and n.raft.role is Role.LEADER and not n.paused
        ]
        return max(leaders, key=lambda raft: raft.term, default=None)

    def propose(self) -> int | None:
        raft = self.leader()
        if raft is None:
            return None
        self._counter += 1
        data = f"w{self._counter}".encode()
        index = raft.propose(data)
        if not isinstance(index, int):
            return None
        self.proposed[raft.id][index] = data
        self.settle()
        return index

    def read(self) -> bool:
        raft = self.leader()
        if raft is None:
            return False
        self._counter += 1
        context = f"r{self._counter}".encode()
        self.reads[context] = self.checker.highest_committed
        if raft.read_index(context) is not None:
            del self.reads[context]
            return False
        self.settle()
        return True

    def change(self, node_id: str) -> int | None:
        """Have the leader add ``node_id`` as a voter, or remove it: the change's index, if taken.

        Not a removal that would leave the voters whose store is being rebuilt able to block every
        majority: the leader refuses those it can see (``VotersRecovering``), but not one made
        just after a store was lost unseen, which is beyond what the group tolerates, as losing a
        majority is (``may_wipe`` keeps to that limit the other way round)."""
        raft = self.leader()
        if raft is None:
            return None
        change: ConfigChange = AddVoter(node_id)
        if node_id in raft.voters:
            if raft.voters == {node_id}:
                return None
            change = RemoveVoter(node_id)
            left = raft.voters - {node_id}
            rebuilding = [voter for voter in left if _rebuilding(self.nodes[voter].storage)]
            if len(left) - len(rebuilding) < quorum(left):
                return None
        index = raft.propose_change(change)
        self.settle()
        return index if isinstance(index, int) else None

    # -- faults ---------------------------------------------------------------------------

    def crash(self, node_id: str) -> None:
        node = self.nodes[node_id]
        node.raft = None
        node.crash_point = None
        node.paused = False
        node.held.clear()
        self.proposed[node_id].clear()

    def restart(self, node_id: str) -> None:
        node = self.nodes[node_id]
        if node.raft is None:
            node.start(self.rng)

    def apply(self, action: Action) -> None:
        if isinstance(action, Cut):
            self.network.cut(action.a, action.b)
        elif isinstance(action, Isolate):
            self.isolate(action.node)
        elif isinstance(action, Heal):
            self.network.heal_all_paths()
        elif isinstance(action, Crash):
            if action.point is None:
                self.crash(action.node)
            else:
                self.nodes[action.node].crash_point = action.point
        elif isinstance(action, Restart):
            self.restart(action.node)
        elif isinstance(action, Pause):
            self.nodes[action.node].paused = self.nodes[action.node].up
        elif isinstance(action, Resume):
            self.resume()
        elif isinstance(action, Reboot | Wipe):
            self.crash(action.node)
            if isinstance(action, Wipe) and self.may_wipe(action.node):
                self.nodes[action.node].storage = MemoryStorage()
                self.wipes += 1
            self.restart(action.node)
        elif isinstance(action, SetFaults):
            self.network.faults = action.faults
        elif isinstance(action, ChangeVoters):
            self.change(action.node)
        else:
            leader = self.leader()
            if leader is not None and action.to in leader.voters:
                leader.transfer_leader(action.to)
                self.settle()

    def random_action(self) -> Action:
        """A fault (or a repair) drawn from the simulation's own generator."""
        rng = self.rng
        a, b = rng.sample(sorted(self.nodes), 2)
        faults = Faults(
            loss=rng.choice([0.0, 0.1, 0.3]),
            duplicate=rng.choice([0.0, 0.2]),
            max_delay=rng.choice([0, 3, 8]),
        )
        choices: list[Action] = [
            Cut(a, b),
            Isolate(a),
            Heal(),
            Crash(a, rng.choice([None, "before-persist", "before-send"])),
            Restart(a),
            Restart(b),
            Reboot(a),
            Pause(a),
            Resume(),
            Wipe(b),
            SetFaults(faults),
            Transfer(b),
        ]
        if len(self.nodes) > len(self.nodes[a].config.voters):
            choices.append(ChangeVoters(rng.choice(sorted(self.nodes))))
        return rng.choice(choices)

    def may_wipe(self, node_id: str) -> bool:
        """Whether losing ``node_id``'s store stays within what its group tolerates: no node is
        recovering (a recovering node counts as failed) and no node counts fewer than three
        voters (in a group of two, the other voter cannot be elected without the lost node's vote,
        which it gives only once a leader has caught it up: ``cluster.raft.recovery``)."""
        if any(_rebuilding(node.storage) for node in self.nodes.values()):
            return False
        return all(len(_voters(node)) >= 3 for node in self.nodes.values())

    def resume(self) -> None:
        for node in self.nodes.values():
            if node.paused:
                node.paused = False
                self.network.redeliver(node.held, self.now)
                node.held.clear()

    def isolate(self, node_id: str) -> None:
        for other in self.nodes:
            if other != node_id:
                self.network.cut(node_id, other)

    def heal(self) -> None:
        """Every path healed, every fault off (pending crashes too), every paused node resumed,
        every crashed node restarted."""
        self.network.heal_all()
        self.resume()
        for node_id, node in self.nodes.items():
            node.crash_point = None
            self.restart(node_id)

    # -- liveness -------------------------------------------------------------------------

    def members(self) -> list[SimNode]:
        """The nodes the leader counts as voters (none without a leader)."""
        leader = self.leader()
        return [self.nodes[voter] for voter in sorted(leader.voters)] if leader else []

    def converged(self) -> bool:
        """One leader (a voter) all voters follow, none of them recovering from an empty store
        (``cluster.raft.recovery``), each having applied all the leader committed."""
        leader = self.leader()
        if leader is None or leader.id not in leader.voters:
            return False
        for node in self.members():
            raft = node.raft
            if raft is None or raft.leader != leader.id or raft.term != leader.term:
                return False
            if raft.recovering:
                return False
            if raft.log.applied != leader.log.committed:
                return False
        return True

    def commit_one(self, within: int) -> int:
        """Write until a write is acknowledged: the ticks it took.

        A write its leader took may still be lost if that leader is deposed before it commits (the
        client saw no acknowledgement and would retry): then this writes again.
        """
        pending: tuple[Raft, int, int] | None = None
        for spent in range(within + 1):
            if pending is not None:
                raft, term, index = pending
                if index in self.acked:
                    return spent
                if raft.role is not Role.LEADER or raft.term != term:
                    pending = None
            if pending is None:
                leader = self.leader()
                index_or_none = self.propose()
                if leader is not None and index_or_none is not None:
                    pending = (leader, leader.term, index_or_none)
                    continue
            self.step()
        raise AssertionError(f"no write acknowledged within {within} ticks (at tick {self.now})")

    def wait_until(self, condition: Callable[[], bool], within: int) -> int:
        """Step until ``condition()`` holds; the ticks it took (SafetyViolation-free), or raise."""
        for spent in range(within + 1):
            if condition():
                return spent
            self.step()
        raise AssertionError(f"not live within {within} ticks (at tick {self.now})")
