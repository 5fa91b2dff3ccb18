"""Monitoring under hostile or heavy use: documents that stay valid JSON whatever bytes clients sent,
failures that are logged and answered without taking the endpoint down, and large documents that
never hold up the node's connections.

Nodes are real (``make_node`` from ``test_monitor``: a Server and the monitoring server on
127.0.0.1, free ports), driven by raw NATS clients over TCP.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import time
from collections.abc import Iterator
from typing import Any

import hypothesis.strategies as st
import pytest
import trio
import trio.lowlevel
from hypothesis import given, settings

from node.config.options import Config
from node.monitoring import gojson
from node.monitoring.pacing import Pacer, paced_sorted
from node.nats.protocol import Pong
from node.nats.protocol import writer as w
from tests.node.monitoring.test_monitor import Node, NodeFactory, RawClient, make_node, node

__all__ = ["make_node", "node"]  # fixtures, used by name

pytestmark = pytest.mark.timeout(60)


def _strings(doc: Any) -> Iterator[str]:
    """Every key and string value of a parsed JSON document."""
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for key, value in doc.items():
            yield key
            yield from _strings(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _strings(value)


def _valid_json(body: bytes) -> Any:
    """The document, after checking it is what any JSON reader accepts: UTF-8, and no string in it
    holding half of a surrogate pair (which Python's reader lets through and others refuse)."""
    doc = json.loads(body.decode("utf-8"))
    for text in _strings(doc):
        text.encode("utf-8")  # raises on a lone surrogate
    return doc


async def _get(node: Node, path: str) -> tuple[int, dict[str, str], bytes]:
    """One GET over a trio stream (no worker thread, so the loop's own steps are all there is)."""
    stream = await trio.open_tcp_stream("127.0.0.1", node.http_port)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = bytearray()
        while chunk := await stream.receive_some(1 << 16):
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    assert int(headers["content-length"]) == len(body)
    return int(status_line.split()[1]), headers, body


async def _document(node: Node, path: str) -> Any:
    status, headers, body = await _get(node, path)
    assert status == 200, body
    assert headers["content-type"] == "application/json"
    return _valid_json(body)


async def _settle(client: RawClient) -> None:
    """PING, then read until the PONG or the end of the stream: the server has acted on everything
    sent before, whether it took it, answered -ERR, or closed the connection."""
    await client.send(w.PING)
    while True:
        while client.events:
            if isinstance(client.events.popleft(), Pong):
                return
        try:
            data = await client.stream.receive_some(1 << 16)
        except trio.BrokenResourceError:
            return
        if not data:
            return
        client.parser.receive_data(data)
        client.events.extend(client.parser.events())


# -- every string has a form ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "written"),
    [
        (b"a.\xff", '"a.\\ufffd"'),
        # An encoded surrogate half and a truncated sequence: Go's decoder rejects each byte alone.
        (b"x\xed\xa0\x80y", '"x\\ufffd\\ufffd\\ufffdy"'),
        (b"\xe2\x82", '"\\ufffd\\ufffd"'),
        ("µs <&> \u2028".encode(), '"µs \\u003c\\u0026\\u003e \\u2028"'),
    ],
)
def test_text_from_any_bytes_is_written_as_go_writes_those_bytes(raw: bytes, written: str) -> None:
    assert gojson.dumps(raw.decode("utf-8", "surrogateescape")) == written


_HALVES = st.integers(0xD800, 0xDFFF).map(chr)
"""Surrogates, which text decoded with ``surrogateescape`` or read from a ``\\ud800`` escape holds."""
_AWKWARD = st.sampled_from('<>&"\\\x00\x1f\x7f\u2028\u2029µ')


@given(st.text(st.characters(exclude_categories=()) | _HALVES | _AWKWARD))
def test_every_string_encodes_to_json_that_reads_back(text: str) -> None:
    """Lone surrogates (from a client's ``\\ud800`` escape or bytes that were not UTF-8) become
    U+FFFD; everything else comes back as it was."""
    written = gojson.dumps({text: [text]})
    expected = "".join("\ufffd" if 0xD800 <= ord(c) < 0xE000 else c for c in text)
    assert _valid_json(written.encode()) == {expected: [expected]}


async def test_documents_stay_valid_json_whatever_clients_sent(node: Node) -> None:
    """A client name that is half a surrogate pair and subjects that are not UTF-8 never break a
    document, while the connection is open or after it closed; the node may also refuse them at
    the door, and either way every endpoint answers."""
    hostile = await node.client(name="\ud800", lang="\udcff", version="1.0")
    await hostile.send(
        w.sub(b"a.\xff", b"1") + w.sub(b"b.\xed\xa0\x80", b"\xfe2", b"q\xfe") + w.sub(b"c.ok", b"3")
    )
    await _settle(hostile)
    paths = ["/varz", "/connz?subs=1", "/connz?subs=detail&auth=1", "/subsz?subs=1", "/metrics"]
    for path in paths:
        status, _, body = await _get(node, path)
        assert status == 200, (path, body)
        if path != "/metrics":
            _valid_json(body)
        body.decode("utf-8")
    connz = await _document(node, "/connz?subs=detail")
    for conn in connz["connections"]:
        assert conn.get("name", "\ufffd") == "\ufffd"
    await hostile.close()
    closed = await _document(node, "/connz?state=closed&subs=1")
    assert [c["cid"] for c in closed["connections"]] == [hostile.cid]
    assert closed["connections"][0].get("name", "\ufffd") == "\ufffd"
    await _document(node, "/connz?state=all&sort=idle")


async def test_a_failure_building_a_document_is_logged_and_answered_with_500(
    make_node: NodeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """An infinite auth timeout has no JSON form (nor has it in Go): /varz fails, says so in JSON
    and in the log, every time, and every other endpoint keeps answering."""
    node = await make_node(Config(auth_timeout=math.inf))
    with caplog.at_level(logging.ERROR, logger="pubmesh"):
        for _ in range(2):
            status, headers, body = await _get(node, "/varz")
            assert status == 500
            assert headers["content-type"] == "application/json"
            assert _valid_json(body) == {
                "status": "error",
                "status_code": 500,
                "error": "internal error answering /varz",
            }
    logged = [r for r in caplog.records if r.name == "pubmesh"]
    assert [r.getMessage() for r in logged] == ["monitoring: could not answer /varz"] * 2
    assert all(r.exc_info is not None for r in logged)
    status, _, body = await _get(node, "/metrics")  # Prometheus has a word for infinity
    assert (status, b"gnatsd_varz_auth_timeout{" in body) == (200, True)
    client = await node.client()
    await client.send(w.sub(b"still.here", b"1"))
    await client.flush()
    subsz = await _document(node, "/subsz?subs=1")
    assert [s["subject"] for s in subsz["subscriptions_list"]] == ["still.here"]
    assert (await _document(node, "/connz"))["total"] == 1
    assert (await _get(node, "/healthz"))[0] == 200


# -- large documents, a slice at a time -----------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=60),
    run=st.integers(1, 8),
    count=st.none() | st.integers(0, 70),
)
def test_sorting_in_runs_gives_what_sorted_gives(
    items: list[tuple[int, int]], run: int, count: int | None
) -> None:
    """Runs merged lazily give ``sorted``'s order (ties kept as they came) and stop at ``count``,
    with the loop given back between items (a step of 0 yields at every one)."""

    async def main() -> list[tuple[int, int]]:
        return await paced_sorted(items, lambda item: item[0], Pacer(step=0), count)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("node.monitoring.pacing._RUN", run)
        assert trio.run(main) == sorted(items, key=lambda item: item[0])[:count]


async def test_subsz_pages_through_many_subscriptions_in_order(node: Node) -> None:
    """More subscriptions than one sorting run, from several clients, listed page by page in
    nats-server's order: account, connection, then sid by value."""
    clients = [await node.client() for _ in range(3)]
    for client in clients:
        await client.send(b"".join(w.sub(b"s.%d" % i, b"%d" % i) for i in range(1500, 0, -1)))
        await client.flush()
    pages = [await _document(node, f"/subsz?subs=1&offset={o}&limit=1000") for o in range(0, 5000, 1000)]
    assert [(p["total"], p["offset"], p["limit"]) for p in pages] == [
        (4500, o, 1000) for o in range(0, 5000, 1000)
    ]
    listed = [(s["cid"], s["sid"]) for p in pages for s in p.get("subscriptions_list", [])]
    assert listed == [(c.cid, str(i)) for c in clients for i in range(1, 1501)]
    default = await _document(node, "/subsz?subs=1")
    assert (default["limit"], len(default["subscriptions_list"])) == (1024, 1024)


class _LongestStep(trio.abc.Instrument):
    """The longest task step (of any task) while ``on``: how long the loop went without turning.

    Measured in CPU time of the loop's thread: that is the work done in one go, the stall a task
    causes; the wall time of a step also holds whatever time the system gave other processes, which
    on a machine busy with other work is unrelated to the code under test."""

    def __init__(self) -> None:
        self.on = False
        self.longest = 0.0
        self._began: float | None = None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.on and self._began is not None:
            self.longest = max(self.longest, time.thread_time() - self._began)


SUBSCRIPTIONS = 100_000
LONGEST_STEP = 0.05
"""Seconds: many times the ``Pacer`` slice, so that a slow machine does not fail the test, yet far
below the second a 100k listing takes in one step."""


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_huge_listing_never_holds_up_the_loop(node: Node) -> None:
    """/subsz listing 100k subscriptions while a client does PING/PONG round trips: no step of the
    loop comes near the time the whole document takes (built in one go, it is one step of about a
    second). A trio instrument measures the steps; the client's round trips only show that it was
    served throughout (some happen while a document built in one go is being sent), and no wall-clock
    time of the client's is asserted, as that varies on a shared machine."""
    subscriber = await node.client()
    batch = 10_000
    for start in range(0, SUBSCRIPTIONS, batch):
        await subscriber.send(
            b"".join(w.sub(b"load.%d.x" % i, b"%d" % i) for i in range(start, start + batch))
        )
    await subscriber.flush()
    pinger = await node.client()
    # Settle the garbage collector's debt from creating 100k subscriptions, which a full collection
    # would otherwise pay in whatever step allocates next; one the listing itself set off would
    # still show.
    gc.collect()
    steps = _LongestStep()
    trio.lowlevel.add_instrument(steps)
    round_trips = 0
    document: Any = None

    async def listing() -> None:
        nonlocal document
        document = await _document(node, f"/subsz?subs=1&limit={SUBSCRIPTIONS}")
        steps.on = False

    try:
        async with trio.open_nursery() as nursery:
            steps.on = True
            nursery.start_soon(listing)
            while document is None:
                await pinger.flush()
                round_trips += 1
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert document["total"] == SUBSCRIPTIONS
    listed = document["subscriptions_list"]
    assert [s["sid"] for s in listed] == [str(i) for i in range(SUBSCRIPTIONS)]
    assert round_trips > 20
    assert steps.longest < LONGEST_STEP, f"the loop stood still for {steps.longest * 1000:.0f} ms"
