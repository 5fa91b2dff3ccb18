"""CONFIG GET/SET/RESETSTAT/REWRITE: the parameters that mean something on a node, compared byte
for byte with redis-server where both have them (skipped where it is not installed), all-or-nothing
CONFIG SET, hypothesis-generated argument lists answered as redis-server answers them, and what the
parameters change (stream node sizes, output limits, the keyspace-event classes)."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator

import pytest
import redis
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.broker import Broker
from node.config.keyspace_events import ALL, KEYEVENT, KEYSPACE, format_flags, parse_flags
from node.config.options import Config, RedisConfig
from tests.node.resp.test_resp_conformance import Step
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.node.resp.test_resp_connection import Peer
from tests.node.resp.test_resp_maxmemory import command, config_set, same_bytes
from tests.support import start_node

pytestmark = pytest.mark.timeout(60)

needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)


def get(name: bytes) -> bytes:
    return command(b"CONFIG", b"GET", name)


def set_and_get(name: bytes, *values: bytes) -> bytes:
    return b"".join(config_set(name, value) + get(name) for value in values)


SCENARIO: list[Step] = [
    (0, set_and_get(b"hz", b"5", b"0", b"1000", b"-1", b"x", b"", b"10")),
    (0, set_and_get(b"slowlog-log-slower-than", b"-1", b"-2", b"0", b"1.5", b"10000")),
    (0, set_and_get(b"slowlog-max-len", b"0", b"-1", b"5", b"128")),
    (0, set_and_get(b"latency-monitor-threshold", b"100", b"-1", b"abc", b"0")),
    (0, set_and_get(b"notify-keyspace-events", b"KEA", b"Kx", b"gxeKtn", b"AKEm", b"Kq", b"$E", b"")),
    (0, set_and_get(b"stream-node-max-entries", b"5", b"-1", b"abc", b"100")),
    (0, set_and_get(b"stream-node-max-bytes", b"1kb", b"x", b"-1", b"4096")),
    (0, set_and_get(b"timeout", b"300", b"-1", b"0")),
    (0, set_and_get(b"list-max-listpack-size", b"-1", b"x", b"-2147483649", b"8")),
    (0, set_and_get(b"list-max-ziplist-size", b"-2") + get(b"list-max-listpack-size")),
    (0, set_and_get(b"lua-time-limit", b"1000") + get(b"busy-reply-threshold")),
    (0, set_and_get(b"busy-reply-threshold", b"5000") + get(b"lua-time-limit")),
    (0, set_and_get(b"appendfsync", b"always", b"sometimes", b"EVERYSEC")),
    (0, set_and_get(b"appendonly", b"no", b"maybe")),
    (0, set_and_get(b"save", b"", b"1 x")),
    (0, set_and_get(b"client-output-buffer-limit", b"pubsub 1mb 2mb 3", b"foo 1 2 3", b"pubsub 1 2")),
    (0, set_and_get(b"client-output-buffer-limit", b"pubsub 33554432 8388608 60")),
    (0, config_set(b"databases", b"16") + config_set(b"daemonize", b"no") + get(b"databases")),
    (0, get(b"replicaof") + get(b"slaveof") + get(b"cluster-enabled") + get(b"latency-tracking")),
    # All or nothing: the first fault wins, and nothing is applied.
    (0, config_set(b"hz", b"7", b"timeout", b"-5") + get(b"hz") + get(b"timeout")),
    (0, config_set(b"hz", b"7", b"nope", b"1", b"databases", b"1") + get(b"hz")),
    (0, config_set(b"databases", b"1", b"nope", b"1") + config_set(b"hz", b"7", b"HZ", b"8")),
    (0, config_set(b"lua-time-limit", b"7", b"busy-reply-threshold", b"8") + get(b"lua-time-limit")),
    (0, config_set(b"lua-time-limit", b"x", b"busy-reply-threshold", b"5000")),
    (0, config_set(b"lua-time-limit", b"5000")),
    (0, config_set(b"hz", b"7", b"timeout", b"9") + get(b"hz") + get(b"timeout")),
    (0, config_set(b"hz", b"10", b"timeout", b"0") + config_set(b"hz") + config_set(b"hz", b"1", b"x")),
    (0, get(b"HZ") + get(b"nope") + get(b"hz") + command(b"CONFIG", b"GET", b"hz", b"hz")),
    (0, command(b"CONFIG", b"RESETSTAT") + command(b"CONFIG", b"REWRITE")),
    (0, command(b"CONFIG", b"RESETSTAT", b"x") + command(b"CONFIG", b"NOPE") + command(b"CONFIG")),
]


@pytest.mark.slow
@needs_redis_server
async def test_config_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    await same_bytes(nursery, redis_port, SCENARIO)


@needs_redis_server
async def test_config_get_patterns_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    node = await start_node(nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)))
    patterns = ["slowlog*", "*-max-*entries", "stream-node-*", "lua-time-limit", "hz", "latency-m*"]

    def both() -> tuple[dict[str, str], dict[str, str]]:
        theirs = redis.Redis(port=redis_port, decode_responses=True)
        ours = redis.Redis(port=node.redis_port or 0, decode_responses=True)
        wanted = {k for k in theirs.config_get("stream-node-*")} | {"hz", "lua-time-limit"}
        wanted |= {k for k in theirs.config_get("slowlog*")} | {"latency-monitor-threshold"}
        found_theirs = {k: v for k, v in theirs.execute_command("CONFIG GET", *patterns).items()}
        found_ours = ours.execute_command("CONFIG GET", *patterns)
        return {k: v for k, v in found_theirs.items() if k in wanted}, found_ours

    theirs, ours = await trio.to_thread.run_sync(both)
    assert ours == theirs


def test_notify_classes_read_and_written_back_as_redis_server_does() -> None:
    assert parse_flags(b"KEA") == ALL | KEYSPACE | KEYEVENT
    assert format_flags(ALL | KEYSPACE | KEYEVENT) == b"AKE"
    assert parse_flags(b"Kq") is None
    assert format_flags(parse_flags(b"tKxg") or 0) == b"gxtK"
    assert format_flags(parse_flags(b"") or 0) == b""
    assert format_flags(parse_flags(b"Am$n") or 0) == b"Am"


def test_config_set_changes_what_the_node_does() -> None:
    broker = Broker(Config())
    peer = Peer(broker)
    assert peer.send("CONFIG", "SET", "stream-node-max-entries", "2") == b"+OK\r\n"
    for i in range(5):
        peer.send("XADD", "s", f"{i + 1}-1", "f", "v")
    assert peer.send("XTRIM", "s", "MAXLEN", "~", "1") == b":4\r\n"  # (whole nodes of 2)
    assert peer.send("CONFIG", "SET", "notify-keyspace-events", "Ex$") == b"+OK\r\n"
    assert format_flags(broker.keyspaces.notifier.configured) == b"$xE"
    assert peer.send("CONFIG", "SET", "lua-time-limit", "250") == b"+OK\r\n"
    assert broker.scripts.busy_reply_threshold_ms == 250
    assert peer.send("CONFIG", "SET", "tracking-table-max-keys", "10") == b"+OK\r\n"
    assert broker.keyspaces.tracking_max_keys == 10
    limits = "client-output-buffer-limit"
    assert peer.send("CONFIG", "SET", limits, "pubsub 1000 500 7") == b"+OK\r\n"
    assert (peer.conn.hard_limit, peer.conn.stall_at, peer.conn.soft_seconds) == (1000, 500, 7.0)
    newcomer = Peer(broker)
    assert b"pubsub 1000 500 7" in newcomer.send("CONFIG", "GET", limits)


def test_config_rewrite_leaves_the_configuration_file_alone(tmp_path: object) -> None:
    broker = Broker(Config())
    peer = Peer(broker)
    assert peer.send("CONFIG", "REWRITE") == b"-ERR The server is running without a config file\r\n"
    broker.config_file = "/etc/pubmesh.toml"
    assert peer.send("CONFIG", "REWRITE").startswith(b"-ERR Rewriting config file: ")


def test_parameters_from_the_node_configuration_take_only_their_value() -> None:
    broker = Broker(Config(max_connections=50, redis=RedisConfig(port=7777)))
    peer = Peer(broker)
    assert peer.send("CONFIG", "SET", "maxclients", "50", "port", "7777") == b"+OK\r\n"
    assert peer.send("CONFIG", "SET", "maxclients", "51").startswith(
        b"-ERR CONFIG SET failed (possibly related to argument 'maxclients') - "
    )


# -- hypothesis: any argument list answered as redis-server answers it ---------------------------

NAMES = [
    b"hz", b"HZ", b"slowlog-log-slower-than", b"slowlog-max-len", b"latency-monitor-threshold",
    b"notify-keyspace-events", b"stream-node-max-entries", b"stream-node-max-bytes", b"timeout",
    b"lua-time-limit", b"busy-reply-threshold", b"databases", b"appendfsync", b"nope", b"",
    b"list-max-listpack-size",
]  # fmt: skip
VALUES = [
    b"0", b"1", b"-1", b"10", b"1000", b"99999999999999999999", b"abc", b"", b" 1", b"1kb", b"5mb",
    b"KEA", b"Ex", b"q", b"always", b"no", b"everysec", b"1.5", b"+3", b"0x10",
]  # fmt: skip
DEFAULTS = [
    b"hz", b"10", b"slowlog-log-slower-than", b"10000", b"slowlog-max-len", b"128",
    b"latency-monitor-threshold", b"0", b"notify-keyspace-events", b"", b"stream-node-max-entries",
    b"100", b"stream-node-max-bytes", b"4096", b"timeout", b"0", b"busy-reply-threshold", b"5000",
    b"appendfsync", b"everysec", b"list-max-listpack-size", b"-2",
]  # fmt: skip


def _exchange(sock: socket.socket, request: bytes) -> bytes:
    sock.sendall(request)
    reply = b""
    while not reply.endswith(b"\r\n") or (reply.startswith(b"*") and reply.count(b"\r\n") < 2):
        reply += sock.recv(1 << 16)
    return reply


@pytest.fixture(scope="module")
def redis_socket(redis_port: int) -> Iterator[socket.socket]:
    with socket.create_connection(("127.0.0.1", redis_port), timeout=5) as sock:
        yield sock


@needs_redis_server
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.sampled_from(NAMES), st.sampled_from(VALUES) | st.binary(max_size=6)),
        max_size=4,
    ),
    st.booleans(),
)
def test_config_set_arguments_as_redis_server(
    redis_socket: socket.socket, pairs: list[tuple[bytes, bytes]], odd: bool
) -> None:
    peer = Peer(Broker(Config()))
    reset = config_set(*DEFAULTS)
    assert _exchange(redis_socket, reset) == peer.send(*(b"CONFIG", b"SET", *DEFAULTS)) == b"+OK\r\n"
    args = [item for pair in pairs for item in pair] + ([b"hz"] if odd else [])
    request = command(b"CONFIG", b"SET", *args)
    assert peer.raw(request) == _exchange(redis_socket, request)
    for name in DEFAULTS[::2]:  # (whatever was refused changed nothing; what was taken shows)
        assert peer.raw(get(name)) == _exchange(redis_socket, get(name))
