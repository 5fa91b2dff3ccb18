"""The stream core against a live redis-server: ID parsing and a long random script of stream commands.

The server runs with stream-node-max-entries 3 so that block splitting, freeing and node-granular
trimming are exercised. Skipped where redis-server is not installed; STREAMS_REDIS_SERVER names another
build (the installed 7.0's stream code matches 7.2 in what is compared, and against a 7.2 build the
consumers, their activity and XSETID's max-deleted check are compared too). Delivery times are not
compared (the server uses its own clock), so every claim uses min-idle 0.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.bench.ports import free_port
from node.data.streams import (
    MAX_ID,
    Stream,
    StreamError,
    Trim,
    format_id,
    format_parts,
    group_infos,
    make_id,
    parse_add_id,
    parse_bound,
)

SERVER = os.environ.get("STREAMS_REDIS_SERVER", "redis-server")  # another build, e.g. a 7.2
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which(SERVER) is None, reason="redis-server not installed"),
]

NODE = 3
PAST = 5000  # an XCLAIM TIME both clocks accept as is (it is before either's now)


@pytest.fixture(scope="module")
def server() -> Iterator[redis.Redis]:
    port = free_port()
    proc = subprocess.Popen(
        [SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, socket_timeout=10, protocol=2)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.response_callbacks.clear()  # raw replies, as the server sends them
        client.config_set("stream-node-max-entries", NODE)
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


def _redis(client: redis.Redis, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", client.execute_command(*args)
    except redis.ResponseError as exc:
        return "err", str(exc)


def _ours(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args, **kwargs)
    except StreamError as exc:
        return "err", str(exc).removeprefix("ERR ")


ID_TEXT = st.one_of(
    st.text(alphabet="0123456789-+*( \t", max_size=12),
    st.builds(
        lambda a, sep, b: f"{a}{sep}{b}",
        st.sampled_from(
            ["0", "1", "05", "-0", "+3", " 7", "18446744073709551615", "18446744073709551616"]
        ),
        st.sampled_from(["", "-", "--"]),
        st.sampled_from(
            ["", "0", "*", "-0", "-1", "+2", " 3", "18446744073709551615", "99999999999999999999"]
        ),
    ),
)


@pytest.mark.timeout(60)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=ID_TEXT)
def test_add_id_parsing_matches_redis(server: redis.Redis, text: str) -> None:
    arg = text.encode()
    server.delete("ids")
    theirs = _redis(server, "XADD", "ids", arg, "f", "v")
    ours = _ours(parse_add_id, arg, None, int(time.time() * 1000))
    if theirs[0] == "ok" and arg.strip() == b"*":
        return  # a generated ID: only its acceptance is comparable
    if ours[0] == "ok":
        ours = ("ok", format_parts(ours[1]))
    assert ours == theirs


@pytest.mark.timeout(60)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=ID_TEXT, end=ID_TEXT)
def test_range_bounds_match_redis(server: redis.Redis, start: str, end: str) -> None:
    """Bounds probed on a stream whose entries sit at the edges of what the bounds can denote."""
    edges = [make_id(0, 1), make_id(0, 5), make_id(3, 0), make_id(3, 2**64 - 1), make_id(7, 0), MAX_ID]
    if server.xlen("edges") != len(edges):
        server.delete("edges")
        for entry_id in edges:
            server.execute_command("XADD", "edges", format_id(entry_id), "f", "v")
    theirs = _redis(server, "XRANGE", "edges", start.encode(), end.encode())
    lo = _ours(parse_bound, start.encode(), end=False)
    hi = _ours(parse_bound, end.encode(), end=True) if lo[0] == "ok" else lo
    if hi[0] == "err":
        assert theirs == hi
        return
    assert theirs[0] == "ok"
    assert [entry_id for entry_id, _ in theirs[1]] == [
        format_id(i) for i in edges if lo[1] <= i <= hi[1]
    ]


# ------------------------------------------------------------------ the scripted differential run


class Pair:
    """Runs each command on redis-server and on the core, comparing replies and then state."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client = client
        self.key = key
        self.stream = Stream(node_max_entries=NODE)
        self.now = 10_000
        version = client.execute_command("INFO", "server").split(b"redis_version:")[1].split(b"\r\n")[0]
        self.v72 = tuple(int(p) for p in version.split(b".")[:2]) >= (7, 2)

    def both(self, theirs: tuple[str, Any], ours: tuple[str, Any]) -> None:
        assert ours == theirs

    def check_state(self) -> None:
        s, c = self.stream, self.client
        info = c.execute_command("XINFO", "STREAM", self.key)
        info = dict(zip(info[0::2], info[1::2], strict=True))
        first, last = s.first_entry(), s.last_entry()
        assert info[b"length"] == s.length
        assert info[b"radix-tree-keys"] == s.node_count
        assert info[b"last-generated-id"] == format_id(s.last_id)
        assert info[b"max-deleted-entry-id"] == format_id(s.max_deleted_id)
        assert info[b"entries-added"] == s.entries_added
        assert info[b"recorded-first-entry-id"] == format_id(s.first_id)
        assert info[b"first-entry"] == (None if first is None else [format_id(first[0]), first[1]])
        assert info[b"last-entry"] == (None if last is None else [format_id(last[0]), last[1]])
        assert c.execute_command("XRANGE", self.key, "-", "+") == [
            [format_id(i), p] for i, p in s.range(0, MAX_ID)
        ]
        groups = c.execute_command("XINFO", "GROUPS", self.key)
        ours = group_infos(s)
        assert len(groups) == len(ours)
        for row, g in zip(groups, ours, strict=True):
            fields = dict(zip(row[0::2], row[1::2], strict=True))
            assert fields[b"name"] == g.name
            assert fields[b"pending"] == g.pending
            assert fields[b"last-delivered-id"] == format_id(g.last_id)
            assert fields[b"entries-read"] == g.entries_read
            assert fields[b"lag"] == g.lag
            group = s.groups[g.name]
            count, lo, hi, per = group.pending_summary()
            summary = c.execute_command("XPENDING", self.key, g.name)
            assert summary == [
                count,
                None if lo is None else format_id(lo),
                None if hi is None else format_id(hi),
                None if not count else [[name, b"%d" % n] for name, n in per],
            ]
            rows = c.execute_command("XPENDING", self.key, g.name, "-", "+", 1000)
            assert [[r[0], r[1], r[3]] for r in rows] == [
                [format_id(i), name, n]
                for i, name, _, n in group.pending_range(
                    0, MAX_ID, 1000, consumer=None, min_idle=None, now=self.now
                )
            ]
            full = c.execute_command("XINFO", "STREAM", self.key, "FULL", "COUNT", 0)
            detail = dict(zip(full[0::2], full[1::2], strict=True))[b"groups"]
            row = next(r for r in detail if r[1] == g.name)
            pel_detail = dict(zip(row[0::2], row[1::2], strict=True))[b"pending"]
            assert {r[0] for r in pel_detail if r[2] == PAST} == {
                format_id(i) for i, n in group.pel.items() if n.delivery_time == PAST
            }
            if self.v72:  # 7.0 creates claimers lazily and has no active-time
                consumers = c.execute_command("XINFO", "CONSUMERS", self.key, g.name)
                assert [(r[1], r[3], r[7] == -1) for r in consumers] == [
                    (i.name, i.pending, i.active_time == -1) for i in group.consumer_infos(self.now)
                ]


def _entries(reply: list[list[Any]] | None) -> list[tuple[bytes, Any]]:
    return [(e[0], e[1]) for e in reply or []]


def _fmt(entries: Sequence[tuple[int, Any]]) -> list[tuple[bytes, Any]]:
    return [(format_id(i), p) for i, p in entries]


def _claimed(reply: list[Any]) -> list[Any]:
    return [item if isinstance(item, bytes) else (item[0], item[1]) for item in reply]


def _ours_claimed(items: Sequence[int] | Sequence[tuple[int, list[bytes]]]) -> list[Any]:
    return [format_id(x) if isinstance(x, int) else (format_id(x[0]), x[1]) for x in items]


def _step(pair: Pair, rng: random.Random) -> None:
    s, c, key = pair.stream, pair.client, pair.key
    args: list[Any]
    pair.now += rng.randrange(0, 3)
    names = [b"g1", b"g2"]
    consumers = [b"alice", b"bob", b"carol"]
    op = rng.random()
    ids = [i for i, _ in s.range(0, MAX_ID)]
    candidates = [*ids, rng.randrange(1, make_id(s.last_id >> 64, 0) + make_id(3, 0) + 2)]
    if op < 0.30:
        ms = (s.last_id >> 64) + rng.choice([0, 0, 1, 2])
        text = rng.choice([b"%d-*" % ms, b"%d-%d" % (ms, rng.randrange(0, 4)), b"%d" % ms])
        pairs = rng.choice([[b"a", b"1"], [b"a", b"2", b"b", b"3"], [b"x", b"y" * rng.randrange(0, 5)]])
        theirs = _redis(c, "XADD", key, text, *pairs)
        ours = _ours(parse_add_id, text, s, pair.now)
        if ours[0] == "ok":
            s.add(ours[1], pairs)
            ours = ("ok", format_parts(ours[1]))
        pair.both(theirs, ours)
    elif op < 0.40:
        victims = rng.sample(candidates, min(len(candidates), rng.randrange(1, 4)))
        pair.both(_redis(c, "XDEL", key, *map(format_id, victims)), ("ok", s.delete(victims)))
    elif op < 0.47:
        approx = rng.random() < 0.5
        limit = rng.choice([None, 0, 2, 3, 5]) if approx else None
        if rng.random() < 0.5:
            trim = Trim("maxlen", rng.randrange(0, 12), approx, limit)
            thr = b"%d" % trim.threshold
        else:
            trim = Trim("minid", rng.choice(candidates), approx, limit)
            thr = format_id(trim.threshold)
        args = ["XTRIM", key, trim.strategy.upper(), "~" if approx else "=", thr]
        if limit is not None:
            args += ["LIMIT", limit]
        pair.both(_redis(c, *args), ("ok", s.trim(trim)))
    elif op < 0.52:
        name = rng.choice(names)
        start = rng.choice([0, s.last_id, *candidates[:3]])
        entries_read = rng.choice([None, None, 0, 2])
        args = ["XGROUP", "CREATE", key, name, format_id(start)]
        if entries_read is not None:
            args += ["ENTRIESREAD", entries_read]
        created = s.create_group(name, start, entries_read)
        theirs = _redis(c, *args)
        pair.both(
            theirs, ("ok", b"OK") if created else ("err", "BUSYGROUP Consumer Group name already exists")
        )
    elif op < 0.55 and s.groups:
        group = s.groups[rng.choice(list(s.groups))]
        target = rng.choice([0, s.last_id, *candidates])
        entries_read = rng.choice([None, 1, 4])
        args = ["XGROUP", "SETID", key, group.name, format_id(target)]
        if entries_read is not None:
            args += ["ENTRIESREAD", entries_read]
        group.set_id(target, entries_read)
        pair.both(_redis(c, *args), ("ok", b"OK"))
    elif op < 0.70 and s.groups:
        group = s.groups[rng.choice(list(s.groups))]
        who = rng.choice(consumers)
        count = rng.choice([None, 1, 2, 5])
        noack = rng.random() < 0.2
        args = ["XREADGROUP", "GROUP", group.name, who]
        args += ["COUNT", count] if count else []
        args += ["NOACK"] if noack else []
        theirs = _redis(c, *args, "STREAMS", key, ">")
        got = group.read_new(s, group.consumer(who, pair.now), count, noack, pair.now)
        pair.both(
            ("ok", None if theirs[1] is None else _entries(theirs[1][0][1])),
            ("ok", _fmt(got) or None),
        )
    elif op < 0.76 and s.groups:
        group = s.groups[rng.choice(list(s.groups))]
        who = rng.choice(consumers)
        after = rng.choice([0, *candidates])
        theirs = _redis(c, "XREADGROUP", "GROUP", group.name, who, "STREAMS", key, format_id(after))
        history = group.read_history(s, group.consumer(who, pair.now), after, None, pair.now)
        pair.both(("ok", _entries(theirs[1][0][1])), ("ok", _fmt(history)))
    elif op < 0.84 and s.groups:
        group = s.groups[rng.choice(list(s.groups))]
        acks = rng.sample(list(group.pel) + candidates, min(3, len(group.pel) + len(candidates)))
        pair.both(_redis(c, "XACK", key, group.name, *map(format_id, acks)), ("ok", group.ack(acks)))
    elif op < 0.91 and s.groups:
        group = s.groups[rng.choice(list(s.groups))]
        who = rng.choice(consumers)
        wanted = rng.sample(list(group.pel) + candidates, min(3, len(group.pel) + len(candidates)))
        force, justid = rng.random() < 0.3, rng.random() < 0.3
        retry = rng.choice([None, None, 5])
        args = ["XCLAIM", key, group.name, who, 0, *map(format_id, wanted)]
        args += ["FORCE"] if force else []
        args += ["JUSTID"] if justid else []
        args += ["RETRYCOUNT", retry] if retry is not None else []
        at = rng.choice([None, None, PAST])
        args += ["TIME", at] if at is not None else []
        theirs = _redis(c, *args)
        taken = group.claim(
            s, who, 0, wanted, pair.now, force=force, justid=justid, retrycount=retry, time=at
        )
        pair.both(("ok", _claimed(theirs[1])), ("ok", _ours_claimed(taken)))
    elif op < 0.97 and s.groups:
        group = s.groups[rng.choice(list(s.groups))]
        who = rng.choice(consumers)
        start = rng.choice([0, *list(group.pel)[:2]])
        count = rng.choice([1, 2, 3, 100])
        justid = rng.random() < 0.3
        args = ["XAUTOCLAIM", key, group.name, who, 0, format_id(start), "COUNT", count]
        args += ["JUSTID"] if justid else []
        theirs = _redis(c, *args)
        cursor, claimed, deleted = group.autoclaim(s, who, 0, start, count, pair.now, justid=justid)
        assert theirs[0] == "ok"
        assert theirs[1][0] == format_id(cursor)
        assert _claimed(theirs[1][1]) == _ours_claimed(claimed)
        assert theirs[1][2] == [format_id(i) for i in deleted]
    elif op < 0.985:
        target = rng.choice([s.last_id, s.last_id + 5, *candidates])
        if not pair.v72:  # 7.0 lacks the "smaller than current max_deleted_entry_id" check
            target = max(target, s.max_deleted_id)
        added = rng.choice([None, s.length, s.entries_added + 3, max(s.length - 1, 0)])
        max_deleted = rng.choice([None, None, 0, target, target + 1])
        args = ["XSETID", key, format_id(target)]
        args += ["ENTRIESADDED", added] if added is not None else []
        args += ["MAXDELETEDID", format_id(max_deleted)] if max_deleted is not None else []
        ours = _ours(s.set_id, target, added, max_deleted)
        pair.both(_redis(c, *args), ("ok", b"OK") if ours == ("ok", None) else ours)
    elif s.groups:
        group = s.groups[rng.choice(list(s.groups))]
        who = rng.choice(consumers)
        pair.both(
            _redis(c, "XGROUP", "DELCONSUMER", key, group.name, who), ("ok", group.delete_consumer(who))
        )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", range(8))
def test_random_script_matches_redis(server: redis.Redis, seed: int) -> None:
    key = f"script{seed}"
    server.delete(key)
    pair = Pair(server, key)
    rng = random.Random(seed)
    pair.both(_redis(server, "XADD", key, "1-1", "a", "1"), ("ok", b"1-1"))
    pair.stream.add((1, 1), [b"a", b"1"])
    for _ in range(400):
        _step(pair, rng)
        pair.check_state()


def _value(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:
        return b"%d" % rng.randrange(-(10**12), 10**12)  # stored as an integer by the listpack
    if kind == 1:
        return b"x" * rng.randrange(0, 300)
    if kind == 2:
        return b"0%d" % rng.randrange(100)  # not canonical: a string
    return b"%d" % rng.randrange(0, 200)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("max_entries", "max_bytes"), [(100, 4096), (100, 300), (500, 8192)])
def test_node_boundaries_match_redis(server: redis.Redis, max_entries: int, max_bytes: int) -> None:
    """Nodes split where Redis's listpacks do: integers, field runs, big ID deltas, XDELs."""
    rng = random.Random(max_bytes)
    server.config_set("stream-node-max-entries", max_entries)
    server.config_set("stream-node-max-bytes", max_bytes)
    try:
        server.delete("nodes")
        stream = Stream(node_max_entries=max_entries, node_max_bytes=max_bytes)
        ms, seq = 1_700_000_000_000, 0
        for _ in range(1500):
            if rng.random() < 0.5:
                ms += rng.choice([1, 1000, 10**6])
                seq = rng.choice([0, 0, 5, 2**63 + 5])
            else:
                seq += rng.choice([1, 1000])
            pairs: list[bytes] = []
            for f in range(rng.choice([1, 2, 3, 150 if max_entries > 100 else 2])):
                pairs += [rng.choice([b"a", b"b", b"f%d" % f]), _value(rng)]
            server.execute_command("XADD", "nodes", b"%d-%d" % (ms, seq), *pairs)
            stream.add((ms, seq), pairs)
            if rng.random() < 0.2:
                victim = rng.choice(stream.range(0, MAX_ID))[0]
                server.execute_command("XDEL", "nodes", format_id(victim))
                stream.delete([victim])
        info = server.execute_command("XINFO", "STREAM", "nodes")
        assert (info[1], info[3]) == (stream.length, stream.node_count)
    finally:
        server.config_set("stream-node-max-entries", NODE)
        server.config_set("stream-node-max-bytes", 4096)
