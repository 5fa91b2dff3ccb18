"""Replaying the append-only file rebuilds the keys exactly: streams, counters, groups, consumers,
pending entries with their delivery times and counts, expiry times. Checked for random sequences of
stream commands, both for the file as written and for a rewrite of it (``snapshot``)."""

from __future__ import annotations

import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.broker import Broker
from node.config.options import Config
from node.data.store import Store, snapshot
from node.data.streams import MAX_ID, Stream
from node.resp.commands.common import now_ms
from node.resp.executor import CommandExecutor
from tests.node.resp.test_resp_connection import Peer

KEYS = [b"a", b"b"]
GROUPS = [b"g1", b"g2"]
CONSUMERS = [b"c1", b"c2"]

ids = st.builds(lambda ms, seq: b"%d-%d" % (ms, seq), st.integers(1, 6), st.integers(0, 2))
keys = st.sampled_from(KEYS)
groups = st.sampled_from(GROUPS)
consumers = st.sampled_from(CONSUMERS)
small = st.integers(0, 4).map(lambda n: b"%d" % n)


def _opt(*parts: st.SearchStrategy[list[bytes]]) -> st.SearchStrategy[list[bytes]]:
    return st.tuples(*parts).map(lambda lists: [arg for part in lists for arg in part])


def _maybe(strategy: st.SearchStrategy[list[bytes]]) -> st.SearchStrategy[list[bytes]]:
    return st.one_of(st.just([]), strategy)


def _fixed(*args: bytes) -> st.SearchStrategy[list[bytes]]:
    return st.just(list(args))


def _one(strategy: st.SearchStrategy[bytes]) -> st.SearchStrategy[list[bytes]]:
    return strategy.map(lambda arg: [arg])


trim = _opt(
    _one(st.sampled_from([b"MAXLEN", b"MINID"])),
    _maybe(_one(st.sampled_from([b"=", b"~"]))),
    _one(st.one_of(small, ids)),
)
xadd = _opt(
    _fixed(b"XADD"), _one(keys), _maybe(trim), _one(st.one_of(ids, st.just(b"*"))), _fixed(b"f", b"v")
)
xreadgroup = _opt(
    _fixed(b"XREADGROUP", b"GROUP"),
    _one(groups),
    _one(consumers),
    _maybe(_opt(_fixed(b"COUNT"), _one(small))),
    _maybe(_fixed(b"NOACK")),
    _fixed(b"STREAMS"),
    _one(keys),
    _one(st.sampled_from([b">", b"0"])),
)
commands = st.one_of(
    xadd,
    xadd,
    xreadgroup,
    xreadgroup,
    _opt(_fixed(b"XTRIM"), _one(keys), trim),
    _opt(_fixed(b"XDEL"), _one(keys), _one(ids), _maybe(_one(ids))),
    _opt(
        _fixed(b"XGROUP", b"CREATE"), _one(keys), _one(groups),
        _one(st.one_of(ids, st.sampled_from([b"$", b"0"]))), _maybe(_fixed(b"MKSTREAM")),
        _maybe(_opt(_fixed(b"ENTRIESREAD"), _one(small))),
    ),
    _opt(_fixed(b"XGROUP", b"SETID"), _one(keys), _one(groups), _one(st.one_of(ids, st.just(b"0")))),
    _opt(_fixed(b"XGROUP", b"DESTROY"), _one(keys), _one(groups)),
    _opt(_one(st.sampled_from([b"CREATECONSUMER", b"DELCONSUMER"])), _one(keys), _one(groups),
         _one(consumers)).map(lambda args: [b"XGROUP", *args]),
    _opt(_fixed(b"XACK"), _one(keys), _one(groups), _one(ids), _maybe(_one(ids))),
    _opt(
        _fixed(b"XCLAIM"), _one(keys), _one(groups), _one(consumers), _fixed(b"0"), _one(ids),
        _maybe(_fixed(b"FORCE")), _maybe(_fixed(b"JUSTID")),
        _maybe(_opt(_fixed(b"RETRYCOUNT"), _one(small))), _maybe(_fixed(b"IDLE", b"5000")),
    ),
    _opt(_fixed(b"XAUTOCLAIM"), _one(keys), _one(groups), _one(consumers), _fixed(b"0", b"0")),
    _opt(
        _fixed(b"XSETID"), _one(keys), _one(ids),
        _maybe(_opt(_fixed(b"ENTRIESADDED"), _one(small), _fixed(b"MAXDELETEDID"), _one(ids))),
    ),
    _opt(_one(st.sampled_from([b"DEL", b"PERSIST"])), _one(keys)),
    _opt(_fixed(b"PEXPIRE"), _one(keys), _fixed(b"100000")),
    _fixed(b"RENAME", b"a", b"b"),
    _opt(_fixed(b"SELECT"), _one(st.sampled_from([b"0", b"1"]))),
    _one(st.sampled_from([b"FLUSHDB", b"FLUSHALL"])),
)  # fmt: skip
SETUP = [
    *([b"XADD", key, b"%d-1" % ms, b"f", b"v"] for key in KEYS for ms in range(1, 5)),
    *([b"XGROUP", b"CREATE", key, group, b"0"] for key in KEYS for group in GROUPS),
    [b"XREADGROUP", b"GROUP", b"g1", b"c1", b"COUNT", b"2", b"STREAMS", b"a", b"b", b">", b">"],
]
"""Streams with groups and pending entries, for the random commands to work on."""


def state(broker: Broker) -> dict[Any, Any]:
    """Everything a restart must keep (consumers' seen and active times are not kept; a string's
    encoding is not kept, as a redis-server rewrite does not keep it)."""
    now = now_ms()
    out: dict[Any, Any] = {}
    for account, keyspace in broker.keyspaces.accounts().items():
        for index, db in keyspace.databases().items():
            for key in sorted(db.live_keys(now)):
                stream = db.keys[key]
                if not isinstance(stream, Stream):
                    out[account, index, key] = (bytes(stream), db.expires_at(key))
                    continue
                groups = {
                    name: (
                        group.last_id,
                        group.entries_read,
                        group.lag(stream),
                        [(c.name, list(c.pending)) for c in group.consumers.values()],
                        [
                            (i, nack.consumer.name, nack.delivery_time, nack.delivery_count)
                            for i, nack in group.pel.items()
                        ],
                    )
                    for name, group in stream.groups.items()
                }
                counters = (stream.length, stream.last_id, stream.entries_added, stream.max_deleted_id)
                out[account, index, key] = (
                    stream.range(0, MAX_ID),
                    counters,
                    stream.first_id,
                    db.expires_at(key),
                    groups,
                )
    return out


def _load(directory: Path) -> tuple[Broker, Store]:
    broker = Broker(Config())
    store = Store(directory, executor=partial(CommandExecutor, broker), appendfsync="no")
    store.load(broker.keyspaces)
    return broker, store


def _check_restarts(run: list[list[bytes]]) -> None:
    with tempfile.TemporaryDirectory() as written, tempfile.TemporaryDirectory() as rewritten:
        broker, store = _load(Path(written))
        peer = Peer(broker)
        for args in run:
            peer.send(*args)
        before = state(broker)
        rewrite = b"".join(snapshot.chunks(broker.keyspaces, 200))
        Path(rewritten, "appendonly.log").write_bytes(rewrite)
        store.close()
        for directory in (written, rewritten):
            again, store = _load(Path(directory))
            assert state(again) == before
            store.close()


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(commands, max_size=40))
def test_replay_and_rewrite_rebuild_the_same_keys(run: list[list[bytes]]) -> None:
    _check_restarts(SETUP + run)


def test_pending_entries_of_deleted_and_trimmed_entries_survive_a_rewrite() -> None:
    _check_restarts(
        [
            [b"XADD", b"s", b"1-1", b"f", b"v"],
            [b"XADD", b"s", b"2-1", b"f", b"v"],
            [b"XADD", b"s", b"3-1", b"f", b"v"],
            [b"XADD", b"s", b"4-1", b"f", b"v"],
            [b"XGROUP", b"CREATE", b"s", b"g", b"0"],
            [b"XREADGROUP", b"GROUP", b"g", b"c", b"STREAMS", b"s", b">"],
            [b"XTRIM", b"s", b"MAXLEN", b"3"],
            [b"XDEL", b"s", b"3-1"],
            [b"XCLAIM", b"s", b"g", b"d", b"0", b"2-1", b"RETRYCOUNT", b"7"],
            [b"XGROUP", b"CREATE", b"e", b"g", b"$", b"MKSTREAM"],
            [b"XGROUP", b"CREATECONSUMER", b"e", b"g", b"idle"],
        ]
    )


def test_an_expiry_nobody_read_is_recorded_as_the_delete_it_was() -> None:
    """A key that expired unseen is recorded as deleted when it is next touched: replay, during
    which nothing expires, does not add a new entry to the old stream."""
    with tempfile.TemporaryDirectory() as directory:
        broker, store = _load(Path(directory))
        peer = Peer(broker)
        peer.send("XADD", "s", "1-1", "old", "1")
        peer.send("PEXPIRE", "s", "20")
        time.sleep(0.05)
        assert peer.send("XADD", "s", "1-1", "new", "1") == b"$3\r\n1-1\r\n"
        before = state(broker)
        store.close()
        again, store = _load(Path(directory))
        assert state(again) == before
        assert next(iter(before.values()))[0] == [(1 << 64 | 1, [b"new", b"1"])]
        store.close()


def test_a_transaction_cut_short_by_a_crash_replays_not_at_all() -> None:
    with tempfile.TemporaryDirectory() as directory:
        broker, store = _load(Path(directory))
        peer = Peer(broker)
        peer.send("XADD", "s", "1-1", "f", "v")
        path = Path(directory, "appendonly.log")
        committed = path.stat().st_size
        peer.send("MULTI")
        peer.send("XADD", "s", "2-1", "f", "v")
        peer.send("XADD", "t", "MAXLEN", "0", "2-1", "f", "v")
        assert peer.send("EXEC") == b"*2\r\n$3\r\n2-1\r\n$3\r\n2-1\r\n"
        whole = path.read_bytes()
        store.close()
        for cut in range(committed, len(whole)):  # (every place a crash could end the file)
            path.write_bytes(whole[:cut])
            again, store = _load(Path(directory))
            stream = again.keyspaces.database("$G", 0).stream(b"s", 0)
            assert stream is not None
            assert stream.length == 1
            assert again.keyspaces.database("$G", 0).get(b"t", 0) is None
            store.close()


def test_an_expiry_the_sweep_finds_is_recorded_too() -> None:
    with tempfile.TemporaryDirectory() as directory:
        broker, store = _load(Path(directory))
        peer = Peer(broker)
        peer.send("XADD", "s", "1-1", "old", "1")
        peer.send("PEXPIRE", "s", "20")
        time.sleep(0.05)
        assert broker.keyspaces.sweep(now_ms()) == 1
        peer.send("XADD", "s", "1-1", "new", "1")  # (a fresh key: without the DEL, replay refuses it)
        store.close()
        again, store = _load(Path(directory))
        stream = again.keyspaces.database("$G", 0).stream(b"s", now_ms())
        assert stream is not None
        assert stream.range(0, MAX_ID) == [(1 << 64 | 1, [b"new", b"1"])]
        store.close()
