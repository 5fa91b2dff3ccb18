"""Streams that capture subjects: what is published on them, by anyone, anywhere, becomes entries.

A stream configured on a node (``[[streams]]``) is held by that node, at key ``name`` of its
account's database 0. The node subscribes to the stream's subjects like any subscriber, so its
interest travels over routes and gateways as usual and a message published by a NATS or Redis client
on any node of the super-cluster reaches it. Each message becomes one entry, added as ``XADD name *``
would add it, with the fields:

- ``subject``: the subject; for a Redis channel that is not a subject (``$R.`` and hex), the channel.
- ``data``: the payload.
- ``header:<Name>``: one per NATS header line, in order, the name as sent and the value trimmed (a
  name sent twice gives two fields). A status line (``NATS/1.0 503``) is not kept.

A message's reply subject is not stored: it receives the acknowledgement. Once the entry is stored,
and the journal has made it durable under the fsync policy (``Keyspaces.commit``), the reply subject
is sent ``{"stream":NAME,"id":ID}``; a message the stream could not take is answered
``{"stream":NAME,"error":TEXT}``: the node is past its ``maxmemory`` (redis-server's OOM error:
nothing is captured until keys are deleted or the limit raised), its IDs are exhausted, or the
journal cannot be written (then nothing is captured until it can, and an entry whose commit failed
is taken back with the rest of its batch and answered so). A NATS producer that publishes as
requests and retries what was not acknowledged therefore gets at-least-once capture.

Capture happens in the publish path (an entry is in the stream before ``publish`` returns);
committing, acknowledging and waking blocked readers (``Keyspaces.serve_ready``) wait for the
``Captures.run`` task, which does them for everything captured since it last ran: one commit for a
whole burst of messages, as a Redis client's pipeline gets one.

**Replicated keys** (``[replication] members``: ``Captures.groups`` is set): a stream is held by the
replica group of its key, and is captured once, by that group's leader. Every node that lists the
stream subscribes to its subjects, in one queue group, only while it leads the group
(``Captures.follow``, a tenth of a second apart), so each message reaches one capturing node. The
records of what it captured go to the group (``KeyGroups.commit``), and the acknowledgement waits
for the group's commit: ``{"stream":NAME,"error":"CLUSTERDOWN ..."}`` if the group could not commit
it (the leader takes the change back). A message published while no node leads the group is not
captured (nobody is subscribed, as for any subject without interest): a producer that publishes
as requests gets no answer and retries.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import trio

from node.accounts.account import Account
from node.config.options import StreamConfig
from node.data.durability import CommitFailed, Journal
from node.data.keyspace import WRONGTYPE
from node.data.keyspaces import Keyspaces
from node.data.store.records import encode
from node.data.stream_writes import add_entry
from node.data.streams import Stream, Trim, format_id, make_id, parse_add_id
from routing import Message, Subscription, subject_channel

__all__ = ["CaptureHost", "Captures", "KeyGroups", "StreamCapture", "header_fields"]

log = logging.getLogger("pubmesh")

CAPTURE_DB = 0
"""The database captured streams live in."""
_HEADER = b"header:"
_EXHAUSTED = "The stream has exhausted the last possible ID, unable to add more items"
_NO_GROUPS = "-CLUSTERDOWN The cluster is down"
_Ack = tuple["StreamCapture", bytes, int | str]
"""A message captured (or refused): its stream, reply subject, and entry ID (or why)."""
_Committing = tuple[Awaitable[str | None], list[_Ack]]
FOLLOW_INTERVAL = 0.1
"""Seconds between two looks at which replicated streams' groups this node leads."""


class CaptureHost(Protocol):
    """What captures use of the node's broker (``node.broker.Broker``): its accounts and their keys,
    subscribing to the streams' subjects, and publishing acknowledgements."""

    @property
    def keyspaces(self) -> Keyspaces: ...

    def account(self, name: str) -> Account: ...

    def subscribe(self, account: Account, sub: Subscription) -> None: ...

    def unsubscribe(self, account: Account, subs: Sequence[Subscription]) -> None: ...

    def publish(self, account: Account, msg: Message) -> bool: ...


class KeyGroups(Protocol):
    """What captures use of replicated keys (``node.replicated.path.KeyRouter``)."""

    def leads_key(self, key: bytes) -> bool:
        """Whether this node leads the replica group that holds ``key``."""
        ...

    def commit(self, key: bytes, records: bytes) -> Awaitable[str | None]:
        """Hand ``key``'s group these records of changes made here, at once (a group's entries
        keep the order of these calls); await None once committed, else the error (the changes
        are taken back)."""
        ...


def header_fields(block: bytes) -> list[bytes]:
    """A NATS header block as entry fields: ``header:<Name>``, value, for each header line."""
    fields: list[bytes] = []
    for line in block.split(b"\r\n")[1:]:  # (the first line is NATS/1.0 and any status)
        name, colon, value = line.partition(b":")
        name = name.strip()
        if colon and name:
            fields += (_HEADER + name, value.strip())
    return fields


class StreamCapture:
    """One configured stream: the subscriber that turns messages into its entries."""

    def __init__(self, captures: Captures, config: StreamConfig) -> None:
        self.config = config
        self.key = config.name.encode()
        self.account: Account = captures.broker.account(config.account)
        self._captures = captures
        self._keyspaces = captures.broker.keyspaces
        self._max_age_ms = round(config.max_age * 1000)
        queue = f"$capture.{config.name}" if captures.replicated else None
        self.subscriptions = [
            Subscription(subject, queue, sid=b"%d" % i, owner=self)
            for i, subject in enumerate(config.subjects)
        ]
        self.subscribed = False
        self.pending = bytearray()
        """Records of what was captured since the last flush (replicated keys)."""
        self.captured = 0
        """Messages stored since start."""
        self.refused = 0
        """Messages the stream could not take (the node past maxmemory, the stream's IDs exhausted,
        or the journal not writable)."""

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        now = time.time_ns() // 1_000_000
        db, key = self._keyspaces.database(self.config.account, CAPTURE_DB), self.key
        value = db.get(key, now)
        if value is None and key in db.keys:  # (expired, kept for its group's DEL: this is it)
            db.delete(key)
            self._log([b"DEL", key])
        stream = value if isinstance(value, Stream) else Stream()
        created = value is None
        refusal = self._keyspaces.oom or self._keyspaces.refusal  # (in redis-server's order)
        if refusal is None and not (created or isinstance(value, Stream)):
            refusal = WRONGTYPE  # (a client made the key a string)
        if refusal is None and stream.exhausted():
            refusal = _EXHAUSTED
        if refusal is not None:
            self.refused += 1
            self._captures.done(self, msg.reply, refusal)
            return False
        new = parse_add_id(b"*", stream, now)
        fields = [b"subject", subject_channel(msg.subject), b"data", msg.payload]
        if msg.headers:
            fields += header_fields(msg.headers)
        add_entry(db, key, stream, new, fields, created=created, trims=self._trims(now), log=self._log)
        self.captured += 1
        ms, seq = new
        self._captures.done(self, msg.reply, make_id(ms, seq))
        return True

    def _trims(self, now: int) -> Sequence[Trim]:
        """Block-at-a-time trims (as ``XADD MAXLEN ~`` / ``MINID ~``): capture stays cheap, and a
        stream holds at most a block more than ``maxlen``, or entries at most a block older; its
        entries hold at most ``max_bytes`` (the newest block is always kept)."""
        trims: list[Trim] = []
        if self.config.maxlen:
            trims.append(Trim("maxlen", self.config.maxlen, approximate=True))
        if self._max_age_ms:
            trims.append(Trim("minid", make_id(max(now - self._max_age_ms, 0), 0), approximate=True))
        if self.config.max_bytes:
            trims.append(Trim("maxbytes", self.config.max_bytes, approximate=True))
        return trims

    def _log(self, args: list[bytes]) -> None:
        if self._captures.replicated:
            self.pending += encode(self.config.account, CAPTURE_DB, args)
            return
        journal: Journal | None = self._keyspaces.journal
        if journal is not None:
            journal.append(self.config.account, CAPTURE_DB, args)


class Captures:
    """A node's capturing streams, and the task that commits, acknowledges and wakes readers."""

    def __init__(
        self, broker: CaptureHost, configs: Sequence[StreamConfig], *, replicated: bool = False
    ) -> None:
        self.broker = broker
        self.replicated = replicated
        self.groups: KeyGroups | None = None
        """Where a replicated stream's records go (set once the node's groups exist)."""
        self.streams = [StreamCapture(self, config) for config in configs]
        self._acks: list[_Ack] = []
        self._discards = -1
        """The journal's count of batches taken back when the first waiting ack was captured."""
        self._due = False
        self._wake: Callable[[], None] | None = None
        self._committing, self._committed = trio.open_memory_channel[_Committing](math.inf)
        """Replicated captures handed to their groups, to acknowledge once committed."""

    def subscribe(self) -> None:
        """Subscribe every stream to its subjects (announced to routes and gateways as usual);
        replicated streams: those whose group this node leads (``follow``)."""
        for capture in self.streams:
            if not self.replicated:
                for sub in capture.subscriptions:
                    self.broker.subscribe(capture.account, sub)
        self.follow()

    def follow(self) -> None:
        """Subscribe the replicated streams whose group this node leads, unsubscribe the others."""
        groups = self.groups
        if not self.replicated:
            return
        for capture in self.streams:
            leads = groups is not None and groups.leads_key(capture.key)
            if leads and not capture.subscribed:
                for sub in capture.subscriptions:
                    self.broker.subscribe(capture.account, sub)
            elif capture.subscribed and not leads:
                self.broker.unsubscribe(capture.account, capture.subscriptions)
            capture.subscribed = leads

    def done(self, capture: StreamCapture, reply: bytes | None, outcome: int | str) -> None:
        """A message was captured (``outcome``: its entry ID) or refused (why): commit and answer
        it soon."""
        if reply:
            if not self._acks:
                self._discards = self._journal_discards()
            self._acks.append((capture, reply, outcome))
        if not self._due:
            self._due = True
            if self._wake is not None:
                self._wake()

    def _journal_discards(self) -> int:
        journal = self.broker.keyspaces.journal
        return journal.discards if journal is not None else 0

    def flush(self) -> None:
        """Commit what was captured, wake the readers it made ready, then acknowledge it (or,
        if the journal took it back, say so). Replicated streams: hand each stream's records to
        its group at once, and acknowledge them once the group answers (``_committing``)."""
        self._due = False
        keyspaces = self.broker.keyspaces
        if self.replicated:
            keyspaces.serve_ready()
            acks, self._acks = self._acks, []
            for capture in self.streams:
                records, mine = bytes(capture.pending), [a for a in acks if a[0] is capture]
                capture.pending.clear()
                if records and self.groups is not None:
                    self._committing.send_nowait((self.groups.commit(capture.key, records), mine))
                elif mine:
                    self._acknowledge(mine, None if not records else _NO_GROUPS)
            return
        lost: str | None = None
        try:
            keyspaces.commit()
        except CommitFailed as exc:
            lost = str(exc)
        if lost is None and self._journal_discards() != self._discards:
            lost = keyspaces.refusal or "-ERR the journal could not be written"
        keyspaces.serve_ready()
        acks, self._acks = self._acks, []
        self._acknowledge(acks, lost)

    def _acknowledge(self, acks: list[_Ack], lost: str | None) -> None:
        """Answer each message's reply subject: its entry's ID, or why it was not kept."""
        for capture, reply, outcome in acks:
            if isinstance(outcome, str) or lost is not None:
                why = outcome if isinstance(outcome, str) else str(lost)
                answer = {"stream": capture.config.name, "error": why.removeprefix("-")}
            else:
                answer = {"stream": capture.config.name, "id": format_id(outcome).decode()}
            payload = json.dumps(answer, separators=(",", ":")).encode()
            self.broker.publish(capture.account, Message(reply, None, None, payload))

    async def _acknowledge_committed(self) -> None:
        """Acknowledge replicated captures as their groups answer, in the order handed over."""
        async for outcome, acks in self._committed:
            self._acknowledge(acks, await outcome)

    def _flush_contained(self) -> None:
        """``flush``, where a failure is logged and costs only the acknowledgements of that
        burst: their producers retry, nothing is acknowledged unstored."""
        try:
            self.flush()
        except Exception:
            self._acks.clear()
            log.exception("streams: captured messages not committed: not acknowledged")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush after each burst of captures, until cancelled; replicated streams: follow their
        groups' leadership too, and acknowledge what their groups committed."""
        due = trio.Event()
        self._wake = due.set
        try:
            async with trio.open_nursery() as nursery:
                if self.replicated:
                    nursery.start_soon(self._acknowledge_committed)
                task_status.started()
                while True:
                    if self._due:
                        self._flush_contained()
                    with trio.move_on_after(FOLLOW_INTERVAL if self.replicated else math.inf):
                        await due.wait()
                    if due.is_set():
                        due = trio.Event()
                        self._wake = due.set
                    self.follow()
        finally:
            self._wake = None
