"""Fuzzing the system account's requests on a live node process: random bodies over real sockets.

A user of ``$SYS`` sends each generated body (random bytes, JSON of every shape, objects with the
endpoints' own option names and values of any type) to a random endpoint, then an IDZ request as a
sentinel: answers come in order, so whatever the fuzzed request got arrives before the sentinel's.
What must hold after every example:

- the request got at most one answer, in nats-server's envelope, and a body that is not JSON got
  the 400 error envelope;
- canaries on fresh connections are served, and the node's memory stays bounded.

``FUZZ_EXAMPLES`` sets how many examples; the ``fuzz`` marker selects or deselects these tests.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.monitoring.system import ENDPOINTS
from tests.live import LiveNode, live_node

pytestmark = [pytest.mark.slow, pytest.mark.fuzz, pytest.mark.timeout(600)]

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
MiB = 1 << 20
GROWTH = 32 * MiB
CONFIG = """
no_auth_user = "canary"

[accounts."$SYS"]
users = [{ user = "sys", password = "pw" }]

[accounts.A]
users = [{ user = "canary", password = "pw" }]
"""
"""(The canaries that check the node is serving sign in as the no_auth_user.)"""

NAMES = ["limit", "offset", "sort", "state", "cid", "auth", "subscriptions", "subscriptions_detail"]
NAMES += ["acc", "user", "account", "test", "name", "accounts", "account_name", "details"]
NAMES += ["server_name", "cluster", "host", "exact_match", "tags", "domain", "LIMIT", "Sort"]
SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["cid", "rtt", "subs", "idle", "n1", "$G", "$SYS", "foo.*", ">"]),
)
JSON = st.recursive(
    SCALAR,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
BODY = st.one_of(
    st.binary(max_size=200),
    JSON.map(lambda value: json.dumps(value).encode()),
    st.dictionaries(st.sampled_from(NAMES), JSON, max_size=5).map(lambda d: json.dumps(d).encode()),
    st.builds(lambda depth: b"[" * depth, st.integers(1, 5000)),
)
SUBJECT = st.sampled_from(["$SYS.REQ.SERVER.PING", *(f"$SYS.REQ.SERVER.PING.{e}" for e in ENDPOINTS)])

BASELINE: dict[str, Any] = {}


class SysClient:
    """A raw NATS connection signed in to ``$SYS``: fuzzed answers on sid 1, sentinels on sid 2."""

    def __init__(self, port: int) -> None:
        self.conn = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buffer = b""
        self._line()  # INFO
        self.conn.sendall(
            b'CONNECT {"user":"sys","pass":"pw","verbose":false,"pedantic":false}\r\n'
            b"SUB fuzz.answer 1\r\nSUB fuzz.sentinel 2\r\nPING\r\n"
        )
        assert self._line() == b"PONG"

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            chunk = self.conn.recv(1 << 16)
            assert chunk, "the node closed the connection"
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line

    def _payload(self, size: int) -> bytes:
        while len(self.buffer) < size + 2:
            chunk = self.conn.recv(1 << 16)
            assert chunk, "the node closed the connection"
            self.buffer += chunk
        payload, self.buffer = self.buffer[:size], self.buffer[size + 2 :]
        return payload

    def ask(self, subject: str, body: bytes) -> list[bytes]:
        """The answers to one request, gathered until the sentinel's."""
        self.conn.sendall(
            b"PUB %s fuzz.answer %d\r\n%s\r\n" % (subject.encode(), len(body), body)
            + b"PUB $SYS.REQ.SERVER.PING.IDZ fuzz.sentinel 0\r\n\r\n"
        )
        answers: list[bytes] = []
        while True:
            line = self._line()
            if line == b"PING":
                self.conn.sendall(b"PONG\r\n")
                continue
            verb, _, sid, size = line.split(b" ")
            assert verb == b"MSG", line
            payload = self._payload(int(size))
            if sid == b"2":
                return answers
            answers.append(payload)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveNode]:
    config = Path(tmp_path_factory.mktemp("sys")) / "node.toml"
    config.write_text(CONFIG)
    with live_node("-c", str(config)) as running:
        BASELINE["rss"] = running.rss()
        BASELINE["client"] = SysClient(running.port)
        yield running
        BASELINE["client"].conn.close()


def is_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return False
    return True


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(subject=SUBJECT, body=BODY)
def test_any_body_gets_an_envelope_or_silence(node: LiveNode, subject: str, body: bytes) -> None:
    client: SysClient = BASELINE["client"]
    answers = client.ask(subject, body)
    assert len(answers) <= 1
    if not is_json(body) or len(body) > 16 * 1024:
        assert len(answers) == 1
    for answer in answers:
        doc = json.loads(answer)
        if subject.endswith(".IDZ"):
            assert list(doc) == ["name", "host", "id"]
            continue
        assert list(doc)[:1] == ["server"]
        assert len(doc) == 2
        if "error" in doc:
            assert doc["error"]["code"] in (400, 500)
            assert doc["error"]["code"] == 400 or is_json(body)
        else:
            assert list(doc)[1] == ("statsz" if subject.endswith(("PING", "STATSZ")) else "data")


def test_canaries_and_memory_after_fuzzing(node: LiveNode) -> None:
    """Runs after the examples (file order): what the fuzzing left behind."""
    node.assert_serving()
    assert node.http_get("/healthz")[0] == 200
    assert node.rss() - BASELINE["rss"] < GROWTH
