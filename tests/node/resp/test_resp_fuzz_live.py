"""Fuzzing the Redis port of a live node process: hostile requests over real sockets.

Each example opens a connection, sends generated requests (known commands with arbitrary
arguments, the words of the stream commands among them, mutated requests, random bytes) cut at
random points, half-closes and reads to the end. What must hold after every example:

- the connection got no ``internal error``: the containment boundary never had to step in;
- canaries, a NATS client and a Redis subscriber on fresh connections, are still served;
- the node's resident memory stays bounded.

``FUZZ_EXAMPLES`` sets how many examples; the ``fuzz`` marker selects or deselects these tests.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.resp.commands.table import COMMANDS
from tests.live import LiveNode, live_node, read_all

pytestmark = [pytest.mark.slow, pytest.mark.fuzz, pytest.mark.timeout(600)]

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
MiB = 1 << 20
GROWTH = 48 * MiB
"""How much the node's resident memory may grow over the whole run."""

NAMES = [name.decode() for name in COMMANDS if name != b"shutdown"]  # (a signed-in order to stop)
NAMES += ["get", "hello", "client", "pubsub", "x"]
SUBCOMMANDS = ["id", "list", "info", "reply", "channels", "numsub", "numpat", "count", "docs", "get"]
SUBCOMMANDS += ["create", "setid", "destroy", "createconsumer", "delconsumer", "stream", "groups"]
SUBCOMMANDS += ["consumers", "unblock", "set", "maxmemory", "maxmemory-policy", "noeviction"]
STREAM_WORDS = ["s", "g", "c", "0", "0-0", "1-1", "$", "+", "-", "(1", "1-*", "18446744073709551615"]
STREAM_WORDS += ["MAXLEN", "MINID", "~", "=", "LIMIT", "NOMKSTREAM", "COUNT", "BLOCK", "STREAMS"]
STREAM_WORDS += ["GROUP", "NOACK", "IDLE", "TIME", "RETRYCOUNT", "FORCE", "JUSTID", "LASTID"]
STREAM_WORDS += ["MKSTREAM", "ENTRIESREAD", "FULL", "MATCH", "TYPE", "NX", "XX", "GT", "LT", "-1"]
ARG = st.one_of(
    st.sampled_from(["3", "2", "off", "on", "skip", "*", "c*", "a.b", "hello world", "$R.41", ">"]).map(
        str.encode
    ),
    st.sampled_from(SUBCOMMANDS).map(str.encode),
    st.sampled_from(STREAM_WORDS).map(str.encode),
    st.binary(max_size=40),
)


def encode(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


REQUEST = st.builds(
    lambda name, args: encode([name.encode(), *args]),
    st.sampled_from(NAMES),
    st.lists(ARG, max_size=9),
)
MUTATED = st.builds(
    lambda request, at, junk: request[:at] + junk + request[at:],
    REQUEST,
    st.integers(0, 40),
    st.binary(min_size=1, max_size=8),
)
STREAM = st.lists(st.one_of(REQUEST, REQUEST, MUTATED, st.binary(max_size=60)), min_size=1, max_size=12)


BASELINE: dict[str, int] = {}
"""The node's resident memory before the first example."""


@pytest.fixture(scope="module")
def node() -> Iterator[LiveNode]:
    with live_node(redis=True) as running:
        BASELINE["rss"] = running.rss()
        yield running


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(requests=STREAM, cut=st.integers(1, 64))
def test_hostile_requests_touch_only_their_connection(
    node: LiveNode, requests: list[bytes], cut: int
) -> None:
    data = b"".join(requests)
    assert node.redis_port is not None
    with socket.create_connection(("127.0.0.1", node.redis_port), timeout=10) as conn:
        for at in range(0, len(data), cut):
            try:
                conn.sendall(data[at : at + cut])
            except OSError:
                break  # the node closed it (a protocol error): fine
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)
        got = read_all(conn)
    assert b"internal error" not in got


def test_canaries_and_memory_after_fuzzing(node: LiveNode) -> None:
    """Runs after the examples (file order): what the fuzzing left behind."""
    node.assert_serving()
    node.assert_redis_serving()
    assert node.rss() - BASELINE["rss"] < GROWTH
