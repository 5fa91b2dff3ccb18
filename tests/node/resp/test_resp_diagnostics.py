"""The diagnostic commands (COMMAND's subcommands, SLOWLOG, LATENCY, MONITOR, MEMORY, ROLE,
LASTSAVE, DEBUG) and those of features the node runs without (CLUSTER, READONLY, READWRITE):
compared byte for byte with redis-server where the replies can match, and what they report."""

from __future__ import annotations

import shutil
import socket

import pytest
import trio

from node.broker import Broker
from node.config.options import Config, RedisConfig, UserConfig
from node.resp.commands.table import COMMANDS
from tests.node.resp.test_resp_conformance import Step
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.node.resp.test_resp_connection import Peer
from tests.node.resp.test_resp_maxmemory import same_bytes
from tests.support import start_node

pytestmark = pytest.mark.timeout(30)

needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)

SCENARIO: list[Step] = [
    (0, b"role\r\ncluster info\r\ncluster nodes\r\ncluster\r\nreadonly\r\nreadwrite\r\nreadonly x\r\n"),
    (0, b"slowlog reset\r\nslowlog len\r\nslowlog get -2\r\nslowlog get x\r\nslowlog nope\r\n"),
    (0, b"latency latest\r\nlatency history nope\r\nlatency reset nope\r\nlatency help x\r\n"),
    (0, b"command getkeys xadd s * f v\r\ncommand getkeys del a b c\r\ncommand getkeys nope x\r\n"),
    (0, b"command getkeys xread COUNT 2 STREAMS a b 0 0\r\ncommand getkeys ping x\r\n"),
    (0, b"command getkeys xadd s\r\ncommand getkeys xgroup create s g $\r\n"),
    (0, b"command getkeys eval x 2 a b c\r\ncommand getkeys fcall f 1 x y\r\n"),
    (0, b"command getkeys evalsha s 0\r\ncommand getkeys eval_ro x 3 a\r\n"),
    (0, b"command getkeys fcall_ro f x\r\n"),
    (0, b"command getkeysandflags xadd s * f v\r\ncommand getkeysandflags xrange s - +\r\n"),
    (0, b"command list filterby nope x\r\ncommand list filterby module x\r\ncommand list x\r\n"),
    (0, b"command info nope\r\ncommand docs nope\r\nmemory usage nope\r\nmemory usage nope x\r\n"),
    (0, b"xadd s 1-1 f v\r\nmemory usage s samples x\r\nmemory purge\r\n"),
    (0, b"monitor\r\nxlen s\r\nreset\r\nxlen s\r\ndel s\r\n"),
]


@pytest.mark.slow
@needs_redis_server
async def test_diagnostics_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    await same_bytes(nursery, redis_port, SCENARIO)


@needs_redis_server
async def test_command_list_and_info_from_the_table(nursery: trio.Nursery, redis_port: int) -> None:
    peer = Peer(Broker(Config()))
    assert peer.send("COMMAND", "COUNT") == b":%d\r\n" % len(COMMANDS)
    listed = peer.send("COMMAND", "LIST", "FILTERBY", "PATTERN", "xgroup*")
    assert listed.startswith(b"*7\r\n$6\r\nxgroup\r\n")
    assert b"$13\r\nxgroup|create\r\n" in listed
    streams = peer.send("COMMAND", "LIST", "FILTERBY", "ACLCAT", "stream")
    assert b"$4\r\nxadd\r\n" in streams
    assert b"$7\r\nsubscribe\r\n" not in streams
    info = peer.send("COMMAND", "INFO", "xadd", "config|get")
    # name, arity, flags, first, last and step keys as redis-server's
    assert info.startswith(
        b"*2\r\n*10\r\n$4\r\nxadd\r\n:-5\r\n*3\r\n+write\r\n+denyoom\r\n+fast\r\n:1\r\n:1\r\n:1\r\n"
    )
    assert b"$10\r\nconfig|get\r\n:-3\r\n" in info

    def theirs() -> bytes:
        with socket.create_connection(("127.0.0.1", redis_port)) as sock:
            sock.sendall(b"COMMAND INFO xadd\r\n")
            return sock.recv(1 << 16)

    reply = await trio.to_thread.run_sync(theirs)
    assert reply.startswith(b"*1\r\n*10\r\n$4\r\nxadd\r\n:-5\r\n")
    assert b":1\r\n:1\r\n:1\r\n" in reply


def test_slowlog_entries() -> None:
    peer = Peer(Broker(Config()))
    assert peer.send("CONFIG", "SET", "slowlog-log-slower-than", "0") == b"+OK\r\n"
    peer.send("SLOWLOG", "RESET")
    peer.send("AUTH", "secret")
    peer.send("CLIENT", "SETNAME", "me")
    peer.send("XLEN", "a" * 130)
    peer.send("DEL", *[str(n) for n in range(40)])
    assert peer.send("SLOWLOG", "LEN") == b":5\r\n"  # (SLOWLOG RESET's own entry too)
    newest = peer.send("SLOWLOG", "GET", "3")  # (SLOWLOG LEN, DEL, XLEN)
    assert newest.startswith(b"*3\r\n*6\r\n:6\r\n")
    assert b"*2\r\n$7\r\nSLOWLOG\r\n$3\r\nLEN\r\n" in newest
    assert b"$2\r\n29\r\n$23\r\n... (10 more arguments)\r\n" in newest  # (31 shown)
    assert b"a" * 128 + b"... (2 more bytes)" in newest
    assert b"$11\r\n127.0.0.1:1\r\n$2\r\nme\r\n" in newest
    oldest = peer.send("SLOWLOG", "GET", "-1")
    assert b"*2\r\n$4\r\nAUTH\r\n$10\r\n(redacted)\r\n" in oldest
    assert peer.send("CONFIG", "SET", "slowlog-max-len", "1") == b"+OK\r\n"
    assert peer.send("SLOWLOG", "LEN") == b":1\r\n"
    assert peer.send("CONFIG", "SET", "slowlog-max-len", "128") == b"+OK\r\n"
    assert peer.send("CONFIG", "SET", "slowlog-log-slower-than", "-1") == b"+OK\r\n"
    peer.send("SLOWLOG", "RESET")
    peer.send("PING")
    assert peer.send("SLOWLOG", "LEN") == b":0\r\n"


def test_latency_histogram_and_monitor_threshold() -> None:
    peer = Peer(Broker(Config()))
    peer.send("CONFIG", "RESETSTAT")
    peer.send("CLIENT", "ID")
    peer.send("CLIENT", "ID")
    reply = peer.send("LATENCY", "HISTOGRAM", "client", "nope")
    assert reply.startswith(
        b"*2\r\n$9\r\nclient|id\r\n*4\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n"
    )
    assert peer.send("LATENCY", "LATEST") == b"*0\r\n"  # (threshold 0: nothing recorded)
    assert b"disabled" in peer.send("LATENCY", "DOCTOR")
    assert peer.send("CONFIG", "SET", "latency-tracking", "no") == b"+OK\r\n"
    peer.send("CONFIG", "RESETSTAT")
    peer.send("PING")
    assert peer.send("LATENCY", "HISTOGRAM", "ping") == b"*0\r\n"
    info = peer.send("INFO", "latencystats")
    assert b"latency_percentiles_usec_ping" not in info


def test_monitor_feed() -> None:
    broker = Broker(Config())
    monitor, client = Peer(broker), Peer(broker)
    assert monitor.send("MONITOR") == b"+OK\r\n"
    client.send("AUTH", "user", "pass")
    client.send("HELLO", "2", "AUTH", "user", "pass")
    client.send("XADD", "s", "1-1", "f", 'a"b\\\n\x01é')
    client.send("CONFIG", "GET", "hz")  # (administrative: not shown)
    client.send("SELECT", "3")
    client.send("MULTI")
    client.send("XLEN", "s")
    client.send("EXEC")
    feed = bytes(monitor.conn.take_output()).decode().split("\r\n")
    shown = [line.split("] ", 1)[1] for line in feed if line]
    assert shown == [
        '"AUTH" "(redacted)" "(redacted)"',
        '"HELLO" "2" "AUTH" "(redacted)" "(redacted)"',
        '"XADD" "s" "1-1" "f" "a\\"b\\\\\\n\\x01\\xc3\\xa9"',
        '"SELECT" "3"',
        '"MULTI"',
        '"XLEN" "s"',
        '"EXEC"',
    ]
    assert feed[0].startswith("+")
    assert feed[0].split(" ")[1:3] == ["[0", "127.0.0.1:1]"]
    assert feed[3].split(" ")[1] == "[3"
    assert monitor.send("XLEN", "s") == b"-ERR Replica can't interact with the keyspace\r\n"
    assert monitor.send("RESET") == b"+RESET\r\n"
    client.send("PING")
    assert monitor.send("PING") == b"+PONG\r\n"


def test_monitor_shows_a_scripts_commands_after_it() -> None:
    broker = Broker(Config())
    monitor, client = Peer(broker), Peer(broker)
    assert monitor.send("MONITOR") == b"+OK\r\n"
    body = "redis.call('set', KEYS[1], ARGV[1]) return redis.call('get', KEYS[1])"
    assert client.send("EVAL", body, "1", "k", "v") == b"$1\r\nv\r\n"
    client.send("SELECT", "2")
    library = (
        "#!lua name=lib\nredis.register_function('f', function(k) return redis.call('get', k[1]) end)"
    )
    client.send("FUNCTION", "LOAD", library)
    client.send("FCALL", "f", "1", "k")
    client.send("EVALSHA", "0" * 40, "0")  # (shown though refused, as redis-server shows it)
    feed = [line for line in bytes(monitor.conn.take_output()).decode().split("\r\n") if line]
    shown = [line.split(" [", 1)[1] for line in feed]
    assert shown == [
        f'0 127.0.0.1:1] "EVAL" "{body}" "1" "k" "v"',
        '0 lua] "set" "k" "v"',
        '0 lua] "get" "k"',
        '2 127.0.0.1:1] "SELECT" "2"',
        '2 127.0.0.1:1] "FUNCTION" "LOAD" "' + library.replace("\n", "\\n") + '"',
        '2 127.0.0.1:1] "FCALL" "f" "1" "k"',
        '2 lua] "get" "k"',
        f'2 127.0.0.1:1] "EVALSHA" "{"0" * 40}" "0"',
    ]


async def test_monitor_shows_a_blocked_read_once(nursery: trio.Nursery) -> None:
    node = await start_node(nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)))
    port = node.redis_port or 0
    monitor = await trio.open_tcp_stream("127.0.0.1", port)
    reader = await trio.open_tcp_stream("127.0.0.1", port)
    writer = await trio.open_tcp_stream("127.0.0.1", port)
    async with monitor, reader, writer:
        await monitor.send_all(b"MONITOR\r\n")
        assert await monitor.receive_some() == b"+OK\r\n"
        await reader.send_all(b"XREAD BLOCK 0 STREAMS s $\r\n")
        feed = b""
        while b"XREAD" not in feed:
            feed += await monitor.receive_some()
        await writer.send_all(b"XADD s 1-1 f v\r\n")
        assert (await reader.receive_some()).startswith(b"*1\r\n")
        await writer.send_all(b"PING\r\n")
        while b'"PING"' not in feed:
            feed += await monitor.receive_some()
        assert feed.count(b'"XREAD"') == 1
        assert feed.index(b'"XREAD"') < feed.index(b'"XADD"') < feed.index(b'"PING"')


async def test_client_list_shows_the_real_local_address_and_descriptor(nursery: trio.Nursery) -> None:
    node = await start_node(nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)))
    stream = await trio.open_tcp_stream("127.0.0.1", node.redis_port or 0)
    async with stream:
        await stream.send_all(b"*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n")
        line = (await stream.receive_some()).decode()
    info = dict(field.split("=", 1) for field in line.split("\r\n")[1].split())
    assert info["laddr"] == f"127.0.0.1:{node.redis_port}"
    assert int(info["fd"]) > 2
    assert info["qbuf"] == "26"  # (the request running, as redis-server counts it)
    assert info["cmd"] == "client|info"


def test_client_kill_filters() -> None:
    broker = Broker(Config(users=(UserConfig(user="alice", password="pw"),), no_auth_user="alice"))
    me, subscriber, other = Peer(broker), Peer(broker), Peer(broker)
    subscriber.send("SUBSCRIBE", "c")
    assert me.send("CLIENT", "KILL", "TYPE", "nope") == b"-ERR Unknown client type 'nope'\r\n"
    assert me.send("CLIENT", "KILL", "USER", "bob") == b"-ERR No such user 'bob'\r\n"
    assert me.send("CLIENT", "KILL", "SKIPME", "maybe") == b"-ERR syntax error\r\n"
    assert me.send("CLIENT", "KILL", "TYPE", "pubsub") == b":1\r\n"
    assert subscriber.conn.closing is not None
    assert me.send("CLIENT", "KILL", "USER", "alice", "MAXAGE", "0") == b":1\r\n"
    assert other.conn.closing is not None
    assert me.conn.closing is None
    assert me.send("CLIENT", "KILL", "SKIPME", "no") == b":1\r\n"
    assert me.conn.closing is not None


def test_debug_memory_role_and_lastsave() -> None:
    broker = Broker(Config())
    peer = Peer(broker)
    assert peer.send("DEBUG", "SLEEP", "0") == b"+OK\r\n"
    assert peer.send("DEBUG", "SLEEP", "1").startswith(b"-ERR DEBUG SLEEP ")
    assert peer.send("DEBUG", "SLEEP", "x") == b"-ERR value is not an integer or out of range\r\n"
    assert peer.send("DEBUG", "NOPE") == (
        b"-ERR unknown subcommand or wrong number of arguments for 'NOPE'. Try DEBUG HELP.\r\n"
    )
    assert peer.send("DEBUG", "OBJECT", "s") == b"-ERR no such key\r\n"
    peer.send("XADD", "s", "1-1", "f", "v")
    assert peer.send("DEBUG", "OBJECT", "s").startswith(b"+Value at:0x")
    assert b"encoding:stream" in peer.send("DEBUG", "OBJECT", "s")
    usage = int(peer.send("MEMORY", "USAGE", "s")[1:-2])
    assert usage > 0
    stats = peer.send("MEMORY", "STATS")
    assert b"$10\r\nkeys.count\r\n:1\r\n" in stats
    assert peer.send("ROLE") == b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n"
    assert peer.send("LASTSAVE") == b":%d\r\n" % (broker.start_ns // 10**9)
