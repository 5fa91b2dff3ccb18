"""The keys of one replica group's hash slots as a Raft state machine.

An **entry** is one batch of journal records (``node.data.store.records``: the commands that
repeat a change exactly, with their account and database), the changes one write command made,
tagged with where it was made::

    entry   u16 origin length | origin (the proposing node's server name, UTF-8) | u64 sequence |
            the records, framed as the journal frames them, then ``COMMIT``

``apply`` runs an entry's records through the command handlers (an ``Executor``, as the journal's
replay does, with the keyspaces' journal detached and no key expiring meanwhile), so every replica
ends with the same keys as the node that ran the command. The one exception is the leader's own
entry: the leader ran the command itself to learn its records (``begin`` registers its sequence
number before proposing), so applying the entry there skips the records. A sequence number
``begin`` handed out that never comes back applied (the proposal failed or timed out), or another
node's entry (or a new leader's first, empty entry: ``term_began``) applied while some are
outstanding (a new leader replaced them), means this node's
keys hold a change the group never committed: the machine is then ``dirty`` (``forget`` says so),
entries applied meanwhile are carried out as far as the keys allow, and the node must rebuild the
group's keys from the group's log before running anything on them (stop its side of the group,
``clear``, start it again: the group restores its snapshot and applies its log anew).

``snapshot`` writes the group's keys (every account, every database, only keys whose slot the
group holds) as the records the journal's rewrite writes for them (``node.data.store.snapshot``),
and ``restore`` replaces the group's keys with a snapshot's. A leader's keys hold its pending
changes too, so it snapshots only when none is pending: asked for one while some are, the machine
is ``quieting`` until those are applied (its node holds new commands on the group's keys meanwhile,
else writes that never stop would keep the leader's log from ever being compacted), and calls
``quieted`` once the snapshot is taken or its keys are cleared.
"""

from __future__ import annotations

import logging
import random
import struct
from collections.abc import Callable

from cluster.placement import hash_slot
from node.data.keyspaces import Keyspaces
from node.data.store.records import COMMIT, RecordReader
from node.data.store.replay import CommandRefused, Execute, Executor, replaying
from node.data.store.snapshot import key_records

__all__ = ["KeyspaceMachine", "MachineError", "entry"]

log = logging.getLogger("pubmesh")

_ORIGIN = struct.Struct("<H")
_SEQUENCE = struct.Struct("<Q")


class MachineError(Exception):
    """An entry or snapshot that cannot be applied: damaged, or refused by the command handlers.
    Raised from ``apply`` it stops the group on this node (the replicas must not part ways)."""


def entry(origin: str, sequence: int, records: bytes) -> bytes:
    """The entry that carries ``records`` (framed, concatenated) made by ``origin``."""
    name = origin.encode()
    return b"".join([_ORIGIN.pack(len(name)), name, _SEQUENCE.pack(sequence), records, COMMIT])


class KeyspaceMachine:
    """The keys of slots ``[first, end)`` in ``keyspaces``, replicated as entries.

    Args:
        node: this node's server name (entries it proposed carry it).
        keyspaces: the node's keys.
        executor: runs records through the command handlers (``CommandExecutor`` bound to the
            node's broker).
        first, end: the slots the group holds.
    """

    def __init__(
        self, node: str, keyspaces: Keyspaces, executor: Executor, first: int, end: int
    ) -> None:
        self.node = node
        self.keyspaces = keyspaces
        self._executor = executor
        self._execute: Execute | None = None
        self.first, self.end = first, end
        self._next = random.getrandbits(63)  # (unlike any sequence a previous run logged)
        self._local: set[int] = set()
        self.applied = 0
        """Entries applied (those made here included)."""
        self.dirty = False
        """The keys hold a change made here that the log will not have (its proposal failed, or
        another leader's entries replaced it): they must be rebuilt (``clear``, then the log
        again), and nothing may run on them until then."""
        self.quieting = False
        """A snapshot is due and waits for the changes made here to be applied: the node runs
        no new command on the group's keys until ``quieted`` is called."""
        self.quieted: Callable[[], None] = lambda: None
        self.spoiled: Callable[[], None] = lambda: None
        """Told when applying an entry made the keys ``dirty``: another leader's entry (or its
        first, empty one) where changes made here were (their proposals' answers, which would say
        so, may never be awaited: a client that went away), so the node must rebuild the keys."""

    def holds(self, key: bytes) -> bool:
        return self.first <= hash_slot(key) < self.end

    # -- the leader's side ---------------------------------------------------------------------

    def begin(self, records: bytes) -> tuple[int, bytes]:
        """Register a change this node made to its keys already: its sequence number and entry."""
        self._next += 1
        self._local.add(self._next)
        return self._next, entry(self.node, self._next, records)

    def forget(self, sequence: int) -> bool:
        """A proposal failed: whether the keys must be rebuilt from the log (``dirty``: this
        change, made here, was never applied as an entry, or another one was replaced)."""
        if sequence in self._local:
            self._local.discard(sequence)
            self.dirty = True
        return self.dirty

    # -- the state machine ---------------------------------------------------------------------

    def apply(self, data: bytes) -> object:
        """Carry out one committed entry (see the module docstring).

        Raises:
            MachineError: the entry is damaged or its records were refused.
        """
        try:
            (size,) = _ORIGIN.unpack_from(data, 0)
            origin = data[_ORIGIN.size : _ORIGIN.size + size].decode()
            (sequence,) = _SEQUENCE.unpack_from(data, _ORIGIN.size + size)
        except (struct.error, UnicodeDecodeError):
            raise MachineError("a damaged entry") from None
        self.applied += 1
        if origin == self.node and sequence in self._local:
            self._local.discard(sequence)
            return None
        if self._local:  # (another leader's entry where this node's own were: they are gone)
            self._lost()
        try:
            self._run(data[_ORIGIN.size + size + _SEQUENCE.size :])
        except MachineError:
            if not self.dirty:
                raise
            # (keys holding changes the log does not may refuse it: the rebuild replays it)
        if self.keyspaces.ready:  # (readers blocked here on keys it wrote: they ask again)
            self.keyspaces.serve_ready()
        return None

    def term_began(self) -> None:
        """A new leader's first entry: changes made here not applied before it are gone."""
        if self._local:
            self._lost()

    def _lost(self) -> None:
        self._local.clear()
        self.dirty = True
        self.spoiled()

    def snapshot(self) -> bytes | None:
        """The group's keys as of the last entry applied; None while they also hold changes made
        here that are not applied as entries yet (a leader's pending writes) or never will be
        (``dirty``): a snapshot of those would make them part of the group's state."""
        if self.dirty:
            return None
        if self._local:
            self.quieting = True
            return None
        parts: list[bytes] = []
        for account, keyspace in self.keyspaces.accounts().items():
            for index, db in sorted(keyspace.databases().items()):
                for key in [key for key in db.keys if self.holds(key)]:
                    parts.extend(key_records(account, index, db, key))
        parts.append(COMMIT)
        self._quiet()
        return b"".join(parts)

    def restore(self, data: bytes) -> None:
        self.clear()
        self._run(data)

    def clear(self) -> None:
        """Remove the group's keys from this node. Changes made here and not yet applied as
        entries go with them, so their entries, if they commit, are carried out like any other."""
        self._local.clear()
        self.dirty = False
        self._quiet()
        for keyspace in self.keyspaces.accounts().values():
            for db in keyspace.databases().values():
                for key in [key for key in db.keys if self.holds(key)]:
                    db.delete(key)

    def _quiet(self) -> None:
        if self.quieting:
            self.quieting = False
            self.quieted()

    def _run(self, batch: bytes) -> None:
        reader = RecordReader()
        try:
            records = reader.feed(batch)
        except ValueError as exc:
            raise MachineError(f"damaged records: {exc}") from None
        if reader.pending:
            raise MachineError("records cut short")
        if self._execute is None:
            self._execute = self._executor(self.keyspaces)
        execute = self._execute
        with replaying(self.keyspaces):
            for record in records:
                try:
                    execute(record.account, record.db, record.args)
                except CommandRefused as exc:
                    command = record.args[0].decode("utf-8", "replace")
                    reply = exc.reply[:200].rstrip().decode("utf-8", "replace")
                    raise MachineError(f"{command} was refused: {reply}") from None
