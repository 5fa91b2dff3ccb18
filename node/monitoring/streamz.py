"""The Redis streams the node holds: /streamz, and /varz's ``streams`` block; both with the journal's
state and the streams that capture subjects (nats-server has no such endpoint: the shapes are
pubmesh's own).
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from node.broker import Broker
from node.data.capture import CAPTURE_DB
from node.data.keyspace import DATABASES, Database
from node.data.streams import Stream, format_id, group_infos
from node.monitoring.gofmt import go_time
from node.monitoring.pacing import Pacer, itself, paced_sorted
from node.monitoring.state import DEFAULT_LIST_SIZE, BadRequest, MonitoredNode

__all__ = ["StreamzOptions", "streams_block", "streamz"]

_StreamKey = tuple[str, int, bytes]
"""A stream as the views find it: account, database, key (plain data, as
``node.monitoring.pacing`` explains)."""


def _live_stream(db: Database, key: bytes, now_ms: int) -> Stream | None:
    """The stream at ``key`` unless it has expired or the key holds a string (monitoring only
    reads: it removes nothing)."""
    when = db.expires_at(key)
    if when is not None and when <= now_ms:
        return None
    value = db.keys.get(key)
    return value if isinstance(value, Stream) else None


async def _stream_keys(
    broker: Broker, now_ms: int, pace: Pacer, account: str = "", index: int | None = None
) -> list[_StreamKey]:
    """Every live stream key, in the accounts and database asked for, copied a step at a time."""
    found: list[_StreamKey] = []
    for name, keyspace in broker.keyspaces.accounts().items():
        if account and name != account:
            continue
        for number, db in keyspace.databases().items():
            if index is not None and number != index:
                continue
            for key in list(db.keys):
                if _live_stream(db, key, now_ms) is not None:
                    found.append((name, number, key))
                await pace.tick()
    return found


def _journal_fields(broker: Broker) -> dict[str, Any]:
    """The journal as /varz's ``streams`` and /streamz show it: ``journal`` (whether changes are
    journaled), ``log_size`` (its bytes), ``fsync_lag`` (seconds since the oldest write it has not
    yet made durable; 0 when all is), ``log_writable`` (false while it cannot be written and
    writes are refused), ``log_error`` (why, else empty) and ``log_discards`` (batches taken back
    since start because they could not be written)."""
    journal = broker.keyspaces.journal
    if journal is None:
        return {
            "journal": False,
            "log_size": 0,
            "fsync_lag": 0.0,
            "log_writable": True,
            "log_error": "",
            "log_discards": 0,
        }
    refusal = journal.refusal
    return {
        "journal": True,
        "log_size": journal.size_bytes,
        "fsync_lag": journal.fsync_lag_seconds,
        "log_writable": refusal is None,
        "log_error": (refusal or "").removeprefix("-"),
        "log_discards": journal.discards,
    }


async def streams_block(node: MonitoredNode, pace: Pacer) -> dict[str, Any]:
    """/varz's ``streams``: ``streams`` (stream keys of every account and database), ``entries``
    (their lengths summed), ``bytes`` (the memory they hold, as MEMORY USAGE counts it), ``groups``
    (consumer groups), ``captures`` (configured streams that capture subjects), ``captured`` (messages
    they stored since start), ``refused`` (messages they could not store), and the journal's
    fields (``_journal_fields``)."""
    broker = node.broker
    now_ms = time.time_ns() // 1_000_000
    streams = entries = size = groups = 0
    for account, index, key in await _stream_keys(broker, now_ms, pace):
        stream = _live_stream(broker.keyspaces.database(account, index), key, now_ms)
        if stream is not None:
            streams += 1
            entries += stream.length
            size += stream.memory_usage()
            groups += len(stream.groups)
        await pace.tick()
    captures = node.captures.streams if node.captures is not None else []
    return {
        "streams": streams,
        "entries": entries,
        "bytes": size,
        "groups": groups,
        "captures": len(captures),
        "captured": sum(c.captured for c in captures),
        "refused": sum(c.refused for c in captures),
        **_journal_fields(broker),
    }


@attrs.frozen
class StreamzOptions:
    """The /streamz query, decoded: ``acc``, ``db`` (a database number), ``name`` (a key), and
    ``offset`` and ``limit`` as /connz pages."""

    account: str = ""
    db: int | None = None
    name: str = ""
    offset: int = 0
    limit: int = DEFAULT_LIST_SIZE

    def __attrs_post_init__(self) -> None:
        if self.db is not None and not 0 <= self.db < DATABASES:
            raise BadRequest(f"invalid db {self.db}: databases are numbered 0 to {DATABASES - 1}")


def _text_of(name: bytes) -> str:
    return name.decode("utf-8", "replace")


def _id_text(entry_id: int) -> str:
    return format_id(entry_id).decode()


def _stream_detail(entry: _StreamKey, stream: Stream) -> dict[str, Any]:
    account, index, key = entry
    return {
        "account": account,
        "db": index,
        "name": _text_of(key),
        "length": stream.length,
        "bytes": stream.memory_usage(),
        "first_id": _id_text(stream.first_id),
        "last_id": _id_text(stream.last_id),
        "max_deleted_id": _id_text(stream.max_deleted_id),
        "entries_added": stream.entries_added,
        "groups": [
            {
                "name": _text_of(group.name),
                "consumers": group.consumers,
                "pending": group.pending,
                "last_delivered_id": _id_text(group.last_id),
                "entries_read": group.entries_read,
                "lag": group.lag,
            }
            for group in group_infos(stream)
        ],
    }


async def streamz(node: MonitoredNode, opts: StreamzOptions, pace: Pacer) -> dict[str, Any]:
    """/streamz: the streams asked for (by account, database, then key), paged, each with its length,
    first and last IDs and its consumer groups with their lag (null where Redis's XINFO cannot
    tell it); and the streams configured to capture subjects, with their counts."""
    broker = node.broker
    now = time.time_ns()
    now_ms = now // 1_000_000
    found = await _stream_keys(broker, now_ms, pace, opts.account, opts.db)
    if opts.name:
        wanted = opts.name.encode("utf-8", "surrogateescape")
        found = [entry for entry in found if entry[2] == wanted]
    ordered = await paced_sorted(found, itself, pace, opts.offset + opts.limit)
    listed: list[dict[str, Any]] = []
    for entry in ordered[opts.offset :]:
        stream = _live_stream(broker.keyspaces.database(entry[0], entry[1]), entry[2], now_ms)
        if stream is not None:  # (gone while the list was made: left out)
            listed.append(_stream_detail(entry, stream))
        await pace.tick()
    captures = node.captures.streams if node.captures is not None else []
    return {
        "server_id": broker.server_id,
        "now": go_time(now),
        **_journal_fields(broker),
        "num_streams": len(listed),
        "total": len(found),
        "offset": opts.offset,
        "limit": opts.limit,
        "streams": listed,
        "captures": [
            {
                "account": c.config.account,
                "name": c.config.name,
                "subjects": list(c.config.subjects),
                "maxlen": c.config.maxlen,
                "max_age": c.config.max_age,
                "max_bytes": c.config.max_bytes,
                "captured": c.captured,
                "refused": c.refused,
            }
            for c in captures
            if (not opts.account or c.config.account == opts.account)
            and (not opts.name or c.config.name == opts.name)
            and opts.db in (None, CAPTURE_DB)
        ],
    }
