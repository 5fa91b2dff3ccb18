"""Strings in the append-only file: every string write is journaled so that replaying the file,
and a rewrite of it, rebuild the same values and expiry times; what is journaled is the command
that repeats the change exactly (relative expiries as absolute times, arithmetic as its result,
SET's GET dropped), and a request that changed nothing leaves no record. Ends with a real node
stopped cleanly and SIGKILLed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.data.store import FILE_NAME, RecordReader
from node.resp.commands.common import now_ms
from tests.live import live_node
from tests.node.data.test_store_replay import _check_restarts, _load
from tests.node.resp.test_resp_connection import Peer

pytestmark = pytest.mark.timeout(120)

KEYS = [b"a", b"b", b"s"]

key = st.sampled_from(KEYS)
value = st.sampled_from([b"", b"1", b"-7", b"2.5", b"abc", b"x" * 50, b"9223372036854775807"])
number = st.sampled_from([b"0", b"1", b"-3", b"100", b"x", b"9223372036854775807"])
lasting = st.sampled_from([b"0", b"-3", b"x", b"100000"])
"""Expiry times: none that may pass between the state's two readings."""
expiry = st.sampled_from(
    [[], [b"EX", b"100"], [b"PX", b"100000"], [b"EXAT", b"99999999999"], [b"PXAT", b"1"], [b"KEEPTTL"]]
)
condition = st.sampled_from([[], [b"NX"], [b"XX"], [b"GET"], [b"NX", b"GET"]])
commands = st.one_of(
    st.builds(lambda k, v, e, c: [b"SET", k, v, *e, *c], key, value, expiry, condition),
    st.builds(lambda k, v: [b"SETNX", k, v], key, value),
    st.builds(lambda k, n, v: [b"SETEX", k, n, v], key, lasting, value),
    st.builds(lambda k, n, v: [b"PSETEX", k, n, v], key, lasting, value),
    st.builds(lambda k, v: [b"GETSET", k, v], key, value),
    st.builds(lambda k: [b"GETDEL", k], key),
    st.builds(
        lambda k, o: [b"GETEX", k, *o],
        key,
        st.sampled_from([[], [b"PERSIST"], [b"EX", b"50"], [b"PXAT", b"1"], [b"EXAT", b"99999999999"]]),
    ),
    st.builds(lambda k, v, k2, v2: [b"MSET", k, v, k2, v2], key, value, key, value),
    st.builds(lambda k, v, k2, v2: [b"MSETNX", k, v, k2, v2], key, value, key, value),
    st.builds(lambda c, k: [c, k], st.sampled_from([b"INCR", b"DECR"]), key),
    st.builds(lambda c, k, n: [c, k, n], st.sampled_from([b"INCRBY", b"DECRBY"]), key, number),
    st.builds(lambda k, n: [b"INCRBYFLOAT", k, n], key, st.sampled_from([b"0.1", b"-1.5", b"1e3"])),
    st.builds(lambda k, v: [b"APPEND", k, v], key, value),
    st.builds(lambda k, n, v: [b"SETRANGE", k, n, v], key, st.sampled_from([b"0", b"3", b"60"]), value),
    st.builds(lambda k, n, b: [b"SETBIT", k, n, b], key, number, st.sampled_from([b"0", b"1"])),
    st.builds(lambda k: [b"XADD", k, b"*", b"f", b"v"], key),
    st.builds(lambda c, k: [c, k], st.sampled_from([b"DEL", b"PERSIST"]), key),
    st.builds(lambda k: [b"PEXPIRE", k, b"100000"], key),
    st.builds(lambda k, k2: [b"RENAME", k, k2], key, key),
    st.just([b"FLUSHDB"]),
)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(commands, max_size=30))
def test_replay_and_rewrite_rebuild_the_same_strings(run: list[list[bytes]]) -> None:
    _check_restarts(run)


def test_string_writes_replay_to_the_same_state() -> None:
    _check_restarts(
        [
            [b"SET", b"a", b"1", b"EX", b"100"],
            [b"INCRBYFLOAT", b"a", b"0.5"],
            [b"APPEND", b"a", b"xyz"],
            [b"SETRANGE", b"a", b"10", b"!"],
            [b"SETBIT", b"a", b"100", b"1"],
            [b"SET", b"b", b"old", b"PX", b"100000", b"GET"],
            [b"GETEX", b"b", b"EX", b"500"],
            [b"INCR", b"c"],
            [b"MSETNX", b"d", b"1", b"e", b"2"],
            [b"GETDEL", b"e"],
            [b"SETEX", b"f", b"100", b"v"],
            [b"XADD", b"s", b"1-1", b"f", b"v"],
            [b"SET", b"s", b"now a string", b"KEEPTTL"],
        ]
    )


def _records(directory: Path) -> list[list[bytes]]:
    data = Path(directory, FILE_NAME).read_bytes()
    return [record.args for record in RecordReader().feed(data)]


def test_what_string_writes_journal() -> None:
    with tempfile.TemporaryDirectory() as directory:
        broker, store = _load(Path(directory))
        peer = Peer(broker)
        before = now_ms()
        for args in [
            ["SET", "a", "1", "EX", "100", "GET"],
            ["SET", "a", "2", "NX"],  # (no change: no record)
            ["SET", "a", "3", "XX", "KEEPTTL"],
            ["INCRBYFLOAT", "a", "0.25"],
            ["INCR", "a"],  # (refused: no record)
            ["SET", "n", "1"],
            ["INCRBY", "n", "5"],
            ["GETEX", "n", "PX", "5000"],
            ["GETEX", "n", "PERSIST"],
            ["GETEX", "n", "PERSIST"],  # (no expiry left: no record)
            ["GETEX", "n", "EXAT", "1"],
            ["PSETEX", "p", "1000", "v"],
            ["MSETNX", "p", "1", "q", "2"],  # (p exists: no record)
            ["MSETNX", "q", "1", "r", "2"],
            ["SETRANGE", "r", "0", ""],  # (nothing set: no record)
            ["APPEND", "r", "x"],
        ]:
            peer.send(*args)
        after = now_ms()
        store.close()
        records = _records(Path(directory))
    expected = [
        [b"SET", b"a", b"1", b"PXAT"],
        [b"SET", b"a", b"3", b"KEEPTTL"],
        [b"SET", b"a", b"3.25", b"KEEPTTL"],
        [b"SET", b"n", b"1"],
        [b"SET", b"n", b"6", b"KEEPTTL"],
        [b"PEXPIREAT", b"n"],
        [b"PERSIST", b"n"],
        [b"DEL", b"n"],
        [b"SET", b"p", b"v", b"PXAT"],
        [b"MSET", b"q", b"1", b"r", b"2"],
        [b"APPEND", b"r", b"x"],
    ]
    assert [r[: len(e)] for r, e in zip(records, expected, strict=True)] == expected
    for record, relative in ((records[0], 100_000), (records[5], 5000), (records[8], 1000)):
        assert before + relative <= int(record[-1]) <= after + relative


def _client(port: int | None) -> redis.Redis:
    return redis.Redis(port=port or 0, socket_timeout=10)


@pytest.mark.slow
def test_strings_survive_a_clean_stop_and_a_sigkill(tmp_path: Path) -> None:
    store = ["--store_dir", str(tmp_path), "--appendfsync", "always"]
    with live_node(*store, redis=True) as node:
        client = _client(node.redis_port)
        client.set("plain", "v")
        client.set("lock", "token", nx=True, px=100_000)
        client.incrbyfloat("float", 10.5)
        client.incrbyfloat("float", 0.1)
        client.append("log", "a")
        client.append("log", "b")
        client.setrange("log", 5, "z")
        client.xadd("stream", {"f": "v"})
        client.set("gone", "x", px=1)
        client.close()
        node.process.terminate()
        node.process.wait(10)
    for stop in ("kill", "terminate"):
        with live_node(*store, redis=True) as node:
            client = _client(node.redis_port)
            assert client.get("plain") == b"v"
            assert client.get("lock") == b"token"
            assert 0 < client.pttl("lock") <= 100_000
            assert client.get("float") == b"10.6"
            assert client.get("log") == b"ab\x00\x00\x00z"
            assert client.type("stream") == b"stream"
            assert client.exists("gone") == 0
            client.incr("counter")
            client.close()
            getattr(node.process, stop)()
            node.process.wait(10)
    with live_node(*store, redis=True) as node:
        client = _client(node.redis_port)
        assert client.get("counter") == b"2"
        client.close()
