"""Fuzzing the monitoring port of a live node: whatever request arrives, the answer is HTTP (an error
status at worst), every JSON document is valid UTF-8 JSON, and the node keeps serving its clients
with bounded memory. Clients with hostile names and subjects are connected throughout, so the
documents have something awkward to render.

``FUZZ_EXAMPLES`` sets how many requests to try (``make fuzz`` runs many more than CI does).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from urllib.parse import quote_from_bytes

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.live import WAIT, LiveNode, live_node, parse_http, read_all

pytestmark = [pytest.mark.slow, pytest.mark.fuzz, pytest.mark.timeout(300)]

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
MEMORY_SLACK = 64 << 20
"""How much a node may grow over a whole fuzz run (its caches warm up; nothing may accumulate)."""

JSON_PATHS = ["/varz", "/connz", "/subsz", "/routez", "/gatewayz", "/healthz"]
PATHS = [*JSON_PATHS, "/metrics", "/", "/accountz", "/varz/", "//connz", "/connz%00", "/raftz/stepdown"]
PARAMS = ["subs", "offset", "limit", "sort", "cid", "state", "auth", "test", "acc", "gw_name", "accs"]
PARAMS += ["acc_name", "detail", "user", "mqtt_client", "callback"]

HOSTILE_CLIENTS = [
    b'CONNECT {"verbose":false,"name":"\\ud800 lone","lang":"\\udfff"}\r\nSUB a.\xff.b 1\r\n',
    b'CONNECT {"verbose":false,"name":"quote\\" and \\\\ and \\u0000"}\r\nSUB \xc3\x28 q\xfe 2\r\n',
    b'CONNECT {"verbose":false,"name":"' + "ünï😀".encode() + b'"}\r\nSUB x.*.> 3\r\n',
]


@pytest.fixture(scope="module")
def node() -> Iterator[LiveNode]:
    with live_node() as node:
        clients = []
        for greeting in HOSTILE_CLIENTS:
            client = socket.create_connection(("127.0.0.1", node.port), timeout=WAIT)
            client.sendall(greeting + b"PING\r\n")
            clients.append(client)
        # One of them leaves, so closed connections are rendered too.
        clients.pop().close()
        try:
            yield node
        finally:
            for client in clients:
                client.close()


query_values = st.one_of(
    st.binary(max_size=12).map(quote_from_bytes),
    st.sampled_from(["1", "0", "-1", "999999999999999999999", "detail", "closed", "all", "a.b", "true"]),
    st.text(max_size=8).map(lambda t: quote_from_bytes(t.encode("utf-8", "surrogatepass"))),
)
queries = st.lists(st.tuples(st.sampled_from(PARAMS), query_values), max_size=4).map(
    lambda pairs: "&".join(f"{k}={v}" for k, v in pairs)
)
well_formed = st.builds(
    lambda path, query, method: (
        f"{method} {path}?{query} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    ),
    st.sampled_from(PATHS),
    queries,
    st.sampled_from(["GET", "GET", "GET", "HEAD", "POST", "DELETE", "OPTIONS"]),
)
garbage = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda raw: b"GET /varz?" + raw + b" HTTP/1.1\r\nHost: x\r\n\r\n", st.binary(max_size=40)),
    st.builds(lambda raw: b"GET /connz HTTP/1.1\r\n" + raw + b"\r\n\r\n", st.binary(max_size=80)),
)


def exchange(node: LiveNode, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", node.http_port), timeout=WAIT) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)  # a half-sent request must not leave the server waiting
        return read_all(conn)


@settings(
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    deadline=None,
)
@given(request=st.one_of(well_formed, garbage))
def test_any_request_gets_an_http_answer_and_valid_json(node: LiveNode, request: bytes) -> None:
    response = exchange(node, request)
    if response:  # (a request the HTTP layer cannot parse may just be hung up on)
        status, body = parse_http(response)
        path = request.split(b" ", 2)[1].split(b"?")[0].decode("latin-1") if b" " in request else ""
        if request.startswith(b"GET ") and path in JSON_PATHS and status == 200:
            json.loads(body.decode("utf-8"))  # strict UTF-8, then JSON
        assert status < 500 or (status == 503 and path == "/healthz"), (status, body[:200])
    node.assert_serving()


def test_the_node_survives_the_run_with_bounded_memory(node: LiveNode) -> None:
    before = node.rss()
    for path in JSON_PATHS:
        for query in ("", "?subs=1", "?subs=detail", "?state=all", "?test=a.b", "?limit=100000"):
            status, body = node.http_get(path + query)
            assert status in (200, 400), (path, query, status, body[:200])
            if status == 200:
                json.loads(body.decode("utf-8"))
    node.assert_serving()
    assert node.rss() - before < MEMORY_SLACK
