"""What a ``Raft`` asks of its host, and what the host hands back after a crash.

The host drives a ``Raft`` in a loop: give it inputs (ticks, messages, proposals), then take a
``Ready`` and carry it out **in this order**:

1. ``ready.must_persist``: make it durable (fsync, or whatever the node's durability policy calls
   durable). A snapshot first (log entries after it survive only if the entry at its index has its
   term; otherwise the whole stored log goes), then the entries (the first of them replaces the
   stored entry at its index and everything after), then the hard state.
2. ``ready.then_send``: only now send the messages. Votes granted and appends acknowledged in them
   promise that (1) is on disk; a node that sent them and then crashed with (1) lost could vote
   twice in a term or forget a committed entry.
3. ``ready.install`` (a snapshot from the leader: replace the state machine with it) and then
   ``ready.apply`` (committed entries, in order), to the state machine. Only ``COMMAND`` entries
   are the state machine's: ``NOOP`` entries carry nothing, and a ``CONFIG`` entry is a
   membership change (``ChangeEntry.decode(entry.data)``) that was in force in the ``Raft`` since
   it was appended; its being applied tells the host it committed (``raft.voters`` is always
   the set in force, an installed snapshot's included).
4. ``raft.advance(ready)``.

Crashing anywhere in this sequence is safe as long as the order holds: after a restart the host
rebuilds the ``Raft`` from what it persisted (``Persisted``) and its state machine from the stored
snapshot; the ``Raft`` then hands committed entries after the snapshot to ``apply`` again.

Read-index answers come back in ``read_states``: serve a linearizable read for that request once
the state machine has applied up to its index.
"""

from __future__ import annotations

import enum

import attrs

from cluster.raft.messages import Entry, Message, Snapshot

__all__ = ["HardState", "Persist", "Persisted", "ReadState", "Ready", "Role", "SoftState"]


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@attrs.frozen
class HardState:
    """What must survive a crash besides the log: the term, the vote in it, the commit mark,
    whether the node is recovering from an empty store (``cluster.raft.recovery``; its nonce), and
    the last such recovery that is over (0: none since its store began)."""

    term: int = 0
    vote: str | None = None
    commit: int = 0
    recovering: int = 0
    recovered: int = 0


@attrs.frozen
class SoftState:
    """Who leads and what this node is; for observers, never persisted."""

    leader: str | None
    role: Role


@attrs.frozen
class ReadState:
    """The read-index request ``context`` may be served once ``index`` is applied."""

    index: int
    context: bytes


@attrs.frozen
class Persist:
    """Everything to make durable before any message of the same ``Ready`` leaves."""

    hard_state: HardState | None = None
    snapshot: Snapshot | None = None
    entries: tuple[Entry, ...] = ()

    def __bool__(self) -> bool:
        return self.hard_state is not None or self.snapshot is not None or bool(self.entries)


@attrs.frozen
class Ready:
    must_persist: Persist
    then_send: tuple[Message, ...]
    install: Snapshot | None
    apply: tuple[Entry, ...]
    soft_state: SoftState | None
    read_states: tuple[ReadState, ...]

    def __bool__(self) -> bool:
        return bool(
            self.must_persist
            or self.then_send
            or self.install
            or self.apply
            or self.soft_state
            or self.read_states
        )


@attrs.frozen
class Persisted:
    """What a restarted node reads back from stable storage to rebuild its ``Raft``."""

    hard_state: HardState
    snapshot: Snapshot | None
    entries: tuple[Entry, ...]
    fresh: bool = False
    """Nothing was ever stored: a first start, or a store that was lost. The node then recovers
    (``cluster.raft.recovery``) before its vote counts."""
