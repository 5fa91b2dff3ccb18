"""The same requests against redis-server and a pubmesh node's Redis port: the same bytes back.

Each scenario is a list of steps on numbered connections; after every step the bytes each
connection received are compared. Skipped where redis-server is not installed. The installed
server may be 7.0, so the scenarios avoid what 7.2 changed (pushes produced while a command runs
come after its reply there, which ``test_resp_connection`` checks) and what is only an identity
(HELLO's map, client ids).
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator

import pytest
import trio

from node.config.options import Config, RedisConfig
from pipeline.local import redis_server
from tests.support import start_node

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

Step = tuple[int, bytes]

SCENARIOS: dict[str, list[Step]] = {
    "commands and their errors": [
        (0, b"PING\r\n"),
        (0, b"*2\r\n$4\r\nping\r\n$2\r\nhi\r\n"),
        (0, b"echo x\r\n"),
        (0, b"ping a b\r\n"),
        (0, b"foo a b\r\n"),
        (0, b"FOO\r\n"),
        (0, b"client foo\r\n"),
        (0, b"client\r\n"),
        (0, b"client reply\r\n"),
        (0, b"client setname a\tb\r\n"),
        (0, b"select 16\r\nselect x\r\nselect 3\r\n"),
        (0, b"hello 4\r\nhello x\r\nhello 3 auth a\r\n"),
        (0, b"auth x\r\n"),
        (0, b"dbsize\r\n"),
        (0, b"pubsub foo\r\npubsub numpat\r\npubsub channels\r\npubsub numsub a b\r\n"),
        (0, b"config get databases\r\n"),
        (0, b"unsubscribe\r\npunsubscribe\r\nsunsubscribe\r\n"),
        (0, b"subscribe\r\npublish x\r\n"),
    ],
    "subscribed mode in RESP2": [
        (0, b"subscribe c1 c2 c1\r\n"),
        (0, b"psubscribe c* h?llo\r\n"),
        (0, b"ping\r\nping hi\r\n"),
        (0, b"client id\r\n"),
        (0, b"echo x\r\n"),
        (0, b"unsubscribe nope\r\nunsubscribe c1\r\n"),
        (0, b"punsubscribe h?llo\r\n"),
        (1, b"publish c2 m1\r\n"),
        (0, b"ping\r\n"),
        (1, b"publish c9 m2\r\n"),
        (0, b"reset\r\nping\r\n"),
        (1, b"publish c2 m3\r\n"),
    ],
    "shard channels": [
        (0, b"ssubscribe s1 s2\r\n"),
        (1, b"spublish s1 hi\r\n"),
        (0, b"sunsubscribe s1\r\n"),  # (one left: listings of several come in hash order there)
        (1, b"pubsub shardchannels\r\npubsub shardnumsub s2 s3\r\n"),
        (0, b"sunsubscribe\r\nsunsubscribe\r\n"),
    ],
    "channels that are not subjects": [
        (0, b'subscribe "hello world" a..b > *\r\n'),
        (1, b'publish "hello world" 1\r\npublish a..b 2\r\npublish > 3\r\npublish * 4\r\n'),
        (1, b"pubsub numsub > * a..b\r\n"),
    ],
    "RESP3 pushes": [
        (0, b"hello 3\r\n"),
        (0, b"subscribe x\r\nping\r\necho y\r\n"),
        (1, b"publish x z\r\n"),
        (0, b"unsubscribe x\r\nunsubscribe\r\n"),
    ],
    "stream entries": [
        (0, b"flushall\r\n"),
        (0, b"xadd s 1-1 a 1 b 2\r\nxadd s 1-1 a 1\r\nxadd s 0-0 a 1\r\nxadd s 1-* c 3\r\n"),
        (0, b"xadd s 5 d 4\r\nxadd s abc x y\r\nxadd s 6-0 a\r\nxadd s NOMKSTREAM 7-0 a 1\r\n"),
        (0, b"xadd nope NOMKSTREAM 1-1 a 1\r\nxadd s MAXLEN x 8-0 a 1\r\nxadd s MAXLEN -1 8-0 a 1\r\n"),
        (0, b"xadd s LIMIT 5 8-0 a 1\r\nxadd s MAXLEN 3 LIMIT 5 8-0 a 1\r\n"),
        (0, b"xadd s MAXLEN 3 MINID 1 8-0 a 1\r\nxadd s 9-x a 1\r\nxadd s - a 1\r\n"),
        (0, b"xlen s\r\nxlen nope\r\nxrange s - +\r\nxrange s 1 1\r\nxrange s (1-1 + COUNT 2\r\n"),
        (0, b"xrange s - + COUNT 0\r\nxrange s - + COUNT -1\r\nxrange s (- +\r\nxrange s - + foo\r\n"),
        (0, b"xrange nope - +\r\nxrange s 5 1\r\nxrevrange s + - COUNT 2\r\nxrevrange s (5 -\r\n"),
        (0, b"xrange s (18446744073709551615-18446744073709551615 +\r\nxrange s - (0-0\r\n"),
        (0, b"xdel s 1-2 99-0\r\nxdel s x\r\nxdel nope x\r\nxrange s - +\r\n"),
        (0, b"xtrim s MAXLEN 2\r\nxtrim s\r\nxtrim s MINID 7\r\nxtrim nope MAXLEN 1\r\n"),
        (0, b"xtrim s MAXLEN ~ 1 LIMIT 0\r\nxadd s MAXLEN = 1 9-0 z 1\r\nxrange s - +\r\n"),
        (0, b"xsetid s 5-0\r\nxsetid s 100-0\r\nxsetid nope 1-0\r\nxadd s 50-0 a 1\r\n"),
        (0, b"type s\r\ntype nope\r\nexists s nope s\r\ndel s nope\r\nexists s\r\n"),
    ],
    "consumer groups": [
        (0, b"flushall\r\n"),
        (0, b"xgroup create s g $\r\nxgroup create s g $ MKSTREAM\r\nxgroup create s g $ MKSTREAM\r\n"),
        (0, b"xadd s 1-0 f v\r\nxadd s 2-0 f v\r\nxadd s 3-0 f v\r\n"),
        (0, b"xreadgroup GROUP g c1 COUNT 1 STREAMS s >\r\nxreadgroup GROUP g c2 STREAMS s >\r\n"),
        (0, b"xreadgroup GROUP g c1 STREAMS s 0\r\nxreadgroup GROUP g c1 STREAMS s >\r\n"),
        (0, b"xreadgroup GROUP nog c1 STREAMS s >\r\nxreadgroup STREAMS s >\r\n"),
        (0, b"xread STREAMS s >\r\nxread COUNT 1 STREAMS s 0\r\nxread STREAMS s $\r\n"),
        (0, b"xread GROUP g c STREAMS s 0\r\nxread NOACK STREAMS s 0\r\nxread COUNT 1 s 0\r\n"),
        (0, b"xread BLOCK -1 STREAMS s 0\r\nxread BLOCK x STREAMS s 0\r\n"),
        (0, b"xack s g 1-0 9-0\r\nxack s nog 1-0\r\nxack s g x\r\nxpending s g\r\n"),
        (0, b"xpending s g - + 0\r\nxpending s g - +\r\nxpending s nog\r\n"),
        (0, b"xpending s g - + 5 nobody\r\n"),
        (0, b"xclaim s g c3 0 2-0 JUSTID\r\nxclaim s g c3 0 2-0 3-0 RETRYCOUNT 5 JUSTID\r\n"),
        (0, b"xclaim s g c3 x 2-0\r\nxclaim s g c3 0 2-0 BADOPT\r\nxclaim s nog c 0 1-0\r\n"),
        (0, b"xclaim s g c3 0 3-0 IDLE x\r\nxclaim s g c3 0 9-0 FORCE JUSTID\r\n"),
        (0, b"xautoclaim s g c4 0 0 COUNT 1 JUSTID\r\nxautoclaim s g c4 0 0 COUNT 0\r\n"),
        (0, b"xdel s 3-0\r\nxautoclaim s g c4 0 0 JUSTID\r\nxpending s g\r\n"),
        (0, b"xautoclaim s g c4 x 0\r\nxautoclaim s nog c4 0 0\r\nxautoclaim s g c4 0 0 FOO\r\n"),
        (0, b"xinfo groups s\r\nxinfo groups nope\r\nxinfo consumers s nog\r\nxinfo foo s\r\n"),
        (0, b"xgroup createconsumer s g c9\r\nxgroup createconsumer s g c9\r\n"),
        (0, b"xgroup delconsumer s g c4\r\nxgroup delconsumer s g nobody\r\nxinfo groups s\r\n"),
        (0, b"xgroup setid s g 0\r\nxgroup setid s nog 0\r\nxgroup setid nope g 0\r\n"),
        (0, b"xgroup setid s g -\r\nxinfo groups s\r\nxgroup setid s g +\r\nxinfo groups s\r\n"),
        (0, b"xgroup setid s g (1\r\nxgroup create s g5 -\r\nxgroup create s g5 +\r\n"),
        (0, b"xgroup create s g2 0 ENTRIESREAD -5\r\nxgroup create s g2 0 ENTRIESREAD 1\r\n"),
        (0, b"xinfo groups s\r\nxgroup destroy s g\r\nxgroup destroy s g\r\nxgroup foo s g\r\n"),
    ],
    "keys and transactions": [
        (0, b"flushall\r\nxadd a 1-1 f v\r\nxadd b 1-1 f v\r\n"),
        (0, b"expire a 100\r\nttl a\r\nexpire a 100 NX\r\nexpire a 50 GT\r\nexpire a 200 GT\r\n"),
        (0, b"expire a 10 XX LT\r\nexpire a 10 NX XX\r\nexpire a x\r\nexpire a 10 foo\r\nttl a\r\n"),
        (0, b"ttl b\r\nttl nope\r\npersist a\r\npersist a\r\nexpire nope 10\r\n"),
        (0, b"rename a c\r\nrename nope d\r\nexists a c\r\nkeys c*\r\nrename c c\r\n"),
        (0, b"renamenx c c\r\nrenamenx c b\r\nrenamenx nope e\r\nrenamenx c e\r\nexists c e\r\n"),
        (0, b"pexpireat e 4102444800499\r\nexpiretime e\r\npexpiretime e\r\npexpiretime b\r\n"),
        (0, b"expiretime nope\r\nrenamenx e b\r\nttl b\r\nexpiretime b\r\nrename b e\r\n"),
        (0, b"xadd m 1-1 f v\r\npexpireat m 4102444800000\r\nmove m 1\r\nmove m 1\r\nexists m\r\n"),
        (0, b"select 1\r\npexpiretime m\r\nmove m 1\r\nmove m x\r\nmove m 16\r\nmove m -1\r\n"),
        (0, b"move m 4294967296\r\nmove nope 0\r\nxadd n 1-1 f v\r\nmove n 0\r\nflushdb\r\n"),
        (0, b"select 0\r\nxadd n 1-1 f v\r\nmove n 1\r\nexists n\r\nmove n 3 x\r\n"),
        (0, b"dbsize\r\nselect 1\r\ndbsize\r\nselect 0\r\nscan x\r\nscan 0 COUNT 0\r\n"),
        (0, b"multi\r\nxadd t 1-1 f v\r\nxlen t\r\nfoo\r\nexec\r\nexists t\r\n"),
        (0, b"multi\r\nxadd t 1-1 f v\r\nxlen t\r\nxadd t 1-1 f v\r\nexec\r\n"),
        (0, b"exec\r\ndiscard\r\nmulti\r\nmulti\r\ndiscard\r\n"),
        (0, b"watch t\r\n"),
        (1, b"xadd t 2-1 f v\r\n"),
        (0, b"multi\r\nxlen t\r\nexec\r\nwatch t\r\nmulti\r\nxlen t\r\nexec\r\n"),
        (0, b"multi\r\nwatch x\r\nexec\r\nflushdb\r\ndbsize\r\n"),
        (0, b"xadd b 1-1 f v\r\nexpire b -1\r\nexists b\r\npexpire b 5\r\n"),
    ],
    "transactions and subscriptions": [
        (0, b"exec x\r\nmulti\r\nexec x\r\nexec\r\n"),
        (0, b"multi\r\nping a\r\nsubscribe c1 c2\r\nping b\r\nexec\r\n"),
        (0, b"exec\r\nmulti\r\nunsubscribe c1 c2\r\n"),
        (1, b"hello 3\r\n"),
        (1, b"subscribe foo bar baz\r\n"),
        (1, b"multi\r\nping abc\r\nunsubscribe bar\r\nunsubscribe baz foo\r\nsubscribe x\r\n"),
        (1, b"ping def\r\nexec\r\n"),
    ],
    "integer arguments": [
        (0, b"flushall\r\nselect 01\r\nselect +1\r\n*2\r\n$6\r\nselect\r\n$2\r\n 1\r\n"),
        (0, b"select -0\r\nselect 1_0\r\nselect 1.0\r\nselect 9223372036854775808\r\nselect 0\r\n"),
        # (SCAN's cursors on an empty database: where a cursor leads differs between the two)
        (0, b"scan -1\r\nscan 18446744073709551616\r\nscan 18446744073709551615\r\nscan +0\r\n"),
        (0, b"scan 00\r\nscan -18446744073709551616\r\n*2\r\n$4\r\nscan\r\n$2\r\n 0\r\n"),
        (0, b"*2\r\n$4\r\nscan\r\n$0\r\n\r\n*2\r\n$4\r\nscan\r\n$3\r\n0\x00x\r\nscan 1_0\r\nscan -\r\n"),
        (0, b"xadd s 1-1 f v\r\nscan 0 COUNT +5\r\nscan 0 COUNT 05\r\nscan x\r\n"),
        (0, b"xrange s - + COUNT +1\r\nxrange s - + COUNT 01\r\nxrange s - + COUNT 1_0\r\n"),
        (0, b"xrevrange s + - COUNT -0\r\nxread COUNT +1 STREAMS s 0\r\nxread COUNT 01 STREAMS s 0\r\n"),
        (0, b"xread BLOCK +1 STREAMS s $\r\nxread BLOCK 01 STREAMS s $\r\n"),
        (0, b"xadd s MAXLEN +5 2-1 f v\r\nxadd s MAXLEN 05 2-1 f v\r\nxtrim s MAXLEN 1_0\r\n"),
        (0, b"xrange s +1 +\r\nxrange s 01 +\r\n"),
        (0, b"*4\r\n$6\r\nxrange\r\n$1\r\ns\r\n$2\r\n 1\r\n$1\r\n+\r\n"),
        (0, b"expire s +5\r\nexpire s 05\r\nexpire s 1_0\r\nexpire s -0\r\n"),
        (0, b"pexpire s 5_000\r\nttl s\r\n"),
        (0, b"hello +2\r\nhello 02\r\nclient unblock 01\r\nclient unblock +1\r\n"),
        (0, b"client kill id +1\r\nclient kill id 01\r\nclient kill id 0\r\nclient kill id -1\r\n"),
    ],
    "blocking reads": [
        (0, b"flushall\r\nxread BLOCK 0 STREAMS q $\r\n"),
        (1, b"xadd q 1-1 f v\r\n"),
        (0, b"xread BLOCK 100 STREAMS q $\r\n"),
        (0, b"xgroup create q g $\r\nxreadgroup GROUP g c BLOCK 0 STREAMS q >\r\n"),
        (1, b"xadd q 2-1 f v\r\n"),
        (0, b"xreadgroup GROUP g c BLOCK 100 STREAMS q >\r\nping\r\n"),
        (0, b"multi\r\nxread BLOCK 0 STREAMS q $\r\nexec\r\n"),
    ],
    "blocked readers served in the order they blocked": [
        # (each blocking read follows a PING sent with it, answered once the read has blocked)
        (0, b"flushall\r\nxgroup create s g1 $ mkstream\r\nxgroup create s g2 $\r\n"),
        (1, b"ping\r\nxreadgroup GROUP g1 a COUNT 1 BLOCK 0 STREAMS s >\r\n"),
        (2, b"ping\r\nxreadgroup GROUP g2 b COUNT 1 BLOCK 0 STREAMS s >\r\n"),
        (3, b"ping\r\nxread BLOCK 0 STREAMS s 1-5\r\n"),
        (4, b"ping\r\nxreadgroup GROUP g1 d COUNT 1 BLOCK 0 STREAMS s >\r\n"),
        (0, b"xadd s 1-1 f v\r\n"),  # the first reader of each group; not the XREAD from 1-5
        (1, b"ping\r\nxreadgroup GROUP g1 a COUNT 1 BLOCK 0 STREAMS s >\r\n"),  # (behind d now)
        (0, b"multi\r\nxadd s 2-1 f v\r\nxadd s 3-1 f v\r\nexec\r\n"),  # all left waiting
        (5, b"xreadgroup GROUP g1 t COUNT 1 BLOCK 100 STREAMS s >\r\n"),  # nothing new: times out
        (2, b"xreadgroup GROUP g2 b COUNT 9 BLOCK 0 STREAMS s >\r\n"),  # what g2 has not had
    ],
    "protocol errors": [
        (0, b"subscribe c\r\n"),
        (0, b"*1\r\nx\r\n"),
        (1, b"*abc\r\n"),
        (2, b"*1\r\n$x\r\n"),
    ],
}
SKIP_COMPARE = {b"hello 3\r\n"}
"""Steps whose reply is an identity (server version, client id): sent, not compared."""


def receive(conn: socket.socket, first: float) -> bytes:
    """What arrives within ``first`` seconds and then until the connection stays quiet (or closes)."""
    got = b""
    conn.settimeout(first)
    while True:
        try:
            chunk = conn.recv(1 << 16)
        except TimeoutError:
            return got
        if not chunk:
            return got
        got += chunk
        conn.settimeout(0.05)


def play(port: int, steps: list[Step]) -> Iterator[tuple[int, bytes, bytes]]:
    """Send each step and yield (connection, request, what each connection received)."""
    conns: dict[int, socket.socket] = {}
    try:
        for index, request in steps:
            for n in {index, *(i for i, _ in steps)}:
                if n not in conns:
                    conns[n] = socket.create_connection(("127.0.0.1", port), timeout=5)
            conns[index].sendall(request)
            for n in sorted(conns):
                yield n, request, receive(conns[n], 2.0 if n == index else 0.1)
    finally:
        for conn in conns.values():
            conn.close()


@pytest.fixture(scope="module")
def redis_port() -> Iterator[int]:
    with redis_server() as port:
        yield port


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_same_bytes_as_redis_server(nursery: trio.Nursery, redis_port: int, name: str) -> None:
    node = await start_node(nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)))
    steps = SCENARIOS[name]

    def both() -> tuple[list[tuple[int, bytes, bytes]], list[tuple[int, bytes, bytes]]]:
        return list(play(redis_port, steps)), list(play(node.redis_port or 0, steps))

    theirs, ours = await trio.to_thread.run_sync(both)
    for expected, got in zip(theirs, ours, strict=True):
        if expected[1] not in SKIP_COMPARE:
            assert got == expected
