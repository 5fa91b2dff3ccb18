"""The monitoring endpoints over real HTTP, against a real node that real clients use over TCP.

Each test starts a ``Server`` and the monitoring server on 127.0.0.1 (free ports), drives clients
speaking the NATS protocol over sockets, and checks that what the endpoints report agrees with what
the clients did. Barriers are PING/PONG flushes; a client's own close is awaited with
``wait_all_tasks_blocked`` (the server has then read the end of its stream).
"""

from __future__ import annotations

import asyncio
import collections
import http.client
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, NamedTuple

import attrs
import nats
import pytest
import trio
import trio.testing

from node.broker import NATS_VERSION
from node.config.options import AccountConfig, Config, UserConfig
from node.monitoring.server import serve_monitoring
from node.nats.client import ClientConnection
from node.nats.protocol import Err, Info, Msg, Ping, Pong, ServerEvent, ServerOpParser
from node.nats.protocol import writer as w
from node.run.launch import run_node
from node.run.node import Node as Assembled
from node.server import Server

pytestmark = pytest.mark.timeout(30)

HTTP_TIMEOUT = 10.0
GO_TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z"


class Reply(NamedTuple):
    status: int
    headers: dict[str, str]
    body: str


def _http_get(port: int, path: str) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return Reply(response.status, dict(response.getheaders()), response.read().decode())
    finally:
        conn.close()


@attrs.define
class Node:
    server: Server
    port: int
    http_port: int
    clients: list[RawClient] = attrs.Factory(list)

    async def get(self, path: str) -> Reply:
        return await trio.to_thread.run_sync(_http_get, self.http_port, path)

    async def json(self, path: str) -> dict[str, Any]:
        reply = await self.get(path)
        assert reply.status == 200, reply.body
        assert reply.headers["content-type"] == "application/json"
        doc: dict[str, Any] = json.loads(reply.body)
        return doc

    async def json_when(
        self, path: str, ready: Callable[[dict[str, Any]], bool], within: float = 20.0
    ) -> dict[str, Any]:
        """The first document at ``path`` that ``ready`` accepts, asked for every 50 ms for at most
        ``within`` seconds (links come up, and interest spreads, in their own time)."""
        with trio.fail_after(within):
            while not ready(doc := await self.json(path)):  # noqa: ASYNC110 (seen only from outside)
                await trio.sleep(0.05)
        return doc

    async def client(self, **options: Any) -> RawClient:
        """A connected client; CONNECT ``options`` go on top of quiet defaults."""
        client = RawClient(await trio.open_tcp_stream("127.0.0.1", self.port))
        self.clients.append(client)  # closed by the fixture, even if the handshake fails
        await client.handshake(options)
        return client


NodeFactory = Callable[..., Awaitable[Node]]


@pytest.fixture
async def make_node(nursery: trio.Nursery) -> AsyncIterator[NodeFactory]:
    """Starts nodes on 127.0.0.1 (free ports); closes their test clients at the end."""
    nodes: list[Node] = []

    async def make(config: Config | None = None) -> Node:
        config = (config or Config()).evolve(host="127.0.0.1", port=0, http_host="127.0.0.1")
        server = Server(config)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(server.serve, listeners)
        http_port = await nursery.start(
            partial(serve_monitoring, Assembled(server), "127.0.0.1", 0, shutdown=trio.Event())
        )
        nodes.append(Node(server, listeners[0].socket.getsockname()[1], http_port))
        return nodes[-1]

    yield make
    for node in nodes:
        for client in node.clients:
            await trio.aclose_forcefully(client.stream)


@pytest.fixture
async def node(make_node: NodeFactory) -> Node:
    return await make_node()


class RawClient:
    """A NATS client speaking the protocol directly, so the test knows every byte it sent."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.cid = 0
        self.parser = ServerOpParser()
        self.events: collections.deque[ServerEvent] = collections.deque()

    async def handshake(self, options: dict[str, Any]) -> None:
        info = await self.next_event()
        assert isinstance(info, Info)
        self.cid = info.fields["client_id"]
        connect = {"verbose": False, "pedantic": False, "lang": "raw", "version": "1.2.3", **options}
        await self.send(w.connect(connect))
        await self.flush()

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def next_event(self) -> ServerEvent:
        while not self.events:
            data = await self.stream.receive_some(1 << 16)
            assert data, "the server closed the connection"
            self.parser.receive_data(data)
            self.events.extend(self.parser.events())
        return self.events.popleft()

    async def flush(self) -> list[Msg]:
        """PING, and wait for the PONG: the server has acted on everything sent before it."""
        await self.send(w.PING)
        received: list[Msg] = []
        while True:
            event = await self.next_event()
            if isinstance(event, Pong):
                return received
            if isinstance(event, Ping):
                await self.send(w.PONG)
            elif isinstance(event, Msg):
                received.append(event)
            else:
                assert not isinstance(event, Err), event.message

    async def publish(self, subject: str, payload: bytes, count: int = 1) -> None:
        await self.send(w.pub(subject.encode(), payload) * count)

    async def close(self) -> None:
        await self.stream.aclose()
        await trio.testing.wait_all_tasks_blocked()


def by_cid(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {c["cid"]: c for c in doc["connections"]}


# -- /varz -----------------------------------------------------------------------------------------


async def test_varz_reports_identity_limits_and_traffic(make_node: NodeFactory) -> None:
    config = Config(server_name="mon-1", max_payload=65536, max_subscriptions=50, ping_interval=30.0)
    node = await make_node(config)
    subscriber = await node.client()
    await subscriber.send(w.sub(b"orders.>", b"1") + w.sub(b"orders.eu", b"2"))
    await subscriber.flush()
    other = await node.client()
    await other.send(w.sub(b"orders.eu", b"7"))
    await other.flush()
    publisher = await node.client()
    await publisher.publish("orders.eu", b"0123456789", 5)
    await publisher.publish("nobody.cares", b"xyz", 2)
    await publisher.flush()
    assert len(await subscriber.flush()) == 10
    await publisher.close()

    reply = await node.get("/varz")
    doc = json.loads(reply.body)
    broker = node.server.broker
    assert list(doc)[:7] == ["server_id", "server_name", "version", "proto", "go", "host", "port"]
    assert doc["server_id"] == broker.server_id
    assert doc["server_name"] == "mon-1"
    assert doc["go"].startswith("python3.")
    assert (doc["host"], doc["http_host"], doc["http_port"]) == (
        "127.0.0.1",
        "127.0.0.1",
        node.http_port,
    )
    assert doc["max_payload"] == 65536
    assert doc["max_subscriptions"] == 50
    assert doc["ping_interval"] == 30 * 10**9
    assert doc["write_deadline"] == 10 * 10**9
    assert "auth_required" not in doc
    for key in ("cluster", "gateway", "leaf", "mqtt", "websocket", "jetstream"):
        assert doc[key] == {}
    assert doc["connections"] == 2
    assert doc["total_connections"] == 3
    assert (doc["in_msgs"], doc["in_bytes"]) == (7, 56)
    assert (doc["out_msgs"], doc["out_bytes"]) == (15, 150)  # 5 to each of three subscriptions
    assert doc["subscriptions"] == 3
    assert (doc["routes"], doc["remotes"], doc["leafnodes"]) == (0, 0, 0)
    assert doc["slow_consumers"] == 0
    assert doc["slow_consumer_stats"] == {"clients": 0, "routes": 0, "gateways": 0, "leafs": 0}
    assert doc["http_req_stats"] == {"/varz": 1}
    assert doc["start"] == doc["config_load_time"]
    assert re.fullmatch(GO_TIME, doc["now"])
    assert re.fullmatch(r"\d+s", doc["uptime"])
    assert doc["mem"] > 0
    assert doc["cores"] >= 1

    # Go's encoding: two-space indent, whole floats without ".0", no final newline.
    assert reply.body.startswith('{\n  "server_id": "')
    assert '\n  "auth_timeout": 2,\n' in reply.body
    assert not reply.body.endswith("\n")
    assert reply.headers["access-control-allow-origin"] == "*"
    assert (await node.json("/varz"))["http_req_stats"] == {"/varz": 2}


async def test_varz_says_when_auth_is_required(make_node: NodeFactory) -> None:
    node = await make_node(Config(users=(UserConfig(user="alice", password="pw"),)))
    assert (await node.json("/varz"))["auth_required"] is True


# -- /connz ----------------------------------------------------------------------------------------


async def test_connz_lists_connections_with_their_traffic_and_subscriptions(node: Node) -> None:
    alice = await node.client(name="alice")
    bob = await node.client(name="bob")
    await alice.send(w.sub(b"news.>", b"1") + w.sub(b"jobs", b"2", b"workers") + w.sub(b"once", b"3"))
    await alice.send(w.unsub(b"3", 4))
    await alice.flush()
    await bob.publish("news.today", b"hello", 3)
    await bob.publish("jobs", b"do-it")
    await bob.flush()
    assert len(await alice.flush()) == 4

    doc = await node.json("/connz")
    assert (doc["num_connections"], doc["total"], doc["offset"], doc["limit"]) == (2, 2, 0, 1024)
    assert doc["server_id"] == node.server.broker.server_id
    conns = by_cid(doc)
    assert list(conns) == [alice.cid, bob.cid]
    a, b = conns[alice.cid], conns[bob.cid]
    assert (a["name"], a["lang"], a["version"]) == ("alice", "raw", "1.2.3")
    assert (a["kind"], a["type"], a["ip"]) == ("Client", "nats", "127.0.0.1")
    assert a["port"] == alice.stream.socket.getsockname()[1]
    assert (a["in_msgs"], a["in_bytes"], a["out_msgs"], a["out_bytes"]) == (0, 0, 4, 20)
    assert (b["in_msgs"], b["in_bytes"], b["out_msgs"], b["out_bytes"]) == (4, 20, 0, 0)
    assert (a["subscriptions"], b["subscriptions"]) == (3, 0)
    assert a["pending_bytes"] == 0
    assert re.fullmatch(r"\d+(\.\d+)?(ns|µs|ms|s)", a["rtt"])  # measured since CONNECT
    assert not {"stop", "reason", "subscriptions_list", "subscriptions_list_detail"} & set(a)

    listed = by_cid(await node.json("/connz?subs=1"))
    assert sorted(listed[alice.cid]["subscriptions_list"]) == ["jobs", "news.>", "once"]
    assert "subscriptions_list" not in listed[bob.cid]  # none to list
    detailed = by_cid(await node.json("/connz?subs=DETAIL"))[alice.cid]
    assert "subscriptions_list" not in detailed
    assert sorted(detailed["subscriptions_list_detail"], key=lambda d: d["sid"]) == [
        {"subject": "news.>", "sid": "1", "msgs": 3, "cid": alice.cid},
        {"subject": "jobs", "qgroup": "workers", "sid": "2", "msgs": 1, "cid": alice.cid},
        {"subject": "once", "sid": "3", "msgs": 0, "max": 4, "cid": alice.cid},
    ]

    one = await node.json(f"/connz?cid={bob.cid}")
    assert [c["cid"] for c in one["connections"]] == [bob.cid]
    assert (one["num_connections"], one["total"], one["limit"]) == (1, 2, 1)
    missing = await node.json("/connz?cid=999")
    assert (missing["num_connections"], missing["connections"]) == (0, [])


async def test_connz_pages_and_sorts(node: Node) -> None:
    clients = [await node.client() for _ in range(5)]
    cids = [c.cid for c in clients]
    sink = clients[1]
    await sink.send(w.sub(b"traffic", b"1"))
    for i, count in enumerate([0, 2, 1, 3, 0]):  # subscriptions held, beyond the sink's
        await clients[i].send(
            b"".join(w.sub(f"idle.{i}.{n}".encode(), f"s{n}".encode()) for n in range(count))
        )
    await sink.flush()
    for client, count in zip(clients, [3, 1, 4, 0, 2], strict=True):  # messages published
        await client.publish("traffic", b"x" * 10, count)
        await client.flush()  # (the sink's messages are counted as they are queued for it)

    async def order(query: str) -> list[int]:
        doc = await node.json(f"/connz?{query}")
        return [cids.index(c["cid"]) for c in doc["connections"]]

    assert await order("") == [0, 1, 2, 3, 4]
    assert await order("sort=cid") == await order("sort=start") == [0, 1, 2, 3, 4]
    assert await order("sort=msgs_from") == await order("sort=bytes_from") == [2, 0, 4, 1, 3]
    assert await order("sort=msgs_to") == await order("sort=bytes_to") == [1, 0, 2, 3, 4]
    assert await order("sort=subs") == [1, 3, 2, 0, 4]  # the sink holds 2 + 1
    assert await order("sort=pending") == [0, 1, 2, 3, 4]
    conns = node.server.broker.clients.values()
    rtts = {c.cid: c.rtt_ns for c in conns if isinstance(c, ClientConnection)}
    assert await order("sort=rtt") == sorted(range(5), key=lambda i: -rtts[cids[i]])
    assert await order("sort=last") == [4, 3, 2, 1, 0]  # each flushed after the one before
    assert await order("sort=idle") == [0, 1, 2, 3, 4]
    assert await order("sort=uptime") == [4, 3, 2, 1, 0]

    pages = [await node.json(f"/connz?sort=msgs_from&limit=2&offset={o}") for o in (0, 2, 4)]
    assert [(p["num_connections"], p["total"], p["offset"], p["limit"]) for p in pages] == [
        (2, 5, 0, 2),
        (2, 5, 2, 2),
        (1, 5, 4, 2),
    ]
    assert [cids.index(c["cid"]) for p in pages for c in p["connections"]] == [2, 0, 4, 1, 3]
    past = await node.json("/connz?offset=10")
    assert (past["num_connections"], past["total"], past["connections"]) == (0, 5, [])
    normalised = await node.json("/connz?offset=-3&limit=0")
    assert (normalised["offset"], normalised["limit"], normalised["num_connections"]) == (0, 1024, 5)


async def test_connz_keeps_closed_connections_with_their_reasons(make_node: NodeFactory) -> None:
    node = await make_node(Config(max_pending=1024))
    leaver = await node.client(name="leaver")
    await leaver.publish("anything", b"bye", 2)
    await leaver.flush()
    await leaver.close()
    slow = await node.client(name="slow")
    await slow.send(w.sub(b"big", b"1"))
    await slow.flush()
    stays = await node.client(name="stays")
    await stays.publish("big", b"x" * 2000)  # more than max_pending in one message
    await stays.flush()

    assert [c["cid"] for c in (await node.json("/connz"))["connections"]] == [stays.cid]
    closed = await node.json("/connz?state=closed")
    assert (closed["num_connections"], closed["total"]) == (2, 2)
    conns = by_cid(closed)
    assert list(conns) == [leaver.cid, slow.cid]
    assert conns[leaver.cid]["reason"] == "Client Closed"
    assert conns[slow.cid]["reason"] == "Slow Consumer (Pending Bytes)"
    assert (conns[leaver.cid]["in_msgs"], conns[leaver.cid]["in_bytes"]) == (2, 6)
    for conn in conns.values():
        assert re.fullmatch(GO_TIME, conn["stop"])
        assert re.fullmatch(r"\d+s", conn["uptime"])
        assert re.fullmatch(r"\d+s", conn["idle"])

    assert [c["cid"] for c in (await node.json("/connz?state=ALL"))["connections"]] == [
        leaver.cid,
        slow.cid,
        stays.cid,
    ]
    assert (await node.json("/connz?state=any"))["total"] == 3
    by_reason = await node.json("/connz?state=closed&sort=reason")
    assert [c["cid"] for c in by_reason["connections"]] == [leaver.cid, slow.cid]
    by_stop = await node.json("/connz?state=closed&sort=stop")
    assert [c["cid"] for c in by_stop["connections"]] == [slow.cid, leaver.cid]  # latest first
    one = await node.json(f"/connz?state=closed&cid={slow.cid}")
    assert [c["name"] for c in one["connections"]] == ["slow"]

    varz = await node.json("/varz")
    assert (varz["connections"], varz["total_connections"]) == (1, 3)
    assert varz["slow_consumers"] == 1
    assert varz["slow_consumer_stats"]["clients"] == 1
    assert varz["in_msgs"] == 3  # the leaver's two survive its connection


async def test_connz_shows_users_and_accounts_when_asked(make_node: NodeFactory) -> None:
    users = (
        UserConfig(user="alice", password="a-pw"),
        UserConfig(user="bob", password="b-pw", account="sales"),
    )
    node = await make_node(Config(users=users, accounts=(AccountConfig("sales"),)))
    alice = await node.client(user="alice", **{"pass": "a-pw"})
    bob = await node.client(user="bob", **{"pass": "b-pw"})

    plain = by_cid(await node.json("/connz"))
    assert "authorized_user" not in plain[alice.cid]
    assert "account" not in plain[bob.cid]
    shown = by_cid(await node.json("/connz?auth=true"))
    assert shown[alice.cid]["authorized_user"] == "alice"
    assert "account" not in shown[alice.cid]  # the global account goes unnamed
    assert (shown[bob.cid]["authorized_user"], shown[bob.cid]["account"]) == ("bob", "sales")
    assert [c["cid"] for c in (await node.json("/connz?user=alice"))["connections"]] == [alice.cid]
    only_sales = await node.json("/connz?acc=sales")
    assert ([c["cid"] for c in only_sales["connections"]], only_sales["total"]) == ([bob.cid], 1)


async def test_connz_shows_what_nats_py_says_about_itself(node: Node) -> None:
    async def scenario() -> dict[str, Any]:
        nc = await asyncio.wait_for(
            nats.connect(f"nats://127.0.0.1:{node.port}", name="probe", allow_reconnect=False), 5
        )
        try:
            await nc.subscribe("probe.*")
            for _ in range(3):
                await nc.publish("probe.x", b"12345")
            await nc.flush(timeout=5)
            doc: dict[str, Any] = json.loads(_http_get(node.http_port, "/connz?subs=1").body)
            return doc
        finally:
            await asyncio.wait_for(nc.close(), 5)

    doc = await trio.to_thread.run_sync(asyncio.run, scenario())
    (conn,) = doc["connections"]
    assert (conn["name"], conn["lang"]) == ("probe", "python3")
    assert conn["version"]
    assert conn["subscriptions_list"] == ["probe.*"]
    assert (conn["in_msgs"], conn["in_bytes"], conn["out_msgs"], conn["out_bytes"]) == (3, 15, 3, 15)


# -- /subsz ----------------------------------------------------------------------------------------


async def test_subsz_reports_stats_and_lists_matching_subscriptions(node: Node) -> None:
    x = await node.client()
    await x.send(
        w.sub(b"orders.>", b"1") + w.sub(b"orders.eu", b"2", b"workers") + w.sub(b"billing.*", b"3")
    )
    y = await node.client()
    await y.send(w.sub(b"orders.eu", b"1") + w.sub(b"misc", b"2") + w.unsub(b"2"))
    await y.send(w.sub(b"orders.us", b"10") + w.unsub(b"10", 5))
    await x.flush()
    await y.flush()
    publisher = await node.client()
    await publisher.publish("orders.eu", b"abc", 3)
    await publisher.flush()

    doc = await node.json("/subsz")
    assert list(doc)[:2] == ["server_id", "now"]
    assert (doc["num_subscriptions"], doc["num_inserts"], doc["num_removes"]) == (5, 6, 1)
    assert (doc["num_cache"], doc["max_fanout"], doc["avg_fanout"]) == (1, 3, 3)  # 2 plain + 1 group
    assert doc["num_matches"] >= 1
    assert (doc["total"], doc["offset"], doc["limit"]) == (0, 0, 1024)
    assert "subscriptions_list" not in doc

    listed = await node.json("/subsz?subs=1")
    assert listed["total"] == 5
    assert listed["subscriptions_list"] == [
        {"account": "$G", "subject": "orders.>", "sid": "1", "msgs": 3, "cid": x.cid},
        {
            "account": "$G",
            "subject": "orders.eu",
            "qgroup": "workers",
            "sid": "2",
            "msgs": 3,
            "cid": x.cid,
        },
        {"account": "$G", "subject": "billing.*", "sid": "3", "msgs": 0, "cid": x.cid},
        {"account": "$G", "subject": "orders.eu", "sid": "1", "msgs": 3, "cid": y.cid},
        {"account": "$G", "subject": "orders.us", "sid": "10", "msgs": 0, "max": 5, "cid": y.cid},
    ]
    page = await node.json("/subsz?subs=1&offset=1&limit=2")
    assert (page["total"], page["offset"], page["limit"]) == (5, 1, 2)
    assert page["subscriptions_list"] == listed["subscriptions_list"][1:3]

    matching = await node.json("/subsz?subs=1&test=orders.eu")
    assert matching["total"] == 3
    assert [(s["subject"], s["cid"]) for s in matching["subscriptions_list"]] == [
        ("orders.>", x.cid),
        ("orders.eu", x.cid),
        ("orders.eu", y.cid),
    ]
    assert [
        s["subject"] for s in (await node.json("/subsz?subs=1&test=billing.q3"))["subscriptions_list"]
    ] == ["billing.*"]
    none = await node.json("/subsz?subs=1&test=shipping")
    assert none["total"] == 0
    assert "subscriptions_list" not in none

    assert (await node.json("/subsz?acc=$G"))["num_subscriptions"] == 5
    assert (await node.json("/subsz?acc=nobody&subs=1"))["num_subscriptions"] == 0
    alias = await node.json("/subscriptionsz?subs=1")
    assert alias["subscriptions_list"] == listed["subscriptions_list"]
    assert (await node.json("/varz"))["http_req_stats"]["/subsz"] == 9  # the alias's included


async def test_subsz_sums_accounts(make_node: NodeFactory) -> None:
    users = (UserConfig(user="a", password="pa"), UserConfig(user="b", password="pb", account="B"))
    node = await make_node(Config(users=users, accounts=(AccountConfig("B"),)))
    a = await node.client(user="a", **{"pass": "pa"})
    b = await node.client(user="b", **{"pass": "pb"})
    await a.send(w.sub(b"same", b"1"))
    await b.send(w.sub(b"same", b"1") + w.sub(b"other", b"2"))
    await a.flush()
    await b.flush()
    assert (await node.json("/subsz"))["num_subscriptions"] == 3
    assert (await node.json("/varz"))["subscriptions"] == 3
    only_b = await node.json("/subsz?acc=B&subs=1")
    assert only_b["num_subscriptions"] == 2
    assert {(s["account"], s["subject"]) for s in only_b["subscriptions_list"]} == {
        ("B", "same"),
        ("B", "other"),
    }


# -- links and health ------------------------------------------------------------------------------


async def test_routez_gatewayz_and_healthz_on_a_standalone_node(node: Node) -> None:
    broker = node.server.broker
    routez = await node.json("/routez")
    assert list(routez) == ["server_id", "server_name", "now", "num_routes", "routes"]
    assert (routez["server_id"], routez["num_routes"], routez["routes"]) == (broker.server_id, 0, [])
    gatewayz = await node.json("/gatewayz")
    assert gatewayz["outbound_gateways"] == gatewayz["inbound_gateways"] == {}
    health = await node.get("/healthz")
    assert (health.status, health.headers["content-type"], health.body) == (
        200,
        "application/json",
        '{"status":"ok"}',
    )


async def test_index_and_unknown_paths(node: Node) -> None:
    index = await node.get("/")
    assert index.status == 200
    assert index.headers["content-type"].startswith("text/html")
    for endpoint in ("varz", "connz", "subsz", "routez", "gatewayz", "healthz", "metrics"):
        assert f'href="{endpoint}"' in index.body
    for path in ("/nope", "/varz/", "/connz/extra"):
        missing = await node.get(path)
        assert (missing.status, missing.body) == (404, "404 page not found\n")
        assert missing.headers["content-type"] == "text/plain; charset=utf-8"
    assert (await node.json("/varz"))["http_req_stats"] == {"/": 1, "/varz": 1}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/connz?sort=foo", "invalid sorting option: foo"),
        ("/connz?sort=stop", "sort by stop only valid on closed connections"),
        ("/connz?sort=reason&state=all", "sort by reason only valid on closed connections"),
        (
            "/connz?auth=xxx",
            "Error decoding boolean for 'auth': strconv.ParseBool: parsing \"xxx\": invalid syntax",
        ),
        (
            "/connz?subs=maybe",
            "Error decoding boolean for 'subs': strconv.ParseBool: parsing \"maybe\": invalid syntax",
        ),
        (
            "/connz?offset=abc",
            "Error decoding int for 'offset': strconv.Atoi: parsing \"abc\": invalid syntax",
        ),
        (
            "/connz?limit=1.5",
            "Error decoding int for 'limit': strconv.Atoi: parsing \"1.5\": invalid syntax",
        ),
        (
            "/connz?limit=9223372036854775808",
            "Error decoding int for 'limit': strconv.Atoi: parsing \"9223372036854775808\": "
            "value out of range",
        ),
        (
            "/connz?cid=-1",
            "Error decoding uint64 for 'cid': strconv.ParseUint: parsing \"-1\": invalid syntax",
        ),
        ("/connz?state=xxx", "Error decoding state for xxx"),
        ("/subsz?test=foo.*", "invalid test subject, must be valid publish subject: foo.*"),
        ("/subsz?test=foo.%3E", "invalid test subject, must be valid publish subject: foo.>"),
        ("/subsz?test=foo..bar", "invalid test subject, must be valid publish subject: foo..bar"),
        (
            "/subsz?subs=2",
            "Error decoding boolean for 'subs': strconv.ParseBool: parsing \"2\": invalid syntax",
        ),
    ],
)
async def test_bad_queries_get_400_with_nats_server_wording(node: Node, path: str, message: str) -> None:
    reply = await node.get(path)
    assert (reply.status, reply.body) == (400, message)
    assert reply.headers["content-type"] == "text/plain; charset=utf-8"
    counted = "/subsz" if path.startswith("/subsz") else "/connz"
    assert (await node.json("/varz"))["http_req_stats"][counted] == 1  # counted all the same


# -- /metrics --------------------------------------------------------------------------------------


def parse_metrics(text: str) -> dict[str, tuple[str, dict[str, str], float]]:
    """Each series by name and labels: (its TYPE, its labels, its value); HELP and TYPE come first."""
    series: dict[str, tuple[str, dict[str, str], float]] = {}
    helped: set[str] = set()
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
        else:
            found = re.fullmatch(r"([a-z_]+)\{(.*)\} (\S+)", line)
            assert found, line
            name, labels = found[1], dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', found[2]))
            assert name in helped, name
            assert name in types, name
            key = name + "".join(f"|{v}" for k, v in labels.items() if k != "server_id")
            series[key] = (types[name], labels, float(found[3]))
    return series


async def test_metrics_expose_the_monitoring_numbers(make_node: NodeFactory) -> None:
    node = await make_node(Config(max_pending=1024))
    sub = await node.client()
    await sub.send(w.sub(b"m.*", b"1") + w.sub(b"m.a", b"2"))
    await sub.flush()
    slow = await node.client()
    await slow.send(w.sub(b"huge", b"1"))
    await slow.flush()
    pub = await node.client()
    await pub.publish("m.a", b"1234", 4)
    await pub.publish("huge", b"h" * 2000)
    await pub.flush()
    assert len(await sub.flush()) == 8
    await node.get("/connz")

    reply = await node.get("/metrics")
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    series = parse_metrics(reply.body)
    broker = node.server.broker
    assert {labels["server_id"] for _, labels, _ in series.values()} == {broker.server_id}

    def value(key: str) -> float:
        return series[key][2]

    assert value("gnatsd_varz_connections") == 2
    assert value("gnatsd_varz_total_connections") == 3
    assert (value("gnatsd_varz_in_msgs"), value("gnatsd_varz_in_bytes")) == (5, 2016)
    assert (value("gnatsd_varz_out_msgs"), value("gnatsd_varz_out_bytes")) == (9, 2032)  # one dropped
    assert value("gnatsd_varz_subscriptions") == 2
    assert value("gnatsd_varz_slow_consumers") == 1
    assert value("gnatsd_varz_slow_consumer_stats_clients") == 1
    assert value("gnatsd_varz_max_pending") == 1024
    assert value("gnatsd_varz_start") == broker.start_ns // 10**6
    assert value("gnatsd_varz_http_req_stats_connz") == 1
    assert value(f"gnatsd_varz_version|{NATS_VERSION}") == 1
    assert (value("gnatsd_connz_num_connections"), value("gnatsd_connz_total")) == (2, 2)
    assert value("gnatsd_connz_subscriptions") == 2
    assert series["gnatsd_connz_in_msgs"] == ("counter", {"server_id": broker.server_id}, 5.0)
    assert (value("gnatsd_connz_out_msgs"), value("gnatsd_connz_out_bytes")) == (8, 32)
    assert value("gnatsd_subsz_num_subscriptions") == 2
    assert value("gnatsd_subsz_num_inserts") == 3
    assert value("gnatsd_subsz_num_removes") == 1
    assert value("gnatsd_routez_num_routes") == 0
    assert value("gnatsd_healthz_status") == 0
    assert value("gnatsd_healthz_status_value|ok") == 1
    assert series["gnatsd_varz_cpu"][0] == "gauge"


# -- running and stopping --------------------------------------------------------------------------


async def test_serve_monitoring_returns_once_shutdown_is_set() -> None:
    server = Server(Config())
    shutdown = trio.Event()
    idle: http.client.HTTPConnection | None = None

    def ask(conn: http.client.HTTPConnection) -> bytes:
        conn.request("GET", "/healthz")
        return conn.getresponse().read()

    try:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                port = await nursery.start(
                    partial(serve_monitoring, Assembled(server), "127.0.0.1", 0, shutdown=shutdown)
                )
                idle = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT)
                assert await trio.to_thread.run_sync(ask, idle) == b'{"status":"ok"}'
                shutdown.set()  # with that keep-alive connection still open
    finally:
        if idle is not None:
            idle.close()
    with pytest.raises(OSError, match="all attempts to connect"):
        await trio.open_tcp_stream("127.0.0.1", port)


async def test_run_node_serves_monitoring_on_the_port_it_reports(nursery: trio.Nursery) -> None:
    config = Config(host="127.0.0.1", port=0, http_host="127.0.0.1", http_port=0)
    handle = await nursery.start(run_node, config)
    assert handle.http_port
    doc = json.loads((await trio.to_thread.run_sync(_http_get, handle.http_port, "/varz")).body)
    assert (doc["server_id"], doc["http_port"]) == (handle.server.broker.server_id, handle.http_port)
    handle.shutdown()
