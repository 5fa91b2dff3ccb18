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
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import trio

from node.accounts.account import Account
from node.config.options import StreamConfig
from node.data.durability import CommitFailed, Journal
from node.data.keyspace import WRONGTYPE
from node.data.keyspaces import Keyspaces
from node.data.stream_writes import add_entry
from node.data.streams import MAX_ID, Stream, Trim, format_id, make_id, parse_add_id
from routing import Message, Subscription, subject_channel

__all__ = ["CaptureHost", "Captures", "StreamCapture", "header_fields"]

log = logging.getLogger("pubmesh")

CAPTURE_DB = 0
"""The database captured streams live in."""
_HEADER = b"header:"
_EXHAUSTED = "The stream has exhausted the last possible ID, unable to add more items"


class CaptureHost(Protocol):
    """What captures use of the node's broker (``node.broker.Broker``): its accounts and their keys,
    subscribing to the streams' subjects, and publishing acknowledgements."""

    @property
    def keyspaces(self) -> Keyspaces: ...

    def account(self, name: str) -> Account: ...

    def subscribe(self, account: Account, sub: Subscription) -> None: ...

    def publish(self, account: Account, msg: Message) -> bool: ...


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
        self.subscriptions = [
            Subscription(subject, sid=b"%d" % i, owner=self) for i, subject in enumerate(config.subjects)
        ]
        self.captured = 0
        """Messages stored since start."""
        self.refused = 0
        """Messages the stream could not take (the node past maxmemory, the stream's IDs exhausted,
        or the journal not writable)."""

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        now = time.time_ns() // 1_000_000
        db, key = self._keyspaces.database(self.config.account, CAPTURE_DB), self.key
        value = db.get(key, now)
        stream = value if isinstance(value, Stream) else Stream()
        created = value is None
        refusal = self._keyspaces.oom or self._keyspaces.refusal  # (in redis-server's order)
        if refusal is None and not (created or isinstance(value, Stream)):
            refusal = WRONGTYPE  # (a client made the key a string)
        if refusal is None and stream.last_id == MAX_ID:
            refusal = _EXHAUSTED
        if refusal is not None:
            self.refused += 1
            self._captures.done(self, msg.reply, refusal)
            return False
        entry_id = parse_add_id(b"*", stream, now)
        fields = [b"subject", subject_channel(msg.subject), b"data", msg.payload]
        if msg.headers:
            fields += header_fields(msg.headers)
        add_entry(
            db, key, stream, entry_id, fields, created=created, trims=self._trims(now), log=self._log
        )
        self.captured += 1
        self._captures.done(self, msg.reply, entry_id)
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
        journal: Journal | None = self._keyspaces.journal
        if journal is not None:
            journal.append(self.config.account, CAPTURE_DB, args)


class Captures:
    """A node's capturing streams, and the task that commits, acknowledges and wakes readers."""

    def __init__(self, broker: CaptureHost, configs: Sequence[StreamConfig]) -> None:
        self.broker = broker
        self.streams = [StreamCapture(self, config) for config in configs]
        self._acks: list[tuple[StreamCapture, bytes, int | str]] = []
        self._discards = -1
        """The journal's count of batches taken back when the first waiting ack was captured."""
        self._due = False
        self._wake: Callable[[], None] | None = None

    def subscribe(self) -> None:
        """Subscribe every stream to its subjects (announced to routes and gateways as usual)."""
        for capture in self.streams:
            for sub in capture.subscriptions:
                self.broker.subscribe(capture.account, sub)

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
        if the journal took it back, say so)."""
        self._due = False
        keyspaces = self.broker.keyspaces
        lost: str | None = None
        try:
            keyspaces.commit()
        except CommitFailed as exc:
            lost = str(exc)
        if lost is None and self._journal_discards() != self._discards:
            lost = keyspaces.refusal or "-ERR the journal could not be written"
        keyspaces.serve_ready()
        acks, self._acks = self._acks, []
        for capture, reply, outcome in acks:
            if isinstance(outcome, str) or lost is not None:
                why = outcome if isinstance(outcome, str) else str(lost)
                answer = {"stream": capture.config.name, "error": why.removeprefix("-")}
            else:
                answer = {"stream": capture.config.name, "id": format_id(outcome).decode()}
            payload = json.dumps(answer, separators=(",", ":")).encode()
            self.broker.publish(capture.account, Message(reply, None, None, payload))

    def _flush_contained(self) -> None:
        """``flush``, where a failure is logged and costs only the acknowledgements of that
        burst: their producers retry, nothing is acknowledged unstored."""
        try:
            self.flush()
        except Exception:
            self._acks.clear()
            log.exception("streams: captured messages not committed: not acknowledged")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Flush after each burst of captures, until cancelled."""
        due = trio.Event()
        self._wake = due.set
        task_status.started()
        try:
            while True:
                if self._due:
                    self._flush_contained()
                await due.wait()
                due = trio.Event()
                self._wake = due.set
        finally:
            self._wake = None
