"""The keys as they are now, written as the commands that rebuild them (what a rewrite writes).

A string key is one ``SET key value``, followed by its ``PEXPIREAT`` (as step 6 below). Per stream
key, in this order (redis-server's ``rewriteStreamObject``, with one addition):

1. ``XADD key <id> field value ...`` for each live entry, in ID order. An empty stream is made with
   ``XADD key MAXLEN 0 <id> x y`` (added, then trimmed away).
2. The addition: an entry that is gone from the stream but still pending in a group (deleted or
   trimmed after it was delivered) gets a placeholder ``XADD`` among the others, so that step 4 can
   recreate its pending entry -- XCLAIM, even with FORCE, only claims entries that exist. Step 5
   removes the placeholders again: the ones before the first live entry by an exact ``XTRIM MINID``
   (as trimming took them), the others by ``XDEL`` (as deletion took them). redis-server loses such
   pending entries on a rewrite; here they survive it.
3. ``XGROUP CREATE key group <last id> ENTRIESREAD <n>`` per group, then ``XGROUP CREATECONSUMER``
   for every consumer, in the group's order.
4. ``XCLAIM key group consumer 0 <id> TIME <t> RETRYCOUNT <n> FORCE JUSTID`` per pending entry.
5. The placeholders' removal, then ``XSETID key <last id> ENTRIESADDED <n> MAXDELETEDID <id>``,
   which puts back the counters the steps above disturbed.
6. ``PEXPIREAT key <ms>`` for a key with an expiry time.

Consumers' seen and active times are not kept (they are set when the commands run again), just as
a redis-server rewrite does not keep them.
"""

from __future__ import annotations

from collections.abc import Iterator

from node.data.keyspace import Database
from node.data.keyspaces import Keyspaces
from node.data.store.records import COMMIT, encode
from node.data.streams import MAX_ID, Stream, format_id

__all__ = ["chunks", "database_records", "key_records", "records", "stream_commands"]

_PLACEHOLDER = [b"x", b"y"]


def chunks(keyspaces: Keyspaces, size: int) -> Iterator[bytes]:
    """The whole file a rewrite writes, in pieces of about ``size`` bytes, each a batch (the file
    is used only once complete, so where batches end does not matter; that they end keeps the
    replay from holding the whole file's records at once)."""
    chunk = bytearray()
    for record in records(keyspaces):
        chunk += record
        if len(chunk) >= size:
            yield bytes(chunk + COMMIT)
            chunk.clear()
    yield bytes(chunk + COMMIT)


def records(keyspaces: Keyspaces) -> Iterator[bytes]:
    """Encoded records that rebuild every key and function library of every account (a few
    records per step)."""
    for account, keyspace in keyspaces.accounts().items():
        for code in keyspace.libraries.values():
            yield encode(account, 0, [b"FUNCTION", b"LOAD", b"REPLACE", code])
        for index, db in sorted(keyspace.databases().items()):
            yield from database_records(account, index, db)


def database_records(account: str, index: int, db: Database) -> Iterator[bytes]:
    for key in list(db.keys):
        yield from key_records(account, index, db, key)


def key_records(account: str, index: int, db: Database, key: bytes) -> Iterator[bytes]:
    """The records that rebuild one key (which exists) of database ``index`` of ``account``."""
    value = db.keys[key]
    if isinstance(value, Stream):
        for args in stream_commands(key, value):
            yield encode(account, index, args)
    else:
        yield encode(account, index, [b"SET", key, bytes(value)])
    when = db.expires_at(key)
    if when is not None:
        yield encode(account, index, [b"PEXPIREAT", key, b"%d" % when])


def stream_commands(key: bytes, stream: Stream) -> Iterator[list[bytes]]:
    """The commands that rebuild one stream, its groups and their pending entries."""
    missing = sorted(
        {entry_id for group in stream.groups.values() for entry_id in group.pel}
        - {entry_id for entry_id in _pending_live(stream)}
    )
    live = stream.range(0, MAX_ID)
    first_live = live[0][0] if live else MAX_ID
    merged = sorted([*live, *((entry_id, _PLACEHOLDER) for entry_id in missing)])
    for entry_id, fields in merged:
        yield [b"XADD", key, format_id(entry_id), *fields]
    if not merged:
        yield [b"XADD", key, b"MAXLEN", b"0", format_id(stream.last_id or 1), *_PLACEHOLDER]
    for name, group in stream.groups.items():
        read = b"%d" % group.entries_read if group.entries_read is not None else b"-1"
        yield [b"XGROUP", b"CREATE", key, name, format_id(group.last_id), b"ENTRIESREAD", read]
        for consumer in group.consumers:
            yield [b"XGROUP", b"CREATECONSUMER", key, name, consumer]
        for entry_id, nack in group.pel.items():
            yield [
                b"XCLAIM", key, name, nack.consumer.name, b"0", format_id(entry_id),
                b"TIME", b"%d" % nack.delivery_time, b"RETRYCOUNT", b"%d" % nack.delivery_count,
                b"FORCE", b"JUSTID",
            ]  # fmt: skip
    trimmed = [entry_id for entry_id in missing if entry_id < first_live]
    if trimmed:
        if live:
            yield [b"XTRIM", key, b"MINID", b"=", format_id(first_live)]
        else:
            yield [b"XTRIM", key, b"MAXLEN", b"=", b"0"]
    deleted = missing[len(trimmed) :]
    if deleted:
        yield [b"XDEL", key, *map(format_id, deleted)]
    yield [
        b"XSETID", key, format_id(stream.last_id), b"ENTRIESADDED", b"%d" % stream.entries_added,
        b"MAXDELETEDID", format_id(stream.max_deleted_id),
    ]  # fmt: skip


def _pending_live(stream: Stream) -> Iterator[int]:
    """The pending IDs whose entries are still in the stream."""
    for group in stream.groups.values():
        for entry_id in group.pel:
            if stream.get(entry_id) is not None:
                yield entry_id
