"""The Raft consensus algorithm as a pure state machine, in the style of etcd's ``raft``.

A ``Raft`` is one node of a replica group. It does no I/O, reads no clock and starts no tasks:

* inputs: ``tick()`` (time passes), ``step(message)`` (a peer spoke), ``propose(data)``,
  ``propose_change(change)``, ``read_index(context)``, ``transfer_leader(to)``,
  ``compact(index, data)``;
* outputs: ``ready()`` gathers what the host must persist, send, install and apply, in that order
  (see ``cluster.raft.ready``), and ``advance(ready)`` tells the ``Raft`` it was done.

Behaviours: leader election with randomized timeouts; pre-vote, so a node that was cut off does not
depose a healthy leader when it returns; check-quorum, so a leader that cannot reach a majority for
an election timeout steps down (and a node that hears from its leader ignores disruptive votes);
log replication with conflict truncation and term-hinted backtracking; commit of current-term
entries by majority; snapshots (``compact``, and InstallSnapshot for followers that fell behind the
leader's compaction); read-index reads; leadership transfer.

Membership changes one voter at a time (``propose_change``; rules in ``cluster.raft.membership``).
The voters in force (``voters``) are those of the last change entry in the log, else the
snapshot's, else the founding ``RaftConfig.voters``; every majority (votes, commit, check-quorum,
read index) and every transfer is over them. A node outside them does not campaign (unless only an
uncommitted change removed it: ``_promotable``); a leader that removed itself steps down once that
change commits.

Requests are heard whoever sends them, as the dissertation prescribes (servers process RPCs without
consulting their configuration): a node added by a change it has not received yet, or one lagging
behind the change that added the current leader, must still take that leader's appends and
snapshots, and must still vote for a candidate its stale voter set does not list (else a group
whose only complete log is on such a candidate could never elect). Safety does not depend on it:
every majority is counted over the counting node's voters in force. A removed node that does not
know it was removed cannot disrupt the group while pre-vote or check-quorum is on (its log falls
behind, so pre-votes are refused; its requests meet leader leases). Only answers to a leader
(append and heartbeat responses) from a node outside the voters in force are dropped, as before
membership could change: the leader no longer tracks it.
"""

from __future__ import annotations

from collections.abc import Mapping

from cluster.raft.config import RaftConfig
from cluster.raft.errors import LeadershipTransferring, NotLeader, Refusal
from cluster.raft.leader import Leadership
from cluster.raft.log import RaftLog
from cluster.raft.membership import ConfigChange
from cluster.raft.messages import (
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    Snapshot,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from cluster.raft.ready import HardState, Persist, Persisted, ReadState, Ready, Role, SoftState
from cluster.raft.recovery import ELECTIONS_TO_WAIT, may_vote, new_recovery
from cluster.raft.tracker import Progress, has_quorum

__all__ = ["Raft"]

_FROM_LEADER = (AppendEntries, Heartbeat, InstallSnapshot)
_TO_LEADER = (AppendResponse, HeartbeatResponse)


def _names_future_term(message: Message) -> bool:
    """A pre-vote, or a pre-vote granted: its term is one nobody has entered yet."""
    if isinstance(message, VoteRequest):
        return message.pre
    return isinstance(message, VoteResponse) and message.pre and message.granted


class Raft:
    """One node of a replica group, rebuilt from what its host ``persisted`` (a node whose store
    is ``fresh`` recovers first: ``cluster.raft.recovery``). Without ``persisted``, a node with
    an empty log that is not recovering (as tests build the nodes of a running group)."""

    def __init__(self, config: RaftConfig, persisted: Persisted | None = None) -> None:
        self.config = config
        self.id = config.id
        hard = persisted.hard_state if persisted else HardState()
        snapshot = persisted.snapshot if persisted and persisted.snapshot else None
        self.log = RaftLog(
            snapshot or Snapshot(0, 0, config.voters),
            persisted.entries if persisted else (),
            hard.commit,
        )
        self.term = hard.term
        self.vote = hard.vote
        fresh = persisted is not None and persisted.fresh
        self.recovering = new_recovery(config.rng) if fresh else hard.recovering
        """Nonzero while this node recovers from an empty store (``cluster.raft.recovery``)."""
        self.recovered = 0 if fresh else hard.recovered
        """Its last recovery that is over (0: none since its store began)."""
        self._alive = 0
        """Ticks since this ``Raft`` was made (a recovery lasts some elections at least)."""
        self.role = Role.FOLLOWER
        self.leader: str | None = None
        self._lead: Leadership | None = None
        self._votes: dict[str, bool] = {}
        self._election_elapsed = 0
        self._timeout = 0
        self._reset_timeout()
        self._outbox: list[Message] = []
        self._read_states: list[ReadState] = []
        self._snapshot_to_persist: Snapshot | None = None
        self._snapshot_to_install: Snapshot | None = None
        self._hard = hard
        self._soft = SoftState(None, Role.FOLLOWER)

    # -- inputs ---------------------------------------------------------------------------

    def tick(self) -> None:
        self._election_elapsed += 1
        self._alive += 1
        if self._lead is not None:
            if not self._lead.tick():
                self._become_follower(self.term, None)
            else:
                self._election_elapsed = self._lead.check_elapsed
            self._collect_reads()
            return
        if self._election_elapsed >= self._timeout and self._promotable():
            # (A node that may not campaign lets the time run on: its leader lease lapses.)
            self._campaign(pre=self.config.pre_vote)

    def propose(self, data: bytes) -> int | NotLeader | LeadershipTransferring:
        """Append ``data`` to the log: its index, or why not (only the leader takes proposals)."""
        if self._lead is None:
            return NotLeader(self.leader)
        return self._lead.propose(data)

    def propose_change(self, change: ConfigChange) -> int | Refusal:
        """Append a membership change (in force at once): its index, or why not.

        Refused (``ChangePending``) while another change or this leader's first entry is
        uncommitted; raises ``InvalidChange`` if it makes no sense for the voters in force.
        """
        if self._lead is None:
            return NotLeader(self.leader)
        index = self._lead.propose_change(change)
        self._maybe_retire()
        return index

    @property
    def voters(self) -> frozenset[str]:
        """The voters in force: those of the last membership change in the log."""
        return self.log.voters

    def read_index(self, context: bytes) -> Refusal | None:
        """Ask for a linearizable read point: a ``ReadState`` with ``context`` comes in a ``Ready``."""
        if self._lead is None:
            return NotLeader(self.leader)
        self._lead.read_index(context)
        self._collect_reads()
        return None

    def transfer_leader(self, to: str) -> Refusal | None:
        """Hand leadership to ``to`` once its log is caught up (it campaigns at once, no pre-vote)."""
        if self._lead is None:
            return NotLeader(self.leader)
        self._lead.transfer(to)
        return None

    def take_over(self) -> bool:
        """Campaign at once, as a leadership transfer's target does (no pre-vote, past the other
        voters' leases): an operator's failover to this node. Like any candidate it wins only with
        a log as complete as a majority's. False: it leads already, or may not campaign."""
        if self._lead is not None or not self._promotable():
            return False
        self._campaign(pre=False, transfer=True)
        return True

    def compact(self, index: int, data: bytes) -> Snapshot:
        """The state machine as of ``index`` (applied) is ``data``: drop the log up to there."""
        snapshot = self.log.compact(index, data)
        self._snapshot_to_persist = snapshot
        return snapshot

    def step(self, message: Message) -> None:
        if message.to != self.id or message.sender == self.id:
            return
        if isinstance(message, _TO_LEADER) and message.sender not in self.voters:
            return
        if message.term > self.term:
            if isinstance(message, VoteRequest) and self._in_lease() and not message.transfer:
                return
            if not _names_future_term(message):
                leader = message.sender if isinstance(message, _FROM_LEADER) else None
                self._become_follower(message.term, leader)
        elif message.term < self.term:
            self._step_stale(message)
            return
        if isinstance(message, VoteRequest):
            self._on_vote_request(message)
        elif self._lead is not None:
            self._step_leader(message)
        elif self.role in (Role.CANDIDATE, Role.PRE_CANDIDATE):
            self._step_candidate(message)
        else:
            self._step_follower(message)

    # -- outputs --------------------------------------------------------------------------

    def ready(self) -> Ready:
        hard = self.hard_state
        soft = SoftState(self.leader, self.role)
        outbox, self._outbox = self._outbox, []
        reads, self._read_states = self._read_states, []
        return Ready(
            must_persist=Persist(
                hard_state=hard if hard != self._hard else None,
                snapshot=self._snapshot_to_persist,
                entries=self.log.unpersisted(),
            ),
            then_send=tuple(outbox),
            install=self._snapshot_to_install,
            apply=self.log.unapplied(),
            soft_state=soft if soft != self._soft else None,
            read_states=tuple(reads),
        )

    def advance(self, ready: Ready) -> None:
        """The host carried ``ready`` out: it is durable, sent and applied."""
        persist = ready.must_persist
        if persist.hard_state is not None:
            self._hard = persist.hard_state
        if persist.snapshot is not None and persist.snapshot == self._snapshot_to_persist:
            self._snapshot_to_persist = None
        if ready.install is not None and ready.install == self._snapshot_to_install:
            self._snapshot_to_install = None
        if persist.entries:
            last = persist.entries[-1]
            self.log.persisted_to(last.index, last.term)
        if ready.apply:
            self.log.applied_to(ready.apply[-1].index)
        if ready.soft_state is not None:
            self._soft = ready.soft_state
        if self._lead is not None:
            self._lead.on_persisted()
            self._collect_reads()
            self._maybe_retire()

    @property
    def progress(self) -> Mapping[str, Progress]:
        """Each voter's replication progress as the leader tracks it (empty unless leader)."""
        return self._lead.progress if self._lead is not None else {}

    @property
    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed, self.recovering, self.recovered)

    # -- roles ----------------------------------------------------------------------------

    def _reset_timeout(self) -> None:
        self._election_elapsed = 0
        ticks = self.config.election_ticks
        self._timeout = ticks + self.config.rng.randrange(ticks)

    def _become_follower(self, term: int, leader: str | None) -> None:
        if term != self.term:
            self.term = term
            self.vote = None
        self.role = Role.FOLLOWER
        self.leader = leader
        self._lead = None
        self._votes = {}
        self._reset_timeout()

    def _campaign(self, *, pre: bool, transfer: bool = False) -> None:
        self._lead = None
        self.leader = None
        self._reset_timeout()
        self._votes = {self.id: True}
        if pre:
            self.role = Role.PRE_CANDIDATE
            term = self.term + 1
        else:
            self.role = Role.CANDIDATE
            self.term += 1
            self.vote = self.id
            term = self.term
        for voter in sorted(self.voters - {self.id}):
            self._send(
                VoteRequest(
                    sender=self.id,
                    to=voter,
                    term=term,
                    last_index=self.log.last_index,
                    last_term=self.log.last_term,
                    pre=pre,
                    transfer=transfer,
                    recovering=self.recovering,
                )
            )
        self._tally()

    def _tally(self) -> None:
        granted = [voter for voter, yes in self._votes.items() if yes]
        rejected = [voter for voter, yes in self._votes.items() if not yes]
        if has_quorum(self.voters, granted):
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(pre=False)
            else:
                self._become_leader()
        elif has_quorum(self.voters, rejected):
            self._become_follower(self.term, None)

    def _become_leader(self) -> None:
        self._recovery_over()  # (only a group forming elects a recovering node: rule 1)
        self.role = Role.LEADER
        self.leader = self.id
        self._votes = {}
        self._election_elapsed = 0
        self._lead = Leadership(self.config, self.term, self.log, self._send)

    def _promotable(self) -> bool:
        """Whether this node may campaign: it is a voter in force, or was one as of its commit.

        The second case is a node whose log ends in an uncommitted change removing it: its log may
        be the only complete one (a leader that removed itself and lost leadership before the
        change committed), and refusing to campaign would then block every election. Winning is
        still decided by a majority of the voters in force; such a leader commits the change with
        its first entry and then retires (``_maybe_retire``).
        """
        if self.recovering and self.log.last_index:
            return False  # (it may lack what it acknowledged before: rule 1)
        return self.id in self.voters or self.id in self.log.members.at(self.log.committed)

    def _in_lease(self) -> bool:
        """Whether we heard from a live leader within an election timeout (check-quorum only)."""
        return (
            self.config.check_quorum
            and self.leader is not None
            and self._election_elapsed < self.config.election_ticks
        )

    # -- stepping -------------------------------------------------------------------------

    def _step_stale(self, message: Message) -> None:
        """A message from an earlier term: mostly ignored, but it may free a stuck peer."""
        if isinstance(message, (AppendEntries, Heartbeat)) and (
            self.config.check_quorum or self.config.pre_vote
        ):
            # A deposed leader (or one whose term we ran past while cut off) learns our term.
            self._send(AppendResponse(sender=self.id, to=message.sender, term=self.term, index=0))
        elif isinstance(message, VoteRequest):
            # A candidate behind our term learns it (Raft's RequestVote reply carries the term): it
            # may be the one node whose log can win, and voters that know our term may never write
            # to it (their voter sets, older than its own, may not list it).
            self._send(
                VoteResponse(
                    sender=self.id, to=message.sender, term=self.term, granted=False, pre=message.pre
                )
            )

    def _on_vote_request(self, message: VoteRequest) -> None:
        can_vote = (
            self.vote == message.sender
            or (self.vote is None and self.leader is None)
            or (message.pre and message.term > self.term)
        )
        if (
            can_vote
            and may_vote(self.recovering, self.log.last_index, message)
            and self.log.is_up_to_date(message.last_index, message.last_term)
        ):
            self._send(
                VoteResponse(
                    sender=self.id, to=message.sender, term=message.term, granted=True, pre=message.pre
                )
            )
            if not message.pre:
                self._election_elapsed = 0
                self.vote = message.sender
                self._recovery_over()  # (a vote between recovering empty logs: the group is forming)
        else:
            self._send(
                VoteResponse(
                    sender=self.id, to=message.sender, term=self.term, granted=False, pre=message.pre
                )
            )

    def _step_leader(self, message: Message) -> None:
        assert self._lead is not None
        if isinstance(message, AppendResponse):
            self._lead.on_append_response(message)
        elif isinstance(message, HeartbeatResponse):
            self._lead.on_heartbeat_response(message)
        self._collect_reads()
        self._maybe_retire()

    def _maybe_retire(self) -> None:
        """A committed change removed this leader: hand over to a caught-up voter and step down."""
        if self._lead is None or not self._lead.retired:
            return
        successor = self._lead.successor()
        if successor is not None:
            self._send(TimeoutNow(sender=self.id, to=successor, term=self.term))
        self._become_follower(self.term, None)

    def _step_candidate(self, message: Message) -> None:
        if isinstance(message, _FROM_LEADER):
            self._become_follower(self.term, message.sender)
            self._step_follower(message)
        elif isinstance(message, VoteResponse) and message.pre == (self.role is Role.PRE_CANDIDATE):
            self._votes.setdefault(message.sender, message.granted)
            self._tally()

    def _step_follower(self, message: Message) -> None:
        if isinstance(message, _FROM_LEADER):
            self._election_elapsed = 0
            self.leader = message.sender
        if isinstance(message, AppendEntries):
            self._on_append(message)
        elif isinstance(message, Heartbeat):
            self.log.commit_to(message.commit)
            if self.recovering and message.recovered == self.recovering:
                self._end_recovery()
            self._send(
                HeartbeatResponse(
                    sender=self.id,
                    to=message.sender,
                    term=self.term,
                    read_seq=message.read_seq,
                    recovering=self.recovering,
                    recovered=self.recovered,
                )
            )
        elif isinstance(message, InstallSnapshot):
            self._on_snapshot(message)
        elif isinstance(message, TimeoutNow) and self._promotable():
            self._campaign(pre=False, transfer=True)

    def _on_append(self, message: AppendEntries) -> None:
        if message.prev_index < self.log.committed:
            self._acknowledge(message.sender, self.log.committed)
            return
        last = self.log.maybe_append(message.prev_index, message.prev_term, message.entries)
        if last is not None:
            self.log.commit_to(min(message.commit, last))
            self._acknowledge(message.sender, last)
            return
        hint_index, hint_term = self.log.find_conflict_by_term(message.prev_index, message.prev_term)
        self._send(
            AppendResponse(
                sender=self.id,
                to=message.sender,
                term=self.term,
                index=message.prev_index,
                reject=True,
                hint_index=hint_index,
                hint_term=hint_term,
                recovering=self.recovering,
                recovered=self.recovered,
            )
        )

    def _on_snapshot(self, message: InstallSnapshot) -> None:
        snapshot = message.snapshot
        if snapshot.index > self.log.committed:
            if self.log.matches(snapshot.index, snapshot.term):
                self.log.commit_to(snapshot.index)
            else:
                self.log.restore(snapshot)
                self._snapshot_to_persist = self._snapshot_to_install = snapshot
        self._acknowledge(message.sender, self.log.committed)

    def _acknowledge(self, leader: str, index: int) -> None:
        self._send(
            AppendResponse(
                sender=self.id,
                to=leader,
                term=self.term,
                index=index,
                recovering=self.recovering,
                recovered=self.recovered,
            )
        )

    def _end_recovery(self) -> None:
        """The leader holds this node whole: its recovery ends, once it has run long enough
        (``cluster.raft.recovery``, rule 4)."""
        if self._alive < ELECTIONS_TO_WAIT * self.config.election_ticks:
            return
        self._recovery_over()
        if self.vote is None:
            self.vote = self.leader

    def _recovery_over(self) -> None:
        """Its recovery, if any, is over: its answers say so from now on (a leader that heard its
        nonce late then knows them from its previous life's, ``cluster.raft.recovery`` rule 2)."""
        if self.recovering:
            self.recovered, self.recovering = self.recovering, 0

    # -- helpers --------------------------------------------------------------------------

    def _send(self, message: Message) -> None:
        self._outbox.append(message)

    def _collect_reads(self) -> None:
        if self._lead is not None and self._lead.released:
            self._read_states.extend(self._lead.released)
            self._lead.released.clear()
