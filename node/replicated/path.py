"""The command path of replicated keys: every command on keys is carried out by the leader of the
replica group that holds them, and a write is answered only once the group committed it.

With ``[replication] members`` set, a node places keys with ``cluster.placement``'s layout, forms
its side of every group that names it (``Replicas.start_group`` with a ``KeyspaceMachine`` over the
group's slots), and records changes to keys in a ``Capture`` instead of the store's journal: the
groups' Raft logs are what keeps the keys.

A connection hands every command on keys (after its own checks: arity, sign-in, MULTI's queue ...)
to ``KeyRouter.route`` before it runs, and to ``ran`` after:

* the keys (the command's key positions; EXEC: those of the queued commands; EVAL, EVALSHA, FCALL
  and their ``_RO`` forms: the ``numkeys`` keys) must hash to one slot, else the command is
  answered ``-CROSSSLOT Keys in request don't hash to the same slot``, as Redis Cluster does. A
  write without keys (FLUSHALL, SWAPDB ...) is refused: it would change every group at once. A
  read without keys (DBSIZE, SCAN ...) runs on this node's replicas as they are.
* a **script** (``script_refusal``, asked for each command it runs) keeps to its slot, as on a
  Redis Cluster node: the slot of its declared keys or, without them, of the first key it reaches
  (which must be of a group led here); a command on a key of another group answers ``Script
  attempted to access a non local key in a cluster node``, on another slot of the same group
  ``... keys that do not hash to the same slot`` (allowed with the ``allow-cross-slot-keys``
  flag); a script flagged ``no-cluster`` does not run.
* **this node leads the group**: a command that does not write (a read, EXEC, a script) waits
  first for the group's read barrier (``Group.read_barrier``: a majority confirms this node still
  leads, and it applied what was committed then), then runs; without a confirmation in
  ``propose_timeout`` it is answered ``-CLUSTERDOWN The cluster is down``, so a leader cut off
  from its group answers no read once another may lead. A write runs at once (its reply waits for
  its commit, which a deposed leader cannot reach). Either way the command runs here, as it would
  anywhere; ``ran`` takes the records it made and, if any, holds its reply back while the group
  commits them (``RespConnection.reply_later``: the connection's later requests run meanwhile, so
  a pipeline of writes is proposed as one batch, and their replies wait their turn,
  ``node.resp.in_order``): the reply leaves once the entry is committed (acknowledged means
  replicated), or becomes ``-CLUSTERDOWN The cluster is down`` if the group could not commit it in
  ``propose_timeout``. A change made here that the group did not commit is then taken back by
  rebuilding the group's keys from its log.
* **READONLY** (``RespConnection.readonly``): a read (redis-server's ``readonly`` flag) of a
  group this node holds a replica of runs at once on that replica, as it is (possibly stale, as on
  a Redis Cluster replica); other commands go as below. ``READWRITE`` undoes it.
* **another node leads it** (or this node holds no replica of it): the command travels to the
  group's leader in a ``KEYS`` frame over routes (``node.replicated.asking``; to a voter, when
  this node does not know the leader, which passes it on); the leader runs it as a client of the
  command's account, database and RESP version would (a read once its read barrier passed) and
  proposes it alike (``node.replicated.arrivals``), and its reply comes back in a ``KEYR`` frame.
  A write for a leader this node knows is sent at once and its reply taken in turn while the
  connection goes on (``node.replicated.pipelines``): the leader runs a peer's writes in the
  order they came, so a pipeline of writes travels as one. Anything else waits for its reply
  before the connection goes on. EXEC travels as one request that carries its queued commands,
  run there as one transaction and committed as one entry (``node.replicated.forwarded``), with
  the tokens of the watches the leader keeps for the connection (``node.replicated.watching``);
  one that would abort anyway is answered here. A read that may block (``XREAD``/``XREADGROUP
  ... BLOCK``) asks the leader, which answers at once, and waits, if it must, on this node's
  replica of its keys, asking again at each write applied there (``node.replicated.blocking``);
  without a replica here to wait on, it is refused. Without an answer in ``propose_timeout``
  (plus one election), or once this node's replica of the group names another leader than the one
  asked (it died, or was cut off), the command is answered ``-CLUSTERDOWN The cluster is down``:
  never a silent success.

CLUSTER SLOTS and the other subcommands that describe the placement, and CLUSTER FAILOVER, are
answered by ``view`` (``node.replicated.topology``), through ``cluster``.

Reads are linearizable: they see every write acknowledged before they were sent, and a command
that changed nothing but ran after a change made here that is not committed yet (it may have seen
it) is answered only once that change is committed, or with the cluster's error if it is not
(``node.replicated.proposals``): nothing a client is told rests on a write that may be taken
back. Keyspace notifications are published by the leader alone (followers apply changes
silently) and reach subscribers on any node as any message does; a tracking client's reads
carried elsewhere are remembered on its own node, which invalidates them as it applies them.

**Snapshots.** While a group's leader waits to snapshot, new commands of the group wait too
(``node.replicated.quiet``).

**Expiry.** Only a group's leader removes its keys as expired, and only while a command of that
group runs (a key the command meets past its time) or while it sweeps (``EXPIRY_SWEEP`` apart, the
node's sweep over the keys of the groups it leads): each removal is recorded as a DEL, which goes in
the command's entry (before the change the command made) or in an entry of its own, so every
replica removes the key at the same place in the log. Elsewhere a key past its time is absent to
lookups but kept until that DEL comes (``Shared.may_expire``). Were each replica to remove keys by
its own clock, a write to a key the leader still held could find it gone on a replica (a stream
restarted there, an increment from zero) and the replicas would part ways.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from functools import partial
from typing import Protocol

import attrs
import trio

from cluster.frames import KeysReply, KeysRequest
from cluster.placement import Layout, SlotGroup, hash_slot
from cluster.replication.group import GroupSpec
from cluster.replication.replicas import Replicas
from cluster.replication.transfer import Pending, room
from node.data.keyspaces import Keyspaces
from node.data.store.records import COMMIT, RecordReader
from node.data.store.replay import Execute
from node.replicated.arrivals import Arrivals
from node.replicated.asking import MOST_HOPS, Asking, Send
from node.replicated.blocking import answer_or_wait, block_at, carry_out_request
from node.replicated.capture import Capture, by_group
from node.replicated.forwarded import (
    CLUSTERDOWN,
    CROSSSLOT,
    find_command,
    pack_transaction,
    queued_keys,
    request_bytes,
    request_keys,
    split_watched,
)
from node.replicated.machine import KeyspaceMachine
from node.replicated.pipelines import Pipelines
from node.replicated.proposals import Proposals
from node.replicated.quiet import Quiet
from node.replicated.topology import ClusterView
from node.replicated.watching import WATCH_ELSEWHERE, Watching
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import error

__all__ = ["CLUSTERDOWN", "CROSSSLOT", "EXPIRY_SWEEP", "WATCH_ELSEWHERE", "KeyRouter"]

log = logging.getLogger("pubmesh")

SCRIPT_NOT_LOCAL = "Script attempted to access a non local key in a cluster node"
SCRIPT_CROSSSLOT = "Script attempted to access keys that do not hash to the same slot"
EXPIRY_SWEEP = 0.1
"""Seconds between two sweeps for expired keys of the groups a node leads."""
MAX_CARRIED = 16 * 1024 * 1024
"""``KeyRouter.max_carried`` by default: half of what a route holds for a peer by default."""
TOO_LARGE = "ERR request of more than %d bytes: larger than a replicated write or request may be"


class Executors(Protocol):
    """Makes an ``Execute`` on the node's accounts, in ``keyspaces``, answering in RESP
    ``protocol`` (``CommandExecutor`` bound to the node's broker)."""

    def __call__(self, keyspaces: Keyspaces, *, protocol: int = 2) -> Execute: ...


class KeyRouter:
    """This node's side of the replicated keyspace.

    Args:
        node: this node's server name.
        layout: the keys' placement.
        replicas: the node's replica groups.
        keyspaces: the node's keys (their journal becomes a ``Capture``).
        executor: runs commands as a client of an account would (``CommandExecutor``).
        send: sends a frame to a route peer by server name (False: no route to it).
        max_carried: the bytes a request (a write: one entry of a group's log) and a reply carried
            between nodes may have: larger ones are refused (a route holds only so much for a
            peer).
        pending: the bytes waiting on the link to a route peer (None: no link), which paces what
            is sent: pipelined writes, large requests and large replies.
    """

    def __init__(
        self,
        node: str,
        layout: Layout,
        replicas: Replicas,
        keyspaces: Keyspaces,
        executor: Executors,
        send: Send,
        *,
        max_carried: int = MAX_CARRIED,
        pending: Pending = lambda peer: 0,
    ) -> None:
        self.node = node
        self.max_carried = max_carried
        self._pending = pending
        self.layout = layout
        self.replicas = replicas
        self.keyspaces = keyspaces
        self.capture = Capture()
        keyspaces.journal = self.capture
        keyspaces.may_expire = self._may_expire
        self._serving: frozenset[str] = frozenset()
        """The groups a command runs for now (or the sweep sweeps): their keys may be removed as
        expired, and a script may reach them."""
        self._script_slot: int | None = None
        """The slot the running command's script keeps to (its declared keys', or the first it
        reached)."""
        self._execute = executor(keyspaces)
        self._execute3 = executor(keyspaces, protocol=3)
        """(Forwarded commands of RESP3 clients: answered in RESP3.)"""
        self._send = send
        self.timeout = replicas.config.propose_timeout
        self.machines = {
            group.name: KeyspaceMachine(node, keyspaces, executor, group.first, group.end)
            for group in layout.groups_of(node)
        }
        self._quiet = Quiet(self.machines, self.timeout)
        self._asking = Asking(send, replicas.config.tick)
        self._rebuilds: trio.MemorySendChannel[str] | None = None
        self._rebuilding: set[str] = set()
        """Groups whose rebuild is asked for and has not cleared their keys yet."""
        for name, machine in self.machines.items():
            machine.spoiled = partial(self._spoiled, name)
        self._nursery: trio.Nursery | None = None
        self._group: SlotGroup | None = None
        self.proposals = Proposals(replicas, self.machines, self._spoiled)
        """Changes made here, proposed to their groups, and read barriers."""
        self._refused: set[tuple[str, str]] = set()
        self._inside = False
        """A forwarded command runs (its connection's hook lets it be)."""
        self.view: ClusterView | None = None
        """Answers CLUSTER SLOTS and the like (set once the node's routes are known)."""
        self._cleared: RespConnection | None = None
        """The connection whose read passed its group's read barrier and now runs."""
        self.patience = 2 * replicas.config.election_ticks * replicas.config.tick + self.timeout
        """Seconds a request to another node may take: an election and a proposal's time."""
        self.watching = Watching(
            node, layout, send=send, leads=self._leads, forward=self.forward,
            ask=partial(self._asking.answer, within=self.patience),
            barrier=self.proposals.barrier,
        )  # fmt: skip
        """WATCH of keys led elsewhere (both sides)."""
        self.pipelines = Pipelines(
            layout, replicas, self._asking, self._leads, self._led_elsewhere, self.patience, pending
        )
        """Writes this node's connections pipelined to other nodes."""
        self.arrivals = Arrivals(
            node, layout, self, self.watching, send, pending,
            max_carried=max_carried, patience=self.patience, tick=replicas.config.tick,
        )  # fmt: skip
        """Requests other nodes forward here."""

    # -- running ---------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Form this node's side of its groups, then serve forwarded commands and rebuilds."""
        send, receive = trio.open_memory_channel[str](64)
        self._rebuilds = send
        async with trio.open_nursery() as nursery:
            self._nursery = self.arrivals.nursery = nursery
            for group in self.layout.groups_of(self.node):
                await self._start_group(group.name)
            nursery.start_soon(self._sweep)
            task_status.started()
            async for name in receive:
                await self._rebuild(name)

    async def _start_group(self, name: str) -> None:
        group = next(g for g in self.layout.groups if g.name == name)
        await self.replicas.start_group(GroupSpec(name, frozenset(group.voters)), self.machines[name])

    async def _rebuild(self, name: str) -> None:
        """Take back changes the group did not commit: its keys again from its log."""
        log.warning("Group %s: rebuilding its keys from the log (a change was not committed)", name)
        self.replicas.stop_group(name)
        while name in self.replicas.groups:  # noqa: ASYNC110 (its task ends at its next checkpoint)
            await trio.sleep(0.01)
        self._rebuilding.discard(name)  # (spoiled from now on: the keys need another rebuild)
        self.machines[name].clear()
        await self._start_group(name)

    def _spoiled(self, name: str) -> None:
        """The group's keys here hold changes it did not commit: rebuild them (once)."""
        self.machines[name].dirty = True
        if name not in self._rebuilding and self._rebuilds is not None:
            self._rebuilding.add(name)
            self._rebuilds.send_nowait(name)

    def refused(self, peer: str, group: str) -> None:
        """A RAFT frame for a group this node has not formed: log it once if it is another key
        layout's (the peer's members or replicas are configured otherwise)."""
        why = self.layout.refusal(group)
        if why is not None and (peer, group) not in self._refused and len(self._refused) < 1024:
            self._refused.add((peer, group))
            log.error("Refused Raft messages from %s: %s", peer, why)

    def cluster(self, conn: RespConnection, args: list[bytes]) -> bool:
        """A CLUSTER subcommand: the placement as ``view`` describes it (False: not described)."""
        return self.view is not None and self.view.answer(conn, args)

    # -- the connection's hook -------------------------------------------------------------------

    def route(self, conn: RespConnection, command: Command[RespConnection], args: list[bytes]) -> bool:
        """Before a command on keys runs: whether this answered it (an error, or forwarded);
        False: run it here (then call ``ran``)."""
        if self.keyspaces.loading or conn.scripted or self._inside:
            return False  # (entries a group applies, a script's calls, forwarded commands)
        self._group = None
        self._serving = frozenset()
        self._script_slot = None
        if request_bytes(conn, command, args) > self.max_carried:
            conn.reject(command, TOO_LARGE % self.max_carried)
            return True
        if command.key == b"exec" and conn.transaction.remote is not None:
            return self.watching.exec(conn, command)
        slots = {hash_slot(key) for key in queued_keys(conn, command, args)}
        if not slots:
            conn.hold_output()
            return False  # (a change it makes anyway goes by its records' keys: see ``ran``)
        if len(slots) > 1:
            conn.reject(command, CROSSSLOT)
            return True
        slot = slots.pop()
        group = self.layout.group_of_slot(slot)
        if conn.readonly and "readonly" in command.flags and group.name in self.replicas.groups:
            conn.hold_output()
            return False  # (READONLY: this node's replica as it is, possibly stale)
        retry = conn.blocking.retry_deadline
        blocking = block_at(args) > 0  # (an XREAD/XREADGROUP with BLOCK)
        if blocking and not self._leads(group) and group.name in self.replicas.groups:
            conn.awaiting = partial(self._forward_for, conn, group, list(args), retry)
            return True  # (a read that may block, of keys led elsewhere, or woken here: ask)
        if self._cleared is conn or retry >= 0:
            # (a read whose barrier passed runs now; so does a blocked read a write here woke)
            self._cleared = None
            self._run_here(conn, group, slot)
            return False
        if self._leads(group):
            if self._quiet.holds(group.name):
                conn.awaiting = partial(self._after_snapshot, conn, group, list(args))
                return True
            if command.writes:
                self._run_here(conn, group, slot)
                return False
            conn.awaiting = partial(self._read_for, conn, group, command, list(args))
            return True
        if command.key == b"exec":
            transaction = conn.transaction
            if transaction.failed or transaction.dirty:
                return False  # (answered here as it would be anywhere: EXECABORT, or no array)
            if transaction.watching:
                conn.reject(command, WATCH_ELSEWHERE)
                return True
            args = pack_transaction(transaction.queued or [])
            transaction.discard()
        if blocking:  # (no replica here to wait on)
            conn.reject(command, "ERR a blocking read of keys led by another node")
            return True
        if self.pipelines.send(conn, command, args):
            return True
        conn.awaiting = partial(self._forward_for, conn, group, list(args))
        return True

    def holds_back(
        self, conn: RespConnection, command: Command[RespConnection], args: list[bytes]
    ) -> bool:
        """Whether a command waits for the writes its connection pipelined to another node
        (``node.replicated.pipelines``)."""
        return self.pipelines.holds_back(conn, command, args)

    def watch(self, conn: RespConnection, keys: list[bytes]) -> bool:
        """WATCH: False when this node leads the keys (watched here); else their leader watches
        them for the client."""
        if sum(map(len, keys)) > self.max_carried:
            conn.error(TOO_LARGE % self.max_carried)
            return True
        return self.watching.watch(conn, keys)

    def _run_here(self, conn: RespConnection, group: SlotGroup, slot: int) -> None:
        """The command runs here for ``group``: its changes go to it, keys of it past their time
        are removed, a script keeps to ``slot``, and what it sends is held for ``ran``."""
        conn.hold_output()
        self._group = group
        self._serving = frozenset((group.name,))
        self._script_slot = slot

    def _leads(self, group: SlotGroup) -> bool:
        """Whether this node leads ``group`` and its keys hold exactly what the group committed
        (every entry applied, no change the group did not commit): commands may run on them."""
        local = self.replicas.groups.get(group.name)
        return local is not None and local.serves() and not self.machines[group.name].dirty

    def script_refusal(self, keys: list[bytes], *, cross_slot: bool) -> str | None:
        """Why a running script may not reach these keys (None: it may), as a Redis Cluster node
        refuses a script's command: keys in more than one slot, or of a group not led here (or not
        the one its command runs for), or in another slot than the script's (unless its flags
        allow ``cross_slot``: then any slot of that group)."""
        if self.keyspaces.loading:
            return None  # (entries a group applies)
        slots = {hash_slot(key) for key in keys}
        if not slots:
            return None
        if len(slots) > 1:
            return SCRIPT_NOT_LOCAL  # (one command across slots: no node serves it)
        slot = slots.pop()
        group = self.layout.group_of_slot(slot)
        if self._serving:
            if group.name not in self._serving:
                return SCRIPT_NOT_LOCAL
        elif self._leads(group):
            self._serving = frozenset((group.name,))  # (a script without keys keeps to this group)
        else:
            return SCRIPT_NOT_LOCAL
        if self._script_slot is None:
            self._script_slot = slot
        elif not cross_slot and slot != self._script_slot:
            return SCRIPT_CROSSSLOT
        return None

    def ran(self, conn: RespConnection) -> None:
        """After a command this node leads ran: hold its reply until its changes are committed."""
        if self.keyspaces.loading or conn.scripted or self._inside:
            return
        group, self._group = self._group, None
        self._serving, self._script_slot = frozenset(), None
        records = self.capture.take()
        reply = conn.release_output()
        if not records:
            if group is not None and self.proposals.pending(group.name):  # (it may have read them)
                conn.reply_later(self.proposals.settled(group), reply)
            else:
                conn.send(reply)
            return
        if group is None:  # (keys the command did not name: a script's, FLUSHALL's ...)
            group = self._group_of(records)
            if group is None:
                conn.send(error(CROSSSLOT))
                return
        conn.reply_later(self.proposals.submit(group, records), reply)

    def _group_of(self, records: bytes) -> SlotGroup | None:
        """The one group led here that holds every key the records change; else None, and the
        changes are taken back (the groups they touched rebuild their keys from their logs)."""
        changed = RecordReader().feed(records + COMMIT)
        slots = {hash_slot(key) for record in changed for key in request_keys(record.args)}
        groups = {group.name: group for group in map(self.layout.group_of_slot, slots)}
        if len(groups) == 1:
            (group,) = groups.values()
            if self._leads(group):
                return group
        for name in groups:
            if name in self.machines:
                self._spoiled(name)
        return None

    async def _read_for(
        self, conn: RespConnection, group: SlotGroup, command: Command[RespConnection], args: list[bytes]
    ) -> None:
        """Run a read led here once it is linearizable (the group's read barrier passed)."""
        if await self.proposals.barrier(group):
            self._cleared = conn
            conn.execute(args)  # (its checks pass again: nothing of the connection's changed)
            self._cleared = None
        else:
            conn.reject(command, CLUSTERDOWN)

    async def _after_snapshot(self, conn: RespConnection, group: SlotGroup, args: list[bytes]) -> None:
        """Run a command held while the group's leader waited to snapshot."""
        await self._quiet.wait(group.name)
        conn.execute(args)  # (routed again: this node may not lead the group any more)

    async def _forward_for(
        self, conn: RespConnection, group: SlotGroup, args: list[bytes], deadline: float | None = None
    ) -> None:
        """Relay the leader's reply; to a read that may block (until ``deadline``, -1: its own
        timeout), answer or wait (``node.replicated.blocking``)."""
        request = KeysRequest(0, conn.account.name, conn.db, 0, args, conn.writer.version)
        reply = await self.forward(group, request)
        if deadline is not None:
            answer_or_wait(conn, reply, deadline)
        elif reply:
            conn.reply(reply)

    # -- what captures use ------------------------------------------------------------------------

    def leads_key(self, key: bytes) -> bool:
        return self._leads(self.layout.group_of(key))

    def commit(self, key: bytes, records: bytes) -> Awaitable[str | None]:
        """Propose records of changes made here to keys of ``key``'s group, at once; await None
        once committed, else the error's text."""
        answer = self.proposals.submit(self.layout.group_of(key), records)

        async def outcome() -> str | None:
            reply = await answer(b"")
            return reply.decode().removeprefix("-").rstrip("\r\n") or None

        return outcome()

    # -- expiry ----------------------------------------------------------------------------------

    def _may_expire(self, key: bytes) -> bool:
        serving = self._serving
        return bool(serving) and self.layout.group_of(key).name in serving

    async def _sweep(self) -> None:
        """Remove the expired keys of the groups led here, and commit each group's removals."""
        while True:
            await trio.sleep(EXPIRY_SWEEP)
            led = [group for group in self.layout.groups_of(self.node) if self._leads(group)]
            if not led:
                continue
            self.capture.take()
            self._serving = frozenset(group.name for group in led)
            try:
                self.keyspaces.sweep(time.time_ns() // 1_000_000)
            finally:
                self._serving = frozenset()
            records = self.capture.take()
            if records and self._nursery is not None:
                for name, removals in by_group(self.layout, records).items():
                    group = next(g for g in led if g.name == name)
                    self._nursery.start_soon(self.proposals.submit(group, removals), b"")

    # -- forwarding ------------------------------------------------------------------------------

    async def forward(self, group: SlotGroup, request: KeysRequest) -> bytes:
        """Have the group's leader carry out the command; its reply (or the cluster's error, once
        no leader answered within an election and a proposal's time)."""
        config = self.replicas.config
        with trio.move_on_after(self.patience):
            while True:
                to = self.leader(group)
                if to == self.node:
                    if self._quiet.holds(group.name):
                        await self._quiet.wait(group.name)
                        continue
                    return await self._carry_out(group, request)
                if to is not None and request.hops < MOST_HOPS:
                    await room(self._pending, to, sum(map(len, request.args)))
                    passed = attrs.evolve(request, hops=request.hops + 1)
                    gone = partial(self._led_elsewhere, group, to)
                    reply = await self._asking.ask(to, passed, gone)
                    if reply is not None:
                        return reply
                await trio.sleep(config.tick)
        return error(CLUSTERDOWN)

    def _led_elsewhere(self, group: SlotGroup, than: str) -> bool:
        """Whether this node's replica of ``group`` knows a leader other than ``than``."""
        local = self.replicas.groups.get(group.name)
        if local is None:
            return False
        leader = local.status().leader
        return leader is not None and leader != than

    def leader(self, group: SlotGroup) -> str | None:
        """Whom to send a command of ``group`` to: its leader if known, else (if this node holds
        no replica of it) its first voter, which knows. None (wait) while no leader is known,
        while this node, just elected, has not applied the entries of earlier leaders yet, and
        while its keys of the group hold changes not committed or are being rebuilt."""
        local = self.replicas.groups.get(group.name)
        if local is not None:
            if self._leads(group):
                return self.node
            status = local.status()
            return None if status.leader == self.node else status.leader
        return None if self.node in group.voters else group.voters[0]

    async def _carry_out(self, group: SlotGroup, request: KeysRequest) -> bytes:
        """Run a forwarded command here, the group's leader, once linearizable if it reads only,
        and commit what it changed."""
        watched, args = split_watched(request.args)
        command = find_command(args)
        if not (command is None or command.writes) and not await self.proposals.barrier(group):
            return error(CLUSTERDOWN)
        if command is not None and command.key == b"watch":
            database = self.keyspaces.database(request.account, request.db)
            return self.watching.keep(database, args[1:])
        if watched:
            answered = self.watching.checked(watched, args, request.protocol)
            if answered is not None:
                return answered
        return await self._run(group, request, args)

    def _run(self, group: SlotGroup, request: KeysRequest, args: list[bytes]) -> Awaitable[bytes]:
        """Run a forwarded command here, now: await its reply once what it changed is committed."""
        self.capture.take()
        self._inside = True
        self._serving = frozenset((group.name,))
        slots = {hash_slot(key) for key in request_keys(args)}
        self._script_slot = slots.pop() if len(slots) == 1 else None
        try:
            execute = self._execute3 if request.protocol == 3 else self._execute
            reply = carry_out_request(execute, self.keyspaces, request.account, request.db, args)
        finally:
            self._inside = False
            self._serving, self._script_slot = frozenset(), None
        records = self.capture.take()
        if self.keyspaces.ready:  # (readers blocked here that the write woke: after the take)
            self.keyspaces.serve_ready()
        if not records:
            return self.proposals.settled(group)(reply)
        return self.proposals.submit(group, records)(reply)

    def receive(self, peer: str, frame: KeysRequest | KeysReply) -> None:
        """A KEYS or KEYR frame from the route peer ``peer`` (``node.replicated.arrivals``)."""
        if isinstance(frame, KeysReply):
            self._asking.answered(frame)
        elif frame.args[0].lower() == b"unwatch":
            self.watching.kept.release(frame.args[1:])
        else:
            self.arrivals.receive(peer, frame)

    # -- what arrivals ask of the path -------------------------------------------------------------

    def holds(self, group: SlotGroup) -> bool:
        """Whether the group's commands wait while its leader snapshots (``node.replicated.quiet``)."""
        return self._quiet.holds(group.name)

    def run_forwarded(self, group: SlotGroup, request: KeysRequest) -> Awaitable[bytes]:
        """Run a forwarded command here, now (``_run``)."""
        return self._run(group, request, request.args)
