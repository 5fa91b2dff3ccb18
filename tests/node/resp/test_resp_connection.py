"""The Redis connection's protocol logic, byte for byte, without sockets: requests in, bytes out."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node.broker import Broker
from node.config.options import Config, Permissions, RedisConfig, SubjectRule, UserConfig
from node.nats.client import ClientConnection
from node.resp.commands.table import COMMANDS
from node.resp.connection import RespConnection
from routing import channel_subject, subject_channel
from routing.glob import MAX_PATTERN


def command(*args: bytes | str) -> bytes:
    parts = [a.encode() if isinstance(a, str) else a for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%b\r\n" % (len(p), p) for p in parts)


class Peer:
    """One Redis connection to a broker, read and written as bytes."""

    def __init__(self, broker: Broker, **options: Any) -> None:
        self.conn = RespConnection(
            broker, broker.next_cid(), COMMANDS, host="127.0.0.1", port=1, **options
        )
        broker.add_client(self.conn)

    def send(self, *args: bytes | str) -> bytes:
        self.conn.receive_data(command(*args))
        return bytes(self.conn.take_output())

    def raw(self, data: bytes) -> bytes:
        self.conn.receive_data(data)
        return bytes(self.conn.take_output())


@pytest.fixture
def broker() -> Broker:
    return Broker(Config())


def test_channels_that_are_subjects_stay_subjects() -> None:
    assert channel_subject(b"orders.eu") == b"orders.eu"
    for channel in [b"hello world", b"", b"a..b", b"orders.*", b">", b"$R.x", b"\xff\xfe", b"a\tb"]:
        subject = channel_subject(channel)
        assert subject.startswith(b"$R.")
        assert b" " not in subject
        assert subject_channel(subject) == channel


@given(st.binary(max_size=64))
def test_channel_mapping_round_trips(channel: bytes) -> None:
    assert subject_channel(channel_subject(channel)) == channel


def test_ping_echo_and_errors_as_redis_words_them(broker: Broker) -> None:
    peer = Peer(broker)
    assert peer.send("PING") == b"+PONG\r\n"
    assert peer.send("ping", "hi") == b"$2\r\nhi\r\n"
    assert peer.send("ECHO", "x") == b"$1\r\nx\r\n"
    assert peer.send("ping", "a", "b") == b"-ERR wrong number of arguments for 'ping' command\r\n"
    assert (
        peer.send("foo", "a", "b")
        == b"-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n"
    )
    assert peer.send("client", "foo") == b"-ERR unknown subcommand 'foo'. Try CLIENT HELP.\r\n"
    assert peer.send("client") == b"-ERR wrong number of arguments for 'client' command\r\n"
    assert (
        peer.send("client", "reply") == b"-ERR wrong number of arguments for 'client|reply' command\r\n"
    )
    assert peer.send("select", "16") == b"-ERR DB index is out of range\r\n"
    assert peer.send("select", "x") == b"-ERR value is not an integer or out of range\r\n"
    assert peer.send("select", "3") == b"+OK\r\n"
    assert peer.send("hello", "4") == b"-NOPROTO unsupported protocol version\r\n"
    assert peer.raw(b"PING\r\n") == b"+PONG\r\n"  # inline


def test_subscribe_publish_and_counts(broker: Broker) -> None:
    sub, pub = Peer(broker), Peer(broker)
    got = sub.send("SUBSCRIBE", "c1", "c2", "c1")
    assert got == (
        b"*3\r\n$9\r\nsubscribe\r\n$2\r\nc1\r\n:1\r\n"
        b"*3\r\n$9\r\nsubscribe\r\n$2\r\nc2\r\n:2\r\n"
        b"*3\r\n$9\r\nsubscribe\r\n$2\r\nc1\r\n:2\r\n"
    )
    assert sub.send("PSUBSCRIBE", "c*") == b"*3\r\n$10\r\npsubscribe\r\n$2\r\nc*\r\n:3\r\n"
    assert pub.send("PUBLISH", "c1", "hello") == b":2\r\n"
    assert bytes(sub.conn.take_output()) == (
        b"*3\r\n$7\r\nmessage\r\n$2\r\nc1\r\n$5\r\nhello\r\n"
        b"*4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nc1\r\n$5\r\nhello\r\n"
    )
    assert pub.send("PUBLISH", "nope", "x") == b":0\r\n"
    assert sub.send("UNSUBSCRIBE", "nope") == b"*3\r\n$11\r\nunsubscribe\r\n$4\r\nnope\r\n:3\r\n"
    sub.send("UNSUBSCRIBE")
    assert sub.send("PUNSUBSCRIBE") == b"*3\r\n$12\r\npunsubscribe\r\n$2\r\nc*\r\n:0\r\n"
    assert sub.send("PUNSUBSCRIBE") == b"*3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n"
    assert sub.send("PING") == b"+PONG\r\n"
    assert len(broker.account("$G").sublist) == 0


def test_resp2_subscribed_mode_rules(broker: Broker) -> None:
    peer = Peer(broker)
    peer.send("SUBSCRIBE", "c")
    assert peer.send("PING") == b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    assert peer.send("PING", "hi") == b"*2\r\n$4\r\npong\r\n$2\r\nhi\r\n"
    assert peer.send("client", "id") == (
        b"-ERR Can't execute 'client|id': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET "
        b"are allowed in this context\r\n"
    )
    assert peer.send("RESET") == b"+RESET\r\n"
    assert peer.send("PING") == b"+PONG\r\n"
    assert not broker.account("$G").sublist.match("c").plain


def test_resp3_pushes_and_publishing_to_oneself(broker: Broker) -> None:
    peer = Peer(broker)
    assert peer.send("HELLO", "3").startswith(b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n")
    assert peer.send("SUBSCRIBE", "me") == b">3\r\n$9\r\nsubscribe\r\n$2\r\nme\r\n:1\r\n"
    assert peer.send("PING") == b"+PONG\r\n"
    # 7.2 ordering: the reply first, then the push the command produced.
    assert peer.send("PUBLISH", "me", "x") == b":1\r\n>3\r\n$7\r\nmessage\r\n$2\r\nme\r\n$1\r\nx\r\n"


def test_client_reply_off_still_delivers_pushes(broker: Broker) -> None:
    peer = Peer(broker)
    peer.send("HELLO", "3")
    assert peer.send("CLIENT", "REPLY", "OFF") == b""
    assert peer.send("SUBSCRIBE", "c") == b">3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"
    assert peer.send("PUBLISH", "c", "m") == b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n"
    assert peer.send("CLIENT", "REPLY", "ON") == b"+OK\r\n"
    assert peer.send("CLIENT", "REPLY", "SKIP") == b""
    assert peer.send("ECHO", "skipped") == b""
    assert peer.send("ECHO", "seen") == b"$4\r\nseen\r\n"


def test_shard_channels_share_the_namespace(broker: Broker) -> None:
    sub, pub = Peer(broker), Peer(broker)
    assert sub.send("SSUBSCRIBE", "s") == b"*3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n"
    assert pub.send("SPUBLISH", "s", "a") == b":1\r\n"
    assert sub.conn.take_output() == b"*3\r\n$8\r\nsmessage\r\n$1\r\ns\r\n$1\r\na\r\n"
    assert pub.send("PUBSUB", "SHARDCHANNELS") == b"*1\r\n$1\r\ns\r\n"
    assert pub.send("PUBSUB", "CHANNELS") == b"*0\r\n"
    assert sub.send("SUNSUBSCRIBE") == b"*3\r\n$12\r\nsunsubscribe\r\n$1\r\ns\r\n:0\r\n"


def test_pubsub_introspection(broker: Broker) -> None:
    a, b, c = Peer(broker), Peer(broker), Peer(broker)
    a.send("SUBSCRIBE", "n1", "hello world")
    b.send("SUBSCRIBE", "n1")
    a.send("PSUBSCRIBE", "n*")
    b.send("PSUBSCRIBE", "n*")
    assert c.send("PUBSUB", "NUMSUB", "n1", "nope") == b"*4\r\n$2\r\nn1\r\n:2\r\n$4\r\nnope\r\n:0\r\n"
    assert c.send("PUBSUB", "NUMPAT") == b":1\r\n"
    assert sorted(c.send("PUBSUB", "CHANNELS").split(b"\r\n")[2::2]) == [b"hello world", b"n1"]
    assert c.send("PUBSUB", "CHANNELS", "h*") == b"*1\r\n$11\r\nhello world\r\n"
    assert c.send("PUBSUB", "FOO") == b"-ERR unknown subcommand 'FOO'. Try PUBSUB HELP.\r\n"


def test_nats_and_redis_meet_on_subjects(broker: Broker) -> None:
    nats = ClientConnection(broker, broker.next_cid())
    broker.add_client(nats)
    nats.receive_data(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB orders.* 1\r\n')
    redis = Peer(broker)
    redis.send("PSUBSCRIBE", "ord*")
    redis.send("SUBSCRIBE", "orders.eu")
    nats.take_output()
    assert Peer(broker).send("PUBLISH", "orders.eu", "x") == b":3\r\n"  # NATS, channel, pattern
    assert nats.take_output().endswith(b"MSG orders.eu 1 1\r\nx\r\n")
    redis.conn.take_output()
    nats.receive_data(b"PUB orders.eu reply.to 2\r\nhi\r\n")
    assert redis.conn.take_output() == (
        b"*3\r\n$7\r\nmessage\r\n$9\r\norders.eu\r\n$2\r\nhi\r\n"
        b"*4\r\n$8\r\npmessage\r\n$4\r\nord*\r\n$9\r\norders.eu\r\n$2\r\nhi\r\n"
    )


def test_nats_clients_cannot_name_reserved_subjects(broker: Broker) -> None:
    nats = ClientConnection(broker, broker.next_cid())
    nats.receive_data(b'CONNECT {"verbose":false}\r\nSUB $R.41 1\r\nPUB $R.41 1\r\nx\r\n')
    out = bytes(nats.take_output())
    assert b'Permissions Violation for Subscription to "$R.41"' in out
    assert b'Permissions Violation for Publish to "$R.41"' in out
    assert not broker.account("$G").sublist.match("$R.41").plain


def test_patterns_are_capped(broker: Broker) -> None:
    peer = Peer(broker)
    got = peer.send("PSUBSCRIBE", b"a" * (MAX_PATTERN + 1))
    assert got == b"-ERR pattern is longer than 1024 bytes\r\n"
    assert not peer.conn.subscribed


def test_auth_and_permissions() -> None:
    rules = Permissions(
        publish=SubjectRule(allow=("orders.>",)), subscribe=SubjectRule(deny=("secret",))
    )
    users = (
        UserConfig(user="alice", password="pw", account="A", permissions=rules),
        UserConfig(token="tok"),
        UserConfig(user="default", password="dpw"),
    )
    broker = Broker(Config(users=users, accounts=()))
    peer = Peer(broker)
    assert peer.send("PING") == b"-NOAUTH Authentication required.\r\n"
    assert peer.send("HELLO", "3").startswith(b"-NOAUTH HELLO must be called")
    assert peer.send("AUTH", "alice", "no") == (
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    )
    assert peer.send("AUTH", "alice", "pw") == b"+OK\r\n"
    assert peer.conn.account.name == "A"
    assert peer.send("PUBLISH", "orders.eu", "x") == b":0\r\n"
    assert (
        peer.send("PUBLISH", "other", "x") == b"-NOPERM No permissions to access the 'other' channel\r\n"
    )
    assert peer.send("SUBSCRIBE", "ok", "secret") == (
        b"-NOPERM No permissions to access the 'secret' channel\r\n"
    )
    assert not peer.conn.subscribed
    assert peer.send("PSUBSCRIBE", "*").startswith(b"-NOPERM")
    token, default = Peer(broker), Peer(broker)
    assert token.send("AUTH", "tok") == b"+OK\r\n"
    assert default.send("HELLO", "2", "AUTH", "default", "dpw", "SETNAME", "me").startswith(b"*14\r\n")
    assert default.send("CLIENT", "GETNAME") == b"$2\r\nme\r\n"
    assert default.send("RESET") == b"+RESET\r\n"
    assert default.send("PING") == b"-NOAUTH Authentication required.\r\n"


def test_auth_without_users_configured(broker: Broker) -> None:
    peer = Peer(broker)
    assert peer.send("AUTH", "x").startswith(b"-ERR AUTH <password> called without any password")
    assert peer.send("AUTH", "any", "x") == b"+OK\r\n"


def test_protocol_error_closes_with_redis_words(broker: Broker) -> None:
    peer = Peer(broker)
    peer.send("SUBSCRIBE", "c")
    assert peer.raw(b"*1\r\nx\r\n") == b"-ERR Protocol error: expected '$', got 'x'\r\n"
    assert peer.conn.closing is not None
    assert not broker.account("$G").sublist.match("c").plain
    assert peer.conn.cid not in broker.clients


def test_slow_subscriber_is_cut_off_alone() -> None:
    broker = Broker(Config())
    now = [0.0]
    limits = RedisConfig(hard_limit=10_000, soft_limit=1_000, soft_seconds=5)
    slow = Peer(broker, limits=limits, clock=lambda: now[0])
    hard = Peer(broker, limits=limits, clock=lambda: now[0])
    pub = Peer(broker)
    slow.send("SUBSCRIBE", "c")
    hard.send("SUBSCRIBE", "big")
    pub.send("PUBLISH", "c", "x" * 2000)  # above the soft limit, below the hard one
    slow.conn.limits_due()
    now[0] = 4.0
    slow.conn.limits_due()
    assert slow.conn.cid in broker.clients
    pub.send("PUBLISH", "big", "x" * 20_000)
    assert hard.conn.closing == "Slow Consumer (Pending Bytes)"
    now[0] = 5.5
    slow.conn.limits_due()
    assert slow.conn.cid not in broker.clients
    assert slow.conn.closing == "Slow Consumer (Pending Bytes)"
    assert broker.slow_consumers == 2
    assert pub.send("PING") == b"+PONG\r\n"


def test_output_waiting_behind_an_uncommitted_reply_counts_toward_the_limits() -> None:
    """A reply that waits for its commit (replicated keys) holds back what follows it, messages
    included: those bytes count toward the output limits, so a subscriber cannot pile them up."""
    broker = Broker(Config())
    now = [0.0]
    limits = RedisConfig(hard_limit=10_000, soft_limit=1_000, soft_seconds=5)
    hard, soft = (Peer(broker, limits=limits, clock=lambda: now[0]) for _ in range(2))
    pub = Peer(broker)

    async def never(reply: bytes) -> bytes:  # (a commit that has not come)
        raise AssertionError("not awaited here")

    for peer in (hard, soft):
        peer.send("HELLO", "3")
        peer.send("SUBSCRIBE", "c")
        peer.conn.reply_later(never, b"+OK\r\n")
    pub.send("PUBLISH", "c", "x" * 2000)  # (above the soft limit: a clock starts)
    assert soft.conn.in_order.held_bytes > 2000
    now[0] = 5.5
    soft.conn.limits_due()
    assert soft.conn.closing == "Slow Consumer (Pending Bytes)"
    for _ in range(5):
        pub.send("PUBLISH", "c", "x" * 2000)
    assert hard.conn.closing == "Slow Consumer (Pending Bytes)"


def test_introspection_commands_answer(broker: Broker) -> None:
    peer = Peer(broker)
    assert peer.send("CLIENT", "ID") == b":%d\r\n" % peer.conn.cid
    assert peer.send("CLIENT", "SETNAME", "a b") == (
        b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    )
    assert peer.send("CLIENT", "SETINFO", "LIB-NAME", "redis-py") == b"+OK\r\n"
    assert b"lib-name=redis-py" in peer.send("CLIENT", "INFO")
    assert peer.send("DBSIZE") == b":0\r\n"
    assert peer.send("TIME").startswith(b"*2\r\n")
    assert b"redis_version:" in peer.send("INFO", "server")
    assert peer.send("CONFIG", "GET", "databases") == b"*2\r\n$9\r\ndatabases\r\n$2\r\n16\r\n"
    assert peer.send("CONFIG", "GET", "nope") == b"*0\r\n"
    assert peer.send("COMMAND", "DOCS", "nope") == b"*0\r\n"
    assert peer.send("COMMAND", "COUNT").startswith(b":")
    other = Peer(broker)
    assert peer.send("CLIENT", "KILL", "ID", str(other.conn.cid)) == b":1\r\n"
    assert other.conn.closing is not None
    assert peer.send("QUIT") == b"+OK\r\n"
    assert peer.conn.closing == "Client Closed"


def test_a_batch_of_requests_leaves_no_key_to_count(broker: Broker) -> None:
    """The memory of the keys a batch of requests wrote is counted before the connection reads on,
    not left to the node's periodic count (where writes to many keys made a pause)."""
    keyspaces = broker.keyspaces
    peer = Peer(broker)
    batch = b"".join(command("XADD", f"k{i}", "*", "f", "v") for i in range(50))
    replies = peer.raw(batch + command("SET", "s", "x" * 100))
    assert replies.count(b"$15\r\n") == 50
    assert replies.endswith(b"+OK\r\n")
    assert not keyspaces.unsettled
    counted = keyspaces.dataset_bytes
    assert peer.send("DEL", "s", "k0") == b":2\r\n"
    assert not keyspaces.unsettled
    assert keyspaces.dataset_bytes < counted - 100
