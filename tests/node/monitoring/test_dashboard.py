"""The dashboard's data: the picture put together from rounds of answers (sans-I/O), what a gather
round finds in a real super-cluster (east of two nodes, west of one, in-process), and the event
stream and page over HTTP with its bounds (viewers, queued events, methods)."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deploy.screenshot import Traffic, redis_command
from node.broker import Broker
from node.config.options import Config
from node.monitoring.dashboard import QUEUED, VIEWERS_MAX, Dashboard
from node.monitoring.picture import MISSED_DOWN, Picture, go_seconds
from pubmesh_testing import RunningNode, RunningSuperCluster
from tests.certs import make_certs
from tests.support import start_node

pytestmark = pytest.mark.timeout(60)

T0 = 1_800_000_000.0


def stamp(seconds: float) -> str:
    """A time as monitoring writes it."""
    whole = int(seconds)
    frac = round((seconds - whole) * 1e9)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{text}.{frac:09d}Z" if frac else f"{text}Z"


def statsz(name: str, at: float, in_msgs: int = 0, out_msgs: int = 0) -> dict[str, Any]:
    """A STATSZ answer as the survey returns it: the document, its sender's name and envelope."""
    server = {"name": name, "id": "ID" + name, "cluster": name[0], "ver": "2.10.0", "time": stamp(at)}
    return {
        "server_name": name,
        "server": server,
        "start": stamp(T0 - 60),
        "received": {"msgs": in_msgs, "bytes": in_msgs * 10},
        "sent": {"msgs": out_msgs, "bytes": out_msgs * 10},
        "connections": 2,
        "subscriptions": 7,
        "slow_consumers": 0,
        "routes": [{"rid": 1}, {"rid": 2}],
    }


def routez(name: str, at: float, peer: str, *pool: int) -> dict[str, Any]:
    routes = [
        {"remote_name": peer, "in_msgs": n, "out_msgs": n, "in_bytes": 0, "out_bytes": 0}
        | {"pending_size": 1}
        for n in pool
    ]
    return {"server_name": name, "now": stamp(at), "routes": routes}


def by_name(items: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {item[key]: item for item in items}


# -- the picture, sans-I/O --------------------------------------------------------------------------


def test_go_seconds_reads_monitoring_times_and_nothing_else() -> None:
    assert go_seconds("2026-11-26T15:55:25.188339243Z") == pytest.approx(1795708525.188339243)
    assert go_seconds("2026-11-26T15:55:25Z") == 1795708525.0
    for bad in ("", "now", "2026-11-26T15:55:25", "2026-11-26T15:55:25.1234567890Z", "x.5Z"):
        assert go_seconds(bad) is None


def test_rates_are_counter_differences_over_the_nodes_own_clock() -> None:
    picture = Picture("a1")
    picture.update({"STATSZ": [statsz("a1", T0, 100, 50)]}, T0)
    [node] = picture.snapshot()["nodes"]
    assert node["msgs_in_rate"] is None  # (nothing to compare with yet)
    picture.update({"STATSZ": [statsz("a1", T0 + 2, 300, 50)]}, T0 + 1)  # (its clock says 2 s)
    [node] = picture.snapshot()["nodes"]
    assert (node["msgs_in_rate"], node["msgs_out_rate"], node["bytes_in_rate"]) == (100.0, 0.0, 1000.0)
    assert (node["state"], node["connections"], node["subscriptions"], node["cluster"]) == (
        "up",
        2,
        7,
        "a",
    )
    picture.update({"STATSZ": [statsz("a1", T0 + 3, 10, 60)]}, T0 + 2)  # restarted: counters went back
    [node] = picture.snapshot()["nodes"]
    assert (node["msgs_in_rate"], node["msgs_out_rate"]) == (None, 10.0)


def test_a_node_that_stops_answering_is_down_with_since_and_no_figures() -> None:
    picture = Picture("a1")
    both = {
        "STATSZ": [statsz("a1", T0), statsz("a2", T0)],
        "ROUTEZ": [routez("a1", T0, "a2", 1, 2), routez("a2", T0, "a1", 3)],
    }
    picture.update(both, T0)
    only_a1 = {"STATSZ": [statsz("a1", T0 + 1)], "ROUTEZ": [routez("a1", T0 + 1, "a2", 1, 2)]}
    for i in range(1, MISSED_DOWN + 1):
        picture.update(only_a1, T0 + i)
        nodes = by_name(picture.snapshot()["nodes"], "name")
        assert nodes["a2"]["state"] == ("down" if i == MISSED_DOWN else "up")
    a2 = nodes["a2"]
    assert (a2["since"], a2["last_seen"], a2["cluster"]) == (T0 + MISSED_DOWN, T0, "a")
    assert "connections" not in a2
    assert "msgs_in_rate" not in a2
    links = by_name(picture.snapshot()["links"], "link")
    assert links["a1->a2"]["state"] == "up"
    assert links["a1->a2"]["connections"] == 2
    assert links["a1->a2"]["pending"] == 2
    assert links["a2->a1"]["state"] == "down"
    kinds = [e["kind"] for e in picture.snapshot()["events"]]
    assert kinds.count("node_up") == 2
    assert "node_down" in kinds
    assert "route_down" in kinds
    picture.update(both, T0 + 10)
    assert by_name(picture.snapshot()["nodes"], "name")["a2"]["state"] == "up"
    assert picture.snapshot()["events"][-2:][0]["kind"] == "node_up"


def test_what_a_round_did_not_ask_or_get_is_left_as_last_reported() -> None:
    picture = Picture("a1")
    stream = {"name": "s", "account": "$G", "db": 0, "length": 4, "groups": []}
    first = {
        "STATSZ": [statsz("a1", T0), statsz("a2", T0)],
        "ROUTEZ": [routez("a1", T0, "a2", 1)],
        "STREAMZ": [{"server_name": "a2", "streams": [stream]}],
    }
    picture.update(first, T0)
    picture.update({"STATSZ": [statsz("a1", T0 + 1), statsz("a2", T0 + 1)]}, T0 + 1)
    snapshot = picture.snapshot()
    assert snapshot["links"][0]["state"] == "up"  # (a1 sent no ROUTEZ this round: not a drop)
    assert [(s["server"], s["name"], s["length"]) for s in snapshot["streams"]] == [("a2", "s", 4)]
    assert snapshot["streams_time"] == T0
    picture.update({"STATSZ": [statsz("a1", T0 + 2)], "ROUTEZ": [routez("a1", T0 + 2, "a3", 1)]}, T0 + 2)
    assert by_name(picture.snapshot()["links"], "link")["a1->a2"]["state"] == "down"  # (not listed)


def test_gateways_are_named_by_the_peer_nodes_name() -> None:
    picture = Picture("a1")
    gatewayz = {
        "server_name": "a1",
        "now": stamp(T0),
        "outbound_gateways": {"b": {"connection": {"name": "IDb1", "pending_bytes": 5, "out_msgs": 3}}},
    }
    picture.update({"STATSZ": [statsz("a1", T0), statsz("b1", T0)], "GATEWAYZ": [gatewayz]}, T0)
    [link] = picture.snapshot()["links"]
    assert (link["link"], link["kind"], link["pending"], link["state"]) == ("a1->b1", "gateway", 5, "up")


def test_advisories_become_events_and_garbage_is_ignored() -> None:
    picture = Picture("a1")
    connect = {
        "type": "io.nats.server.advisory.v1.client_connect",
        "server": {"name": "a1"},
        "client": {"id": 4, "acc": "A", "name": "orders"},
    }
    gone = connect | {"type": "io.nats.server.advisory.v1.client_disconnect", "reason": "Slow Consumer"}
    for payload in (json.dumps(connect), json.dumps(gone), "[]", "{", '{"type": 5}', "\xff"):
        picture.note_advisory(payload.encode("utf-8", "surrogateescape"), T0)
    events = picture.snapshot()["events"]
    assert [e["kind"] for e in events] == ["connect", "slow_consumer"]
    assert events[0]["text"] == "orders connected to a1 (A)"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
answer = st.fixed_dictionaries(
    {"server_name": st.sampled_from(["a1", "a2", ""])},
    optional={
        key: json_values
        for key in (
            "now",
            "in_msgs",
            "routes",
            "outbound_gateways",
            "streams",
            "account_statz",
            "cluster",
        )
    },
)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["STATSZ", "ROUTEZ", "GATEWAYZ", "ACCSTATZ", "STREAMZ"]),
                                st.lists(answer, max_size=3), max_size=5), max_size=4))  # fmt: skip
def test_any_answers_make_a_picture_that_encodes(rounds: list[dict[str, list[dict[str, Any]]]]) -> None:
    picture = Picture("a1")
    for i, answers in enumerate(rounds):
        picture.update(answers, T0 + i)
        json.dumps(picture.snapshot(), allow_nan=False)
        json.dumps(picture.history(), allow_nan=False)


# -- viewers ----------------------------------------------------------------------------------------


async def test_viewers_are_bounded_and_one_that_falls_behind_is_dropped() -> None:
    broker = Broker(Config(server_name="n1"))
    assert broker.system_account is not None
    dashboard = Dashboard(broker, broker.system_account)
    viewers = [dashboard.join() for _ in range(VIEWERS_MAX)]
    assert all(viewers)
    assert dashboard.join() is None
    slow, *others = [v for v in viewers if v is not None]
    for i in range(QUEUED):  # (each has its history queued already: one more fills the queue)
        for other in others:
            while True:
                try:
                    other.receive.receive_nowait()
                except trio.WouldBlock:
                    break
        dashboard._broadcast(b"event %d" % i)
    assert slow not in dashboard.viewers
    assert slow.scope.cancel_called
    assert dashboard.dropped == 1
    assert len(dashboard.viewers) == VIEWERS_MAX - 1
    assert dashboard.join() is not None  # (its place is free again)
    assert Dashboard(broker, None).join() is None  # (no system account: no stream)


# -- gathering in a real super-cluster --------------------------------------------------------------


def east1(supercluster: RunningSuperCluster) -> RunningNode:
    return supercluster["east"][0]


def redis_port(node: RunningNode) -> int:
    assert node.redis_url is not None
    return int(node.redis_url.rsplit(":", 1)[1])


def client_port(node: RunningNode) -> int:
    return int(node.client_url.rsplit(":", 1)[1])


@pytest.mark.slow
def test_a_round_sees_the_whole_supercluster(pubmesh_supercluster: RunningSuperCluster) -> None:
    observer, west = east1(pubmesh_supercluster), pubmesh_supercluster["west"][0]
    broker = observer.handle.node.broker
    assert broker.system_account is not None
    dashboard = Dashboard(broker, broker.system_account)
    assert dashboard.survey is not None
    survey = dashboard.survey
    for command in (
        ("XADD", "orders", "*", "n", "1"),
        ("XADD", "orders", "*", "n", "2"),
        ("XADD", "orders", "*", "n", "3"),
        ("XGROUP", "CREATE", "orders", "billing", "0"),
        ("XREADGROUP", "GROUP", "billing", "c1", "COUNT", "2", "STREAMS", "orders", ">"),
    ):
        redis_command(redis_port(west), *command)

    async def first() -> None:
        survey.open()
        await dashboard.round()

    observer.call(first)
    traffic = Traffic(client_port(observer), client_port(west), "orders.new", 200)
    pubmesh_supercluster.wait_for_interest("orders.new")

    async def later() -> dict[str, Any]:
        for _ in range(3):
            await trio.sleep(1)
            await dashboard.round()
        survey.close()
        return dashboard.picture.snapshot()

    try:
        snapshot = observer.call(later)
    finally:
        traffic.stop()
    assert traffic.received > 0
    assert snapshot["observer"] == "east-1"
    assert snapshot["clusters"] == [
        {"name": "east", "nodes": ["east-1", "east-2"]},
        {"name": "west", "nodes": ["west-1"]},
    ]
    nodes = by_name(snapshot["nodes"], "name")
    assert {n["state"] for n in nodes.values()} == {"up"}
    assert nodes["east-1"]["msgs_in_rate"] > 0
    assert nodes["west-1"]["msgs_out_rate"] > 0
    assert nodes["east-1"]["connections"] == 1
    assert nodes["west-1"]["connections"] == 1
    assert nodes["east-2"]["msgs_in_rate"] == 0.0
    for n in nodes.values():
        assert n["subscriptions"] > 0
        assert n["mem"] > 0
        assert n["cpu"] is not None
    links = by_name(snapshot["links"], "link")
    assert links["east-1->east-2"]["kind"] == links["east-2->east-1"]["kind"] == "route"
    assert links["east-1->west-1"]["kind"] == "gateway"
    assert links["east-1->west-1"]["msgs_out_rate"] > 0  # (the traffic crosses this gateway)
    assert any(key.startswith("west-1->east-") for key in links)
    assert {link["state"] for link in links.values()} == {"up"}
    [stream] = snapshot["streams"]
    assert (stream["server"], stream["name"], stream["length"]) == ("west-1", "orders", 3)
    assert (stream["groups"], stream["pending"], stream["lag"]) == (1, 2, 1)
    accounts = by_name(snapshot["accounts"], "account")
    assert accounts["$G"]["connections"] == 2
    assert set(accounts["$SYS"]["nodes"]) == set(nodes)
    texts = [e["text"] for e in snapshot["events"] if e["kind"] == "connect"]
    assert "traffic connected to east-1 ($G)" in texts
    assert "traffic connected to west-1 ($G)" in texts


# -- over HTTP --------------------------------------------------------------------------------------


def events(url: str, count: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """The first ``count`` events of the stream at ``url``."""
    with urlopen(url, timeout=10) as stream:
        name = ""
        while count:
            line = stream.readline()
            if line.startswith(b"event: "):
                name = line[7:].strip().decode()
            elif line.startswith(b"data: "):
                yield name, json.loads(line[6:])
                count -= 1


@pytest.mark.slow
def test_the_stream_sends_history_then_snapshots(pubmesh_supercluster: RunningSuperCluster) -> None:
    url = east1(pubmesh_supercluster).monitoring_url
    assert url is not None
    got = list(events(url + "/dashboard/events", 3))
    assert [name for name, _ in got] == ["history", "snapshot", "snapshot"]
    assert set(got[2][1]) >= {"nodes", "links", "streams", "accounts", "events", "clusters"}
    assert {n["name"] for n in got[2][1]["nodes"]} == {"east-1", "east-2", "west-1"}
    # a viewer that comes later gets the history so far, then the latest snapshot at once
    (_, history), (_, latest) = events(url + "/dashboard/events", 2)
    assert len(history["nodes"]["west-1"]) >= 2
    assert latest["nodes"]


def test_the_page_and_its_files(pubmesh_supercluster: RunningSuperCluster) -> None:
    url = east1(pubmesh_supercluster).monitoring_url
    assert url is not None
    for path, kind in (("", "text/html"), ("/app.js", "text/javascript"), ("/app.css", "text/css")):
        with urlopen(url + "/dashboard" + path, timeout=10) as response:
            assert response.headers["content-type"].startswith(kind)
            assert "default-src 'none'" in response.headers["content-security-policy"]
            body = response.read()
            assert b"http://" not in body.replace(b"http://www.w3.org/2000/svg", b"")
            assert b"https://" not in body
    with urlopen(Request(url + "/dashboard", method="HEAD"), timeout=10) as response:
        assert response.status == 200
        assert response.read() == b""
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        for path in ("/dashboard", "/dashboard/events"):
            with pytest.raises(HTTPError) as failed:
                urlopen(Request(url + path, method=method, data=b"x"), timeout=10)
            with failed.value as refused:
                assert (refused.code, refused.headers["allow"]) == (405, "GET, HEAD")
    with urlopen(url + "/varz", timeout=10) as response:
        stats = json.loads(response.read())["http_req_stats"]
    assert (stats["/dashboard"], stats["/dashboard/events"]) == (8, 4)


async def test_the_page_and_its_stream_over_https(nursery: trio.Nursery, tmp_path: Path) -> None:
    certs = make_certs(tmp_path, "node")
    node = await start_node(nursery, Config(tls=certs.tls("node"), https_port=0))
    url = f"https://127.0.0.1:{node.http_port}/dashboard"

    def fetch() -> tuple[bytes, list[str]]:
        context = certs.client_context()
        with urlopen(url, timeout=10, context=context) as page:
            html = page.read()
        with urlopen(url + "/events", timeout=10, context=context) as stream:
            names = [stream.readline().decode().strip() for _ in range(6)]
        return html, names

    html, lines = await trio.to_thread.run_sync(fetch)
    assert b'src="dashboard/app.js"' in html
    assert (lines[0], lines[2], lines[5]) == ("retry: 1000", "event: history", "event: snapshot")
    assert lines[3].startswith("data: {")
    with pytest.raises(URLError, match="CERTIFICATE_VERIFY_FAILED"):
        await trio.to_thread.run_sync(lambda: urlopen(url, timeout=10))


def test_viewers_past_the_limit_are_refused_and_leaving_frees_a_place(
    pubmesh_supercluster: RunningSuperCluster,
) -> None:
    url = east1(pubmesh_supercluster).monitoring_url
    assert url is not None
    port = int(url.rsplit(":", 1)[1])
    request = b"GET /dashboard/events HTTP/1.1\r\nHost: x\r\n\r\n"

    def status(conn: socket.socket) -> int:
        head = b""
        while b"\r\n" not in head:
            head += conn.recv(1024)
        return int(head.split(b" ", 2)[1])

    conns = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(VIEWERS_MAX + 2)]
    try:
        statuses = []
        for conn in conns:
            conn.sendall(request)
            statuses.append(status(conn))
        assert statuses == [200] * VIEWERS_MAX + [503, 503]
    finally:
        for conn in conns:
            conn.close()
    deadline = time.monotonic() + 10
    while True:  # (the server notices the viewers left)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(request)
            if status(conn) == 200:
                break
        assert time.monotonic() < deadline
        time.sleep(0.1)


# -- hostile requests against a live node -----------------------------------------------------------

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
PATHS = ["/dashboard", "/dashboard/", "/dashboard/app.js", "/dashboard/app.css", "/dashboard/events"]
PATHS += ["/dashboard/events/", "/dashboard/../varz", "/dashboard%00", "//dashboard", "/dashboard/x"]


@pytest.fixture(scope="module")
def live() -> Iterator[Any]:
    from tests.live import live_node

    with live_node() as node:
        yield node


def head_of(port: int, request: bytes) -> bytes:
    """What the server sends within a moment of the request: its status line and headers at least
    (an event stream never ends, so this does not wait for the end)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(request)
        got = b""
        conn.settimeout(1)
        try:
            while b"\r\n\r\n" not in got:
                chunk = conn.recv(1 << 16)
                if not chunk:
                    break
                got += chunk
        except TimeoutError:
            pass
        return got


METHODS = ["GET", "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH", "BREW"]
HEADERS = [b"", b"Last-Event-ID: 99\r\n", b"Accept: text/event-stream\r\n"]
HEADERS += [b"Content-Length: 3\r\n\r\nabc", b"Transfer-Encoding: chunked\r\n"]


def hex_query(text: str) -> str:
    return "?" + text.encode().hex()


request_lines = st.builds(
    lambda method, path, query, extra: (
        f"{method} {path}{query} HTTP/1.1\r\nHost: x\r\n".encode() + extra + b"\r\n"
    ),
    st.sampled_from(METHODS),
    st.sampled_from(PATHS),
    st.one_of(st.sampled_from(["", "?a=1&a=", "?x=%ff%00"]), st.text(max_size=20).map(hex_query)),
    st.sampled_from(HEADERS),
)


@pytest.mark.slow
@pytest.mark.fuzz
@pytest.mark.timeout(300)
@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(request=st.one_of(request_lines, st.binary(max_size=120).map(lambda b: b"GET /dashboard" + b)))
def test_hostile_requests_get_http_answers(live: Any, request: bytes) -> None:
    got = head_of(live.http_port, request)
    if got:
        status = int(got.split(b" ", 2)[1])
        assert status in (200, 400, 404, 405, 503) or 300 <= status < 400, got[:200]
    live.assert_serving()


@pytest.mark.slow
@pytest.mark.fuzz
def test_many_connections_to_the_stream_are_bounded(live: Any) -> None:
    before = live.rss()
    for _ in range(3):
        conns = [socket.create_connection(("127.0.0.1", live.http_port), timeout=10) for _ in range(60)]
        for conn in conns:
            conn.sendall(b"GET /dashboard/events HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(1.5)  # (a few rounds sent to viewers that read nothing)
        for conn in conns:
            conn.close()
    live.assert_serving()
    status, _ = live.http_get("/dashboard")
    assert status == 200
    assert live.rss() - before < 64 << 20
