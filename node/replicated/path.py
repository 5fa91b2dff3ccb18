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
* **this node leads the group**: the command runs here, as it would anywhere; ``ran`` takes the
  records it made and, if any, holds its reply back while the group commits them
  (``RespConnection.awaiting``: the connection's later requests wait too): the reply leaves once
  the entry is committed (acknowledged means replicated), or becomes ``-CLUSTERDOWN The cluster is
  down`` if the group could not commit it in ``propose_timeout``. A change made here that the group
  did not commit is then taken back by rebuilding the group's keys from its log.
* **another node leads it** (or this node holds no replica of it): the command travels to the
  group's leader in a ``KEYS`` frame over routes (to a voter, when this node does not know the
  leader, which passes it on), the leader runs it (as a client of the command's account and
  database would, in RESP2) and proposes it alike, and its reply comes back in a ``KEYR`` frame
  and is relayed as it is. Without an answer in ``propose_timeout`` (plus one election), or once
  this node's replica of the group names another leader than the one asked (it died, or was cut
  off), the command is answered ``-CLUSTERDOWN The cluster is down``: never a silent success.

Reads go to the leader too, so they see every acknowledged write (reads there may also see a write
whose commit is still under way: a leader does not hide its own pending writes yet). Not carried
yet across nodes (answered with an error, never run wrongly): blocking reads (``XREAD``/
``XREADGROUP ... BLOCK``) and ``EXEC`` of keys led elsewhere. Not yet either: ``WATCH`` of keys led
elsewhere, client tracking and keyspace notifications of keys led elsewhere,
RESP3 shapes of forwarded replies, and expiries (each replica removes an expired key by its clock).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from functools import partial

import trio

from cluster.frames import KeysReply, KeysRequest
from cluster.placement import Layout, SlotGroup, hash_slot
from cluster.replication.group import GroupSpec, ProposalError
from cluster.replication.replicas import Replicas
from node.data.keyspaces import Keyspaces
from node.data.store.records import COMMIT, RecordReader
from node.data.store.replay import CommandRefused, Executor
from node.replicated.capture import Capture
from node.replicated.machine import KeyspaceMachine
from node.resp.commands.introspection import command_keys
from node.resp.commands.table import COMMANDS
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import error

__all__ = ["CLUSTERDOWN", "CROSSSLOT", "KeyRouter"]

log = logging.getLogger("pubmesh")

CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot"
CLUSTERDOWN = "CLUSTERDOWN The cluster is down"
_MOST_HOPS = 2
_BLOCKING = frozenset([b"xread", b"xreadgroup"])

Send = Callable[[str, KeysRequest | KeysReply], bool]


class KeyRouter:
    """This node's side of the replicated keyspace.

    Args:
        node: this node's server name.
        layout: the keys' placement.
        replicas: the node's replica groups.
        keyspaces: the node's keys (their journal becomes a ``Capture``).
        executor: runs commands as a client of an account would (``CommandExecutor``).
        send: sends a frame to a route peer by server name (False: no route to it).
    """

    def __init__(
        self,
        node: str,
        layout: Layout,
        replicas: Replicas,
        keyspaces: Keyspaces,
        executor: Executor,
        send: Send,
    ) -> None:
        self.node = node
        self.layout = layout
        self.replicas = replicas
        self.keyspaces = keyspaces
        self.capture = Capture()
        keyspaces.journal = self.capture
        self._execute = executor(keyspaces)
        self._send = send
        self.timeout = replicas.config.propose_timeout
        self.machines = {
            group.name: KeyspaceMachine(node, keyspaces, executor, group.first, group.end)
            for group in layout.groups_of(node)
        }
        self._ids = itertools.count(1)
        self._waiting: dict[int, trio.MemorySendChannel[bytes]] = {}
        self._rebuilds: trio.MemorySendChannel[str] | None = None
        self._rebuilding: set[str] = set()
        """Groups whose rebuild is asked for and has not cleared their keys yet."""
        self._nursery: trio.Nursery | None = None
        self._start = -1
        self._group: SlotGroup | None = None
        self._refused: set[tuple[str, str]] = set()
        self._inside = False
        """A forwarded command runs (its connection's hook lets it be)."""

    # -- running ---------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Form this node's side of its groups, then serve forwarded commands and rebuilds."""
        send, receive = trio.open_memory_channel[str](64)
        self._rebuilds = send
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for group in self.layout.groups_of(self.node):
                await self._start_group(group.name)
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

    # -- the connection's hook -------------------------------------------------------------------

    def route(self, conn: RespConnection, command: Command[RespConnection], args: list[bytes]) -> bool:
        """Before a command on keys runs: whether this answered it (an error, or forwarded);
        False: run it here (then call ``ran``)."""
        if self.keyspaces.loading or conn.scripted or self._inside:
            return False  # (entries a group applies, a script's calls, forwarded commands)
        self._group = None
        slots = {hash_slot(key) for key in _keys(conn, command, args)}
        self._start = len(conn.outbound)
        if not slots:
            return False  # (a change it makes anyway goes by its records' keys: see ``ran``)
        if len(slots) > 1:
            conn.reject(command, CROSSSLOT)
            return True
        group = self.layout.group_of_slot(slots.pop())
        if self._leads(group):
            self._group = group
            return False
        if command.key == b"exec":
            conn.reject(command, "ERR a transaction on keys led by another node")
            return True
        if command.key in _BLOCKING and any(arg.upper() == b"BLOCK" for arg in args):
            conn.reject(command, "ERR a blocking read of keys led by another node")
            return True
        conn.awaiting = partial(self._forward_for, conn, group, list(args))
        return True

    def _leads(self, group: SlotGroup) -> bool:
        """Whether this node leads ``group`` and its keys hold exactly what the group committed
        (every entry applied, no change the group did not commit): commands may run on them."""
        local = self.replicas.groups.get(group.name)
        return local is not None and local.serves() and not self.machines[group.name].dirty

    def ran(self, conn: RespConnection) -> None:
        """After a command this node leads ran: hold its reply until its changes are committed."""
        if self.keyspaces.loading or conn.scripted or self._inside:
            return
        group, self._group = self._group, None
        records = self.capture.take()
        if not records:
            return
        reply = bytes(conn.outbound[self._start :])
        del conn.outbound[self._start :]
        if group is None:  # (keys the command did not name: a script's, FLUSHALL's ...)
            group = self._group_of(records)
            if group is None:
                conn.send(error(CROSSSLOT))
                return
        conn.awaiting = partial(self._commit_for, conn, group, records, reply)

    def _group_of(self, records: bytes) -> SlotGroup | None:
        """The one group led here that holds every key the records change; else None, and the
        changes are taken back (the groups they touched rebuild their keys from their logs)."""
        changed = RecordReader().feed(records + COMMIT)
        slots = {hash_slot(key) for record in changed for key in _request_keys(record.args)}
        groups = {group.name: group for group in map(self.layout.group_of_slot, slots)}
        if len(groups) == 1:
            (group,) = groups.values()
            if self._leads(group):
                return group
        for name in groups:
            if name in self.machines:
                self._spoiled(name)
        return None

    async def _commit_for(
        self, conn: RespConnection, group: SlotGroup, records: bytes, reply: bytes
    ) -> None:
        answer = await self._commit(group, records, reply)
        if answer:
            conn.send(answer)  # (the reply as the command made it, or the cluster's error)

    async def _forward_for(self, conn: RespConnection, group: SlotGroup, args: list[bytes]) -> None:
        reply = await self._forward(group, conn.account.name, conn.db, args, 0)
        if reply:
            conn.reply(reply)

    async def _commit(self, group: SlotGroup, records: bytes, reply: bytes) -> bytes:
        """Propose a change made here; ``reply`` once committed, else the cluster's error."""
        machine = self.machines[group.name]
        sequence, data = machine.begin(records)
        local = self.replicas.groups.get(group.name)
        try:
            if local is None:
                raise ProposalError("the group is not running here")
            await local.propose(data)
            return reply
        except ProposalError as exc:
            log.warning("Group %s: a write was not committed: %s", group.name, exc)
            if machine.forget(sequence):
                self._spoiled(group.name)
            return error(CLUSTERDOWN)

    # -- forwarding ------------------------------------------------------------------------------

    async def _forward(
        self, group: SlotGroup, account: str, db: int, args: list[bytes], hops: int
    ) -> bytes:
        """Have the group's leader carry out the command; its reply (or the cluster's error, once
        no leader answered within an election and a proposal's time)."""
        config = self.replicas.config
        with trio.move_on_after(2 * config.election_ticks * config.tick + self.timeout):
            while True:
                to = self._leader(group)
                if to == self.node:
                    return await self._carry_out(group, account, db, args)
                if to is not None and hops < _MOST_HOPS:
                    reply = await self._ask(to, KeysRequest(0, account, db, hops + 1, args), group)
                    if reply is not None:
                        return reply
                await trio.sleep(config.tick)
        return error(CLUSTERDOWN)

    async def _ask(self, to: str, request: KeysRequest, group: SlotGroup) -> bytes | None:
        """Send ``request`` to ``to`` and wait for its reply (None: no route to it). Sent once
        only: a request that may have run is never sent again. If this node, holding a replica
        of ``group``, learns meanwhile that another node leads it (``to`` died, or was cut off),
        the answer is the cluster's error at once, not after the whole wait: the request may
        have run, so it is not sent again, but the client may send its next one to the new
        leader."""
        request.id = next(self._ids)
        send, receive = trio.open_memory_channel[bytes](1)
        self._waiting[request.id] = send
        try:
            if not self._send(to, request):
                return None
            while True:
                with trio.move_on_after(self.replicas.config.tick):
                    return await receive.receive()
                if self._led_elsewhere(group, to):
                    return error(CLUSTERDOWN)
        finally:
            self._waiting.pop(request.id, None)

    def _led_elsewhere(self, group: SlotGroup, than: str) -> bool:
        """Whether this node's replica of ``group`` knows a leader other than ``than``."""
        local = self.replicas.groups.get(group.name)
        if local is None:
            return False
        leader = local.status().leader
        return leader is not None and leader != than

    def _leader(self, group: SlotGroup) -> str | None:
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

    async def _carry_out(self, group: SlotGroup, account: str, db: int, args: list[bytes]) -> bytes:
        """Run a forwarded command here, the group's leader, and commit what it changed."""
        self.capture.take()
        self._inside = True
        try:
            reply = self._execute(account, db, args)
        except CommandRefused as exc:
            reply = exc.reply
        finally:
            self._inside = False
        records = self.capture.take()
        if not records:
            return reply
        return await self._commit(group, records, reply)

    def receive(self, peer: str, frame: KeysRequest | KeysReply) -> None:
        """A KEYS or KEYR frame from the route peer ``peer``."""
        if isinstance(frame, KeysReply):
            waiting = self._waiting.pop(frame.id, None)
            if waiting is not None:
                waiting.send_nowait(frame.reply)
            return
        if self._nursery is not None:
            self._nursery.start_soon(self._serve, peer, frame)

    async def _serve(self, peer: str, request: KeysRequest) -> None:
        slots = {hash_slot(key) for key in _request_keys(request.args)}
        if len(slots) > 1:
            reply = error(CROSSSLOT)
        else:
            group = self.layout.group_of_slot(slots.pop() if slots else 0)
            reply = await self._forward(group, request.account, request.db, request.args, request.hops)
        self._send(peer, KeysReply(request.id, reply))


def _keys(conn: RespConnection, command: Command[RespConnection], args: list[bytes]) -> list[bytes]:
    """The keys a request names (the queued commands' for EXEC)."""
    if command.key == b"exec":
        return [key for queued in conn.transaction.queued or () for key in _request_keys(queued)]
    return command_keys(command, args)


def _request_keys(args: list[bytes]) -> list[bytes]:
    """The keys of a request not yet checked (queued, or forwarded)."""
    command = COMMANDS.find(args[0])
    if command is not None and command.subcommands is not None and len(args) > 1:
        command = command.subcommands.get(args[1].lower())
    return command_keys(command, args) if command is not None else []
