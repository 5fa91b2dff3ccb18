"""CLIENT TRACKING: its argument errors, CLIENT CACHING/GETREDIR/TRACKINGINFO, and the invalidation
messages of every mode (default, OPTIN, OPTOUT, NOLOOP, BCAST with prefixes, RESP3 pushes, RESP2
redirection to a subscriber, a redirection gone) compared byte for byte with redis-server (skipped
where it is not installed); invalidations from expiry, FLUSHDB, stream capture and the table's
limit; hypothesis-made CLIENT TRACKING requests answered as redis-server answers them; node-redis's
client-side cache. (redis-py's refuses servers older than 7.4, redis-server 7.2 as much as this
node.)"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.config.options import AccountConfig, Config, RedisConfig, StreamConfig, UserConfig
from node.resp.tracking import keys_of
from node.run.launch import NodeHandle
from pipeline.local import redis_server
from tests.live import live_node
from tests.node.resp.test_resp_conformance import Step, receive
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.node.resp.test_resp_maxmemory import command, nats_request
from tests.support import start_node

pytestmark = pytest.mark.timeout(60)

needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)

RESP3 = b"hello 3\r\n"
"""Sent, its reply (an identity) not compared."""

MODES: list[Step] = [
    (0, b"flushall\r\n"),
    (0, RESP3),
    (0, b"client tracking\r\nclient tracking maybe\r\nclient tracking on foo\r\n"),
    (0, b"client tracking on redirect\r\nclient tracking on redirect x\r\n"),
    (0, b"client tracking on redirect 999999\r\nclient tracking on prefix a\r\n"),
    (0, b"client tracking on bcast optin\r\nclient tracking on optin optout\r\n"),
    (0, b"client tracking on bcast prefix a prefix ab\r\nclient tracking off redirect 999999\r\n"),
    (0, b"client getredir\r\nclient trackinginfo\r\nclient caching yes\r\nclient caching maybe\r\n"),
    (0, b"client tracking on\r\nclient trackinginfo\r\nclient getredir\r\n"),
    (0, b"client caching yes\r\nclient caching no\r\nclient tracking on bcast\r\n"),
    # Default mode: what was read is invalidated once, whoever writes it.
    (0, b"xadd s 1-1 a 1\r\nxlen s\r\nxrange s - +\r\n"),
    (1, b"xadd s 2-1 a 1\r\n"),
    (1, b"xadd s 3-1 a 1\r\n"),
    (0, b"xlen s\r\nexists s t u\r\ntype t\r\nttl x\r\npttl y\r\n"),
    (1, b"del s t u\r\nxadd x 1-1 a 1\r\nxadd y 1-1 a 1\r\n"),
    (0, b"xlen s\r\nxadd s 1-1 a 1\r\n"),
    (0, b"xlen s\r\nmulti\r\nxadd s 2-1 a 1\r\nxlen s\r\nexec\r\n"),
    (1, b"xadd s 3-1 a 1\r\n"),
    (0, b"xread STREAMS s q 0 0\r\nxinfo groups s\r\n"),
    (1, b"xadd q 1-1 a 1\r\nxadd s 4-1 a 1\r\n"),
    (0, b"xlen s\r\nflushdb\r\nping\r\n"),
    (1, b"select 3\r\nxadd q 1-1 f v\r\nflushall\r\nflushall\r\nselect 0\r\n"),
    # Strings: the read-only commands remember their keys; GETEX and GETDEL (writes) do not.
    (1, b"set a 1\r\nset b 2\r\nset c abc\r\n"),
    (0, b"get a\r\nstrlen b\r\ngetrange c 0 1\r\nget nope\r\n"),
    (1, b"set a 2\r\nincr b\r\nappend c d\r\nset nope 1\r\n"),
    (0, b"substr c 0 1\r\ngetbit a 0\r\nmget d e a\r\nlcs c d\r\n"),
    (1, b"setrange c 0 x\r\nsetbit a 0 1\r\nmset d 1 e 2\r\n"),
    (0, b"getex a\r\ngetdel b\r\nget c\r\n"),
    (1, b'set a 3\r\nset b 3\r\nsetrange c 1 ""\r\nsetbit c 0 0\r\nsetbit c 1 1\r\n'),
    (0, b"get c\r\nget a\r\n"),
    (1, b"set c y\r\ngetex a\r\ngetex a persist\r\n"),
    (0, b"get c\r\nget a\r\n"),
    (1, b"setbit c 0 0\r\ngetex a ex 100\r\n"),
    (0, b"get a\r\nset a 4\r\nget a\r\ngetdel a\r\nget c\r\n"),
    (1, b"incrbyfloat c 1\r\nflushdb\r\n"),
    # OPTIN and OPTOUT.
    (0, b"client tracking off\r\nclient tracking on optin\r\nclient trackinginfo\r\n"),
    (0, b"client caching no\r\nxlen a\r\nclient caching yes\r\nclient trackinginfo\r\n"),
    (0, b"xlen b\r\nclient trackinginfo\r\nclient caching yes\r\nmulti\r\nxlen c\r\nexec\r\n"),
    (1, b"xadd a 1-1 f v\r\nxadd b 1-1 f v\r\nxadd c 1-1 f v\r\n"),
    (0, b"get sa\r\nclient caching yes\r\nget sb\r\nget sc\r\n"),
    (1, b"mset sa 1 sb 1 sc 1\r\n"),
    (0, b"client tracking off\r\nclient tracking on optout noloop\r\nclient caching no\r\n"),
    (0, b"xlen a\r\nxlen b\r\n"),
    (0, b"xadd b 2-1 f v\r\n"),
    (1, b"xadd a 2-1 f v\r\nxadd b 3-1 f v\r\n"),
    (0, b"get sa\r\nclient caching no\r\nget sb\r\nget sc\r\nset sa 2\r\n"),
    (1, b"mset sa 1 sb 1 sc 1\r\n"),
    (0, b"client tracking on optin\r\nclient tracking on optout\r\nclient trackinginfo\r\n"),
    # BCAST and its prefixes.
    (0, b"client tracking off\r\nclient tracking on bcast prefix a prefix b\r\n"),
    (0, b"client trackinginfo\r\nclient tracking on bcast prefix ab\r\n"),
    (0, b"client tracking on bcast prefix c\r\nclient trackinginfo\r\n"),
    (1, b"xadd a1 1-1 f v\r\nxadd b1 1-1 f v\r\nxadd d 1-1 f v\r\n"),
    (1, b"set a9 1\r\nget b9\r\nset d9 1\r\nmset a8 1 c8 2 d8 3\r\nincr b7\r\n"),
    (1, b"select 5\r\nxadd a5 1-1 f v\r\nselect 9\r\nflushall\r\nselect 0\r\n"),
    (1, b"multi\r\nxadd a2 1-1 f v\r\nxadd c2 1-1 f v\r\nexec\r\n"),
    (0, b"xadd a3 1-1 f v\r\nclient tracking on\r\nclient tracking off\r\nclient trackinginfo\r\n"),
    (0, b"client tracking on bcast noloop\r\nxadd z 1-1 f v\r\n"),
    (1, b"xadd y 1-1 f v\r\nflushdb\r\n"),
    (0, b"set z 1\r\nget z\r\n"),
    (1, b"set z 2\r\nsetbit z 0 0\r\ngetdel z\r\n"),
    (0, b"client tracking off\r\nclient tracking on bcast prefix y prefix x\r\n"),
    (1, b"mset y2 1 x2 1 y1 1 x1 1\r\n"),  # (prefix by prefix, key by key, in byte order)
    (0, b"client tracking off\r\nreset\r\n"),
]
"""RESP3 pushes in every mode."""

REDIRECTED: list[Step] = [
    (0, b"flushall\r\n"),
    (1, b"subscribe __redis__:invalidate\r\n"),
    (0, b"client tracking on redirect {1}\r\nclient trackinginfo\r\n"),
    (0, b"client tracking on redirect {1} redirect {1}\r\n"),
    (0, b"xlen s\r\nxadd s 1-1 f v\r\nxlen s\r\n"),
    (2, b"xadd s 2-1 f v\r\nflushdb\r\n"),
    (0, b"client tracking off\r\nclient tracking on bcast redirect {1}\r\n"),
    (2, b"xadd s 1-1 f v\r\nxadd t 1-1 f v\r\n"),
    (0, b"client tracking off\r\nclient tracking on redirect {2}\r\nxlen s\r\n"),
    (1, b"xadd s 2-1 f v\r\n"),  # (2 is not subscribed: it gets nothing)
    (3, RESP3),
    (0, b"client tracking on redirect {3}\r\nxlen s\r\n"),
    (1, b"xadd s 3-1 f v\r\n"),  # (a RESP3 target gets pushes)
    (0, b"client tracking on redirect {4}\r\nxlen s\r\n"),
    (4, b"quit\r\n"),
    (1, b"xadd s 4-1 f v\r\n"),
    (0, b"client trackinginfo\r\n"),
    (0, RESP3),
    (0, b"xlen s\r\n"),
    (1, b"xadd s 5-1 f v\r\n"),
    (0, b"client trackinginfo\r\n"),
]
"""Invalidations redirected: ``{n}`` stands for connection n's id."""


def play(port: int, steps: list[Step]) -> Iterator[tuple[int, bytes, bytes]]:
    """As ``test_resp_conformance.play``, with ``{n}`` in a request standing for the id of
    connection n (asked for on each connection before the steps), and in the replies that name a
    connection (TRACKINGINFO's redirect, ``tracking-redir-broken``)."""
    conns: dict[int, socket.socket] = {}
    ids: dict[str, bytes] = {}
    try:
        for n in sorted({i for i, _ in steps}):
            conns[n] = socket.create_connection(("127.0.0.1", port), timeout=5)
            conns[n].sendall(b"client id\r\n")
            ids[str(n)] = receive(conns[n], 2.0).strip(b":\r\n")
        for index, template in steps:
            request = template
            for name, value in ids.items():
                request = request.replace(b"{%s}" % name.encode(), value)
            conns[index].sendall(request)
            for n in sorted(conns):
                got = receive(conns[n], 2.0 if n == index else 0.1)
                for m, value in ids.items():  # (ids in replies shown as ``{n}`` again)
                    for before in (b"$8\r\nredirect\r\n:", b"tracking-redir-broken\r\n:"):
                        got = got.replace(before + value + b"\r\n", before + b"{%s}\r\n" % m.encode())
                yield n, template, got
    finally:
        for conn in conns.values():
            conn.close()


async def redis_node(nursery: trio.Nursery, **config: object) -> NodeHandle:
    return await start_node(
        nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)).evolve(**config)
    )


@pytest.mark.slow
@needs_redis_server
@pytest.mark.parametrize("steps", [MODES, REDIRECTED], ids=["modes", "redirected"])
async def test_invalidations_as_redis_server_sends_them(
    nursery: trio.Nursery, redis_port: int, steps: list[Step]
) -> None:
    node = await redis_node(nursery)

    def both() -> tuple[list[tuple[int, bytes, bytes]], list[tuple[int, bytes, bytes]]]:
        return list(play(redis_port, steps)), list(play(node.redis_port or 0, steps))

    theirs, ours = await trio.to_thread.run_sync(both)
    for expected, got in zip(theirs, ours, strict=True):
        if expected[1] != RESP3:
            assert got[1:] == expected[1:], f"connection {got[0]}"


def test_keys_of_the_read_commands() -> None:
    assert keys_of(b"xlen", [b"xlen", b"s"]) == [b"s"]
    assert keys_of(b"exists", [b"exists", b"a", b"b"]) == [b"a", b"b"]
    assert keys_of(b"xread", [b"xread", b"COUNT", b"1", b"streams", b"a", b"b", b"0", b"0"]) == [
        b"a",
        b"b",
    ]
    assert keys_of(b"xread", [b"xread", b"STREAMS", b"a", b"b", b"0"]) == [b"a"]  # (unbalanced)
    assert keys_of(b"xinfo|stream", [b"xinfo", b"stream", b"s"]) == [b"s"]
    assert keys_of(b"xadd", [b"xadd", b"s", b"*", b"f", b"v"]) == []
    assert keys_of(b"mget", [b"mget", b"a", b"b", b"c"]) == [b"a", b"b", b"c"]
    assert keys_of(b"lcs", [b"lcs", b"a", b"b", b"len"]) == [b"a", b"b"]
    assert keys_of(b"getrange", [b"getrange", b"a", b"0", b"1"]) == [b"a"]
    assert keys_of(b"getex", [b"getex", b"a"]) == keys_of(b"getdel", [b"getdel", b"a"]) == []


class Pushes:
    """A RESP3 connection that tracks keys: requests in, replies and pushes read apart."""

    def __init__(self, port: int, *tracking: bytes, user: bytes = b"") -> None:
        self.conn = socket.create_connection(("127.0.0.1", port), timeout=5)
        hello = command(b"hello", b"3", b"auth", user, b"pw") if user else b"hello 3\r\n"
        self.conn.sendall(hello + command(b"client", b"tracking", b"on", *tracking))
        assert receive(self.conn, 2.0).endswith(b"+OK\r\n")

    def ask(self, request: bytes) -> bytes:
        self.conn.sendall(request)
        return receive(self.conn, 2.0)

    def wait(self, expected: bytes) -> None:
        got = b""
        deadline = time.monotonic() + 5
        while got != expected:
            assert time.monotonic() < deadline, got
            got += receive(self.conn, 0.5)

    def close(self) -> None:
        self.conn.close()


def invalidate(*keys: bytes) -> bytes:
    return b">2\r\n$10\r\ninvalidate\r\n*%d\r\n" % len(keys) + b"".join(
        b"$%d\r\n%b\r\n" % (len(k), k) for k in keys
    )


async def test_expiry_invalidates_lazily_and_actively(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery)

    def scenario() -> None:
        tracking = Pushes(node.redis_port or 0)
        client = redis.Redis(port=node.redis_port or 0)
        client.xadd("lazy", {"f": "v"}, id="1-1")
        client.xadd("active", {"f": "v"}, id="1-1")
        assert tracking.ask(b"xlen lazy\r\nxlen active\r\n") == b":1\r\n:1\r\n"
        client.config_set("notify-keyspace-events", "")
        client.pexpire("active", 1)  # (nobody reads it: the sweep removes it)
        tracking.wait(invalidate(b"active"))
        client.pexpire("lazy", 1)
        tracking.wait(invalidate(b"lazy"))  # (the PEXPIRE itself is a change)
        assert tracking.ask(b"xlen lazy\r\n") == b":0\r\n"
        client.close()
        tracking.close()

    await trio.to_thread.run_sync(scenario)


async def test_captured_entries_invalidate(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery, streams=(StreamConfig("events", ("orders.>",)),))

    def scenario() -> None:
        default = Pushes(node.redis_port or 0)
        bcast = Pushes(node.redis_port or 0, b"bcast", b"prefix", b"ev")
        assert "id" in nats_request(node.port, b"orders.new", b"x")
        bcast.wait(invalidate(b"events"))
        assert default.ask(b"xlen events\r\n") == b":1\r\n"
        assert "id" in nats_request(node.port, b"orders.new", b"y")
        default.wait(invalidate(b"events"))
        bcast.wait(invalidate(b"events"))
        default.close()
        bcast.close()

    await trio.to_thread.run_sync(scenario)


async def test_the_table_limit_evicts_with_an_invalidation(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery)

    def scenario() -> None:
        tracking = Pushes(node.redis_port or 0)
        client = redis.Redis(port=node.redis_port or 0)
        assert client.config_get("tracking-table-max-keys") == {"tracking-table-max-keys": "1000000"}
        assert tracking.ask(b"xlen a\r\nxlen b\r\nxlen c\r\n") == b":0\r\n:0\r\n:0\r\n"
        client.config_set("tracking-table-max-keys", 1)
        tracking.wait(invalidate(b"a") + invalidate(b"b"))  # (the oldest go first)
        assert tracking.ask(b"xlen d\r\n") == b":0\r\n" + invalidate(b"c")
        info = client.info()
        assert (info["tracking_clients"], info["tracking_total_keys"]) == (1, 1)
        assert (info["tracking_total_items"], info["tracking_total_prefixes"]) == (1, 0)
        client.config_set("tracking-table-max-keys", 0)
        client.close()
        tracking.close()

    await trio.to_thread.run_sync(scenario)


async def test_redirection_stays_in_the_account(nursery: trio.Nursery) -> None:
    users = (
        UserConfig(user="a", password="pw", account="A"),
        UserConfig(user="a2", password="pw", account="A"),
        UserConfig(user="b", password="pw", account="B"),
    )
    node = await redis_node(nursery, users=users, accounts=(AccountConfig("A"), AccountConfig("B")))

    def scenario() -> None:
        port = node.redis_port or 0
        a, a2, b = (redis.Redis(port=port, username=u, password="pw") for u in ("a", "a2", "b"))
        with pytest.raises(redis.ResponseError, match="redirect to does not exist"):
            a.execute_command("CLIENT", "TRACKING", "ON", "REDIRECT", b.client_id())
        assert a.execute_command("CLIENT", "TRACKING", "ON", "REDIRECT", a2.client_id()) == b"OK"
        # A key of the same name in another account is another key.
        tracking = Pushes(port, user=b"a2")
        assert tracking.ask(b"xlen s\r\n") == b":0\r\n"
        b.xadd("s", {"f": "v"})
        assert tracking.ask(b"ping\r\n") == b"+PONG\r\n"
        a.xadd("s", {"f": "v"})
        tracking.wait(invalidate(b"s"))
        for client in (a, a2, b):
            client.close()
        tracking.close()

    await trio.to_thread.run_sync(scenario)


@pytest.fixture(scope="module")
def both_servers() -> Iterator[tuple[int, int]]:
    with redis_server() as theirs, live_node(redis=True) as ours:
        assert ours.redis_port is not None
        yield theirs, ours.redis_port


WORDS = [b"on", b"off", b"ON", b"redirect", b"bcast", b"BCAST", b"prefix", b"optin", b"optout"]
WORDS += [b"noloop", b"x", b"a", b"ab", b"", b"0", b"-1", b"1x", b"caching", b"yes", b"no"]
TRACKING = st.lists(st.one_of(st.sampled_from(WORDS), st.binary(max_size=4)), max_size=7)


END = b"end-of-requests"


def ask_both(ports: tuple[int, int], requests: list[list[bytes]]) -> tuple[bytes, bytes]:
    """The replies to ``requests`` on a fresh connection of each server (``{me}``: its own id)."""
    answers = []
    for port in ports:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"client id\r\n")
            me = receive(conn, 2.0).strip(b":\r\n")
            conn.sendall(b"".join(command(*(me if a == b"{me}" else a for a in r)) for r in requests))
            conn.sendall(command(b"client", b"trackinginfo") + command(b"client", b"getredir"))
            conn.sendall(command(b"echo", END))
            got = b""
            while not got.endswith(END + b"\r\n"):
                chunk = conn.recv(65536)
                assert chunk, got
                got += chunk
            for before in (b"$8\r\nredirect\r\n:", b"\r\n:"):  # (TRACKINGINFO, GETREDIR)
                got = got.replace(before + me + b"\r\n", before + b"{me}\r\n")
            answers.append(got)
    return answers[0], answers[1]


def _overlapping_new_prefixes(requests: list[list[bytes]]) -> bool:
    """Whether a request gives BCAST prefixes of which a later one overlaps an earlier one:
    redis-server then answers both an error and OK (two replies to one request)."""
    for args in requests:
        given_prefixes = [args[i + 1] for i in range(len(args) - 1) if args[i].lower() == b"prefix"]
        for i, prefix in enumerate(given_prefixes[1:], 1):
            if any(p.startswith(prefix) or prefix.startswith(p) for p in given_prefixes[i + 1 :]):
                return True
    return False


@pytest.mark.slow
@needs_redis_server
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    requests=st.lists(
        st.one_of(
            TRACKING.map(lambda args: [b"client", b"tracking", *args]),
            st.lists(st.sampled_from(WORDS), max_size=2).map(
                lambda args: [b"client", b"caching", *args]
            ),
            st.just([b"client", b"tracking", b"on", b"redirect", b"{me}"]),
        ),
        max_size=4,
    )
)
def test_tracking_arguments_as_redis_server(
    both_servers: tuple[int, int], requests: list[list[bytes]]
) -> None:
    if _overlapping_new_prefixes(requests):
        return
    theirs, ours = ask_both(both_servers, requests)
    assert ours == theirs


NODE_REDIS = """
const { createClient } = require('redis');
(async () => {
  const port = Number(process.argv[1]);
  const socket = { port, host: '127.0.0.1', reconnectStrategy: false };
  const cached = createClient({ socket, RESP: 3, clientSideCache: { ttl: 0, maxEntries: 0 } });
  const other = createClient({ socket });
  cached.on('error', (e) => { console.log('error ' + e); process.exit(1); });
  await cached.connect();
  await other.connect();
  await other.xAdd('s', '1-1', { f: 'v' });
  const cache = cached.clientSideCache;
  console.log('read', await cached.xLen('s'), 'cached', cache.size());
  console.log('read', await cached.xLen('s'), 'hits', cache.stats().hitCount);
  await other.xAdd('s', '2-1', { f: 'v' });
  for (let i = 0; i < 250 && cache.size() > 0; i++) await new Promise((r) => setTimeout(r, 20));
  console.log('invalidated', cache.size());
  console.log('read', await cached.xLen('s'), 'misses', cache.stats().missCount);
  await cached.quit();
  await other.quit();
})().catch((e) => { console.log('error ' + e); process.exit(1); });
"""
"""node-redis with ``clientSideCache`` (RESP3): a read, the same read from the cache, a write by
another client, the invalidation emptying the cache, and the read from the node again."""


def node_js_redis() -> bool:
    """Whether Node.js finds npm's ``redis`` package (installed where ``NODE_PATH`` points)."""
    try:
        found = subprocess.run(["node", "-e", "require('redis')"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return found.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not node_js_redis(), reason="needs node and npm's redis (NODE_PATH)")
async def test_node_redis_client_side_cache(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery)
    done = await trio.run_process(
        ["node", "-e", NODE_REDIS, str(node.redis_port)], capture_stdout=True, check=False
    )
    assert done.stdout.decode().splitlines() == [
        "read 1 cached 1",
        "read 1 hits 1",
        "invalidated 0",
        "read 2 misses 2",
    ]
