"""A leader's term of office: replication to each voter, commit, reads, and handing over.

A ``Leadership`` lives from a node's election to the end of its term. It tracks each voter's
``Progress``, sends appends, heartbeats and snapshots through ``send``, advances the commit mark
(only ever to an entry of its own term held by a majority: Raft §5.4.2, so entries of earlier terms
commit only beneath one of its own), confirms read indexes with a round of heartbeats, and hands
leadership over on request. The leader's own copy counts toward a majority only once persisted
(``on_persisted``): an acknowledged entry is on a majority of disks, the leader's included.

A voter recovering from a lost store (``cluster.raft.recovery``) counts in no majority: not for a
commit, not in a round of heartbeats that confirms leadership, not for check-quorum. A leader tells
it its recovery is over only after a round started once it held the floor was answered by a
majority of the others: a leader cut off from them (a stale one, frozen while a successor was
elected) cannot use the recovering node to make a majority.

Majorities are always over the voters in force (``log.voters``), which a membership change
(``propose_change``) alters the moment it is appended (``cluster.raft.membership``): a new voter
gets a ``Progress`` and is sent the log at once, a removed one is dropped. A leader that removed
itself still replicates but no longer counts its own copy; ``retired`` says when that change has
committed and it must step down.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from cluster.raft.config import RaftConfig
from cluster.raft.errors import (
    ChangePending,
    LeadershipTransferring,
    UnknownPeer,
    VotersRecovering,
)
from cluster.raft.log import RaftLog
from cluster.raft.membership import ChangeEntry, ConfigChange, apply_change
from cluster.raft.messages import (
    AppendEntries,
    AppendResponse,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    TimeoutNow,
)
from cluster.raft.ready import ReadState
from cluster.raft.recovery import awaits_confirmation, heard, recovered
from cluster.raft.tracker import Progress, ProgressState, committed_index, has_quorum, quorum

__all__ = ["Leadership"]


@attrs.define
class _PendingRead:
    round: int
    """The round of heartbeats that confirms it (released once a majority answered it)."""
    index: int
    context: bytes


class Leadership:
    def __init__(
        self, config: RaftConfig, term: int, log: RaftLog, send: Callable[[Message], None]
    ) -> None:
        self._config = config
        self._id = config.id
        self.term = term
        self._log = log
        self._send = send
        self.progress = {self._id: Progress(match=log.persisted, recent_active=True)}
        self.progress[self._id].become_replicate()
        self._heartbeat_elapsed = 0
        self.check_elapsed = 0
        self.transferee: str | None = None
        self._transfer_elapsed = 0
        self._round = 0
        """The last round of heartbeats started to confirm this leadership (``read_seq``)."""
        self._answered: dict[str, int] = {}
        """The last round each voter answered (while not recovering)."""
        self.confirmed = 0
        """The last round a majority of voters answered: leadership was confirmed after it began."""
        self._reads: list[_PendingRead] = []
        self._reads_waiting: list[bytes] = []
        self.released: list[ReadState] = []
        """Read states confirmed and not yet taken by the ``Raft``."""
        self._track_voters(log.voters)
        self.first_index = log.last_index + 1
        """The first entry of this term: no membership change before it commits."""
        log.append((Entry(self.first_index, term, kind=EntryKind.NOOP),))
        self.broadcast_append()

    # -- inputs from the Raft --------------------------------------------------------------

    def tick(self) -> bool:
        """One tick: heartbeats, check-quorum and transfer timeouts. False: step down now."""
        self._heartbeat_elapsed += 1
        if self._heartbeat_elapsed >= self._config.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            self._broadcast_heartbeat()
        if self.transferee is not None:
            self._transfer_elapsed += 1
            if self._transfer_elapsed >= self._config.election_ticks:
                self.transferee = None
        self.check_elapsed += 1
        if self.check_elapsed < self._config.election_ticks:
            return True
        self.check_elapsed = 0
        active = [
            v
            for v, progress in self.progress.items()
            if progress.recent_active and not progress.recovering
        ]
        for voter, progress in self.progress.items():
            progress.was_active, progress.recent_active = progress.recent_active, voter == self._id
        return not self._config.check_quorum or has_quorum(self._log.voters, active)

    def propose(self, data: bytes) -> int | LeadershipTransferring:
        if self.transferee is not None:
            return LeadershipTransferring(self.transferee)
        entry = Entry(self._log.last_index + 1, self.term, data)
        self._log.append((entry,))
        self.broadcast_append(send_if_empty=False)
        return entry.index

    def propose_change(
        self, change: ConfigChange
    ) -> int | LeadershipTransferring | ChangePending | VotersRecovering:
        """Append a membership change, in force at once (raises ``InvalidChange`` if senseless)."""
        if self.transferee is not None:
            return LeadershipTransferring(self.transferee)
        waiting_for = max(self.first_index, self._log.members.last_change)
        if self._log.committed < waiting_for:
            return ChangePending(waiting_for)
        voters = apply_change(self._log.voters, change)
        doubtful = frozenset(voter for voter in voters if self._may_recover(voter))
        if len(voters) - len(doubtful) < quorum(voters):
            return VotersRecovering(doubtful)
        entry = Entry(
            self._log.last_index + 1, self.term, ChangeEntry(change, voters).encode(), EntryKind.CONFIG
        )
        self._track_voters(voters)
        self._log.append((entry,))
        if not self._after_match_moved():
            self.broadcast_append(send_if_empty=False)
        return entry.index

    @property
    def retired(self) -> bool:
        """Whether a committed change removed this leader: it must step down now."""
        return self._id not in self._log.voters and self._log.committed >= self._log.members.last_change

    def successor(self) -> str | None:
        """A voter whose log is complete, to hand over to when retiring (None if none is)."""
        for voter in sorted(self._log.voters):
            progress = self.progress[voter]
            if progress.match == self._log.last_index and not progress.recovering:
                return voter
        return None

    def read_index(self, context: bytes) -> None:
        """Confirm leadership for a read at the current commit (answers arrive in ``released``)."""
        if self._log.term(self._log.committed) != self.term:
            # Until an entry of this term commits, our commit mark may lag the true one.
            self._reads_waiting.append(context)
            return
        if has_quorum(self._log.voters, (self._id,)):
            self.released.append(ReadState(self._log.committed, context))
            return
        self._reads.append(_PendingRead(self._start_round(), self._log.committed, context))

    def transfer(self, to: str) -> None:
        if to not in self._log.voters:
            raise UnknownPeer(to)
        if to == self._id or to == self.transferee:
            return
        self.transferee = to
        self._transfer_elapsed = 0
        self._maybe_hand_over()

    def on_persisted(self) -> None:
        """The log is durable up to ``log.persisted``: count our own copy."""
        if self.progress[self._id].maybe_update(self._log.persisted):
            self._after_match_moved()

    def on_append_response(self, message: AppendResponse) -> None:
        progress = self.progress[message.sender]
        if not self._hear(progress, message.recovering, message.recovered):
            return
        progress.recent_active = True
        if message.reject:
            probe_at = message.hint_index
            if message.hint_term > 0:
                probe_at, _ = self._log.find_conflict_by_term(message.hint_index, message.hint_term)
            if progress.maybe_decrease(message.index, probe_at):
                if progress.state is ProgressState.REPLICATE:
                    progress.become_probe()
                self.send_append(message.sender)
            return
        probing = progress.state is ProgressState.PROBE
        if not (progress.maybe_update(message.index) or (probing and progress.match == message.index)):
            return
        progress.acknowledged(message.index)
        if awaits_confirmation(progress):
            progress.confirm_round = self._start_round()
        if probing:
            progress.become_replicate()
        elif progress.state is ProgressState.SNAPSHOT and progress.match + 1 >= self._log.first_index:
            progress.become_probe()
            progress.become_replicate()
        if not self._after_match_moved():
            while self.send_append(message.sender, send_if_empty=False):
                pass
        if message.sender == self.transferee:
            self._maybe_hand_over()

    def on_heartbeat_response(self, message: HeartbeatResponse) -> None:
        progress = self.progress[message.sender]
        if not self._hear(progress, message.recovering, message.recovered):
            return
        progress.recent_active = True
        progress.paused = False
        progress.heartbeat_answered(self._config.max_inflight_appends, self._config.max_inflight_bytes)
        if progress.state is ProgressState.SNAPSHOT:
            # The snapshot may have been lost: probe again, which resends it if still needed.
            progress.become_probe()
        if progress.match < self._log.last_index or progress.state is ProgressState.PROBE:
            self.send_append(message.sender)
        if message.read_seq > self._answered.get(message.sender, 0) and not progress.recovering:
            self._answered[message.sender] = message.read_seq
            self._confirm()

    def _hear(self, progress: Progress, recovering: int, recovered: int) -> bool:
        """A response carrying ``recovering`` and ``recovered`` arrived (``recovery.heard``):
        False, drop it. A follower whose recovery is over counts again, which may commit what it
        holds."""
        was_recovering = progress.recovering
        if not heard(progress, recovering, recovered, self._log.last_index):
            return False
        if was_recovering and not progress.recovering:
            self._after_match_moved()
        return True

    # -- replication ----------------------------------------------------------------------

    def send_append(self, to: str, *, send_if_empty: bool = True) -> bool:
        """Send ``to`` what it lacks (a snapshot if we compacted it away). False: nothing sent."""
        if to == self._id:
            return False
        progress = self.progress[to]
        config = self._config
        if progress.is_paused() or (
            progress.state is ProgressState.REPLICATE
            and progress.full(config.max_inflight_appends, config.max_inflight_bytes)
        ):
            return False
        prev_index = progress.next - 1
        prev_term = self._log.term(prev_index)
        if prev_term is None:
            snapshot = self._log.snapshot
            self._send(InstallSnapshot(sender=self._id, to=to, term=self.term, snapshot=snapshot))
            progress.become_snapshot(snapshot.index)
            return True
        last = min(self._log.last_index, prev_index + config.max_entries_per_append)
        entries = _within(self._log.slice(progress.next, last), config.max_bytes_per_append)
        if not entries and not send_if_empty:
            return False
        self._send(
            AppendEntries(
                sender=self._id,
                to=to,
                term=self.term,
                prev_index=prev_index,
                prev_term=prev_term,
                entries=entries,
                commit=self._log.committed,
            )
        )
        if progress.state is ProgressState.REPLICATE:
            if entries:
                progress.next = entries[-1].index + 1
                progress.sent(entries[-1].index, sum(len(entry.data) for entry in entries))
        else:
            progress.paused = True
        return True

    def broadcast_append(self, *, send_if_empty: bool = True) -> None:
        for voter in sorted(self.progress):
            self.send_append(voter, send_if_empty=send_if_empty)

    def _start_round(self) -> int:
        """Start a round of heartbeats that confirms leadership (answered: ``confirmed``)."""
        self._round += 1
        if has_quorum(self._log.voters, (self._id,)):
            self._confirm()
        else:
            self._broadcast_heartbeat()
        return self._round

    def _broadcast_heartbeat(self) -> None:
        for voter in sorted(self.progress):
            if voter != self._id:
                progress = self.progress[voter]
                commit = min(progress.match, self._log.committed)
                self._send(
                    Heartbeat(
                        sender=self._id,
                        to=voter,
                        term=self.term,
                        commit=commit,
                        read_seq=self._round,
                        recovered=recovered(progress, self.confirmed),
                    )
                )

    def _after_match_moved(self) -> bool:
        """Commit what a majority now holds, if it is of our term. True: commit moved (and sent)."""
        progress = self.progress
        index = committed_index(
            {v: 0 if progress[v].recovering else progress[v].match for v in self._log.voters}
        )
        if index <= self._log.committed or self._log.term(index) != self.term:
            return False
        self._log.commit_to(index)
        waiting, self._reads_waiting = self._reads_waiting, []
        for context in waiting:
            self.read_index(context)
        self.broadcast_append()
        return True

    def _confirm(self) -> None:
        """Move ``confirmed`` to the last round a majority answered; release the reads it confirms."""
        answered = {voter: self._answered.get(voter, 0) for voter in self._log.voters}
        if self._id in answered:
            answered[self._id] = self._round
        self.confirmed = max(self.confirmed, committed_index(answered))
        done = 0
        while done < len(self._reads) and self._reads[done].round <= self.confirmed:
            read = self._reads[done]
            self.released.append(ReadState(read.index, read.context))
            done += 1
        del self._reads[:done]

    def _track_voters(self, voters: frozenset[str]) -> None:
        """Give each of ``voters`` a ``Progress`` (probing from the entry about to be appended,
        so it is sent at once), and forget the others."""
        for voter in voters - self.progress.keys():
            self.progress[voter] = Progress(next=self._log.last_index + 1, unheard=True)
        for gone in self.progress.keys() - voters - {self._id}:
            del self.progress[gone]

    def _may_recover(self, voter: str) -> bool:
        """Whether ``voter`` may be recovering from an empty store (``cluster.raft.recovery``):
        it said so, or this leader has not heard from it yet, or not lately (in this check-quorum
        round or the last: it may have lost its store since it last answered)."""
        progress = self.progress.get(voter)
        return voter != self._id and (
            progress is None
            or progress.unheard
            or progress.recovering
            or not (progress.recent_active or progress.was_active)
        )

    def _maybe_hand_over(self) -> None:
        to = self.transferee
        if to is None:
            return
        progress = self.progress[to]
        if progress.match == self._log.last_index and not progress.recovering:
            # (A recovering node could not win: only recovering voters vote for it.)
            self._send(TimeoutNow(sender=self._id, to=to, term=self.term))
        else:
            self.send_append(to)


def _within(entries: tuple[Entry, ...], budget: int) -> tuple[Entry, ...]:
    """The first of ``entries`` whose data fits ``budget`` together (at least one)."""
    size = 0
    for count, entry in enumerate(entries):
        size += len(entry.data)
        if size > budget and count:
            return entries[:count]
    return entries
