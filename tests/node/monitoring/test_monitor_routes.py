"""Route monitoring over real HTTP: /routez, the cluster half of /varz, and /metrics of a live mesh.

Nodes run in the test's nursery, each with its client, route and monitoring ports on 127.0.0.1 (free
ports); the first is the seed of the others, which find each other by gossip. Raw NATS clients make
interest and messages cross the routes, and what one node reports about a connection is checked
against what the node at its other end reports.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
import trio

from cluster.config import ClusterConfig
from node.config.options import Config
from node.nats.protocol import Msg
from node.nats.protocol import writer as w
from node.run.launch import NodeHandle
from tests.node.monitoring.test_monitor import GO_TIME, Node, parse_metrics
from tests.support import start_node

pytestmark = pytest.mark.timeout(60)

POOL = 2
"""Connections per peer: more than one, so every peer shows up in /routez several times."""
NAMES = ("alpha", "beta", "gamma")
PEERS = len(NAMES) - 1
WAIT = 20.0
"""Seconds any one wait for the mesh to change may take."""

ROUTE_INFO_KEYS = [
    "rid",
    "remote_id",
    "remote_name",
    "did_solicit",
    "is_configured",
    "ip",
    "port",
    "start",
    "last_activity",
    "rtt",
    "uptime",
    "idle",
    "pending_size",
    "in_msgs",
    "out_msgs",
    "in_bytes",
    "out_bytes",
    "subscriptions",
]


@attrs.frozen
class Member:
    """One node of the mesh: its handle (ports, route manager), and a client of its ports."""

    handle: NodeHandle
    view: Node

    @property
    def server_id(self) -> str:
        return self.handle.server.broker.server_id

    async def routes_to(self, peer: Member) -> list[dict[str, Any]]:
        """This node's /routez entries for its connections to ``peer``."""
        doc = await self.view.json("/routez")
        return [r for r in doc["routes"] if r["remote_id"] == peer.server_id]


async def poll_routez(
    member: Member, ready: Callable[[dict[str, Any]], bool], query: str = ""
) -> dict[str, Any]:
    """The first /routez document of ``member`` that ``ready`` accepts (asked every 50 ms, for at
    most ``WAIT`` seconds): links come up, and interest spreads, in their own time."""
    return await member.view.json_when("/routez" + query, ready, WAIT)


def routes_count(count: int) -> Callable[[dict[str, Any]], bool]:
    """A /routez document listing ``count`` connections."""
    return lambda doc: bool(doc["num_routes"] == count)


async def start_member(nursery: trio.Nursery, name: str, seed: Member | None = None) -> Member:
    """A node called ``name`` running in ``nursery``, joined to ``seed``'s cluster if one is given."""
    seeds = (f"nats://127.0.0.1:{seed.handle.cluster_port}",) if seed is not None else ()
    cluster = ClusterConfig(name="mesh", host="127.0.0.1", port=0, seeds=seeds, pool_size=POOL)
    # (no system account: the interest these tests count is their clients' alone)
    config = Config(server_name=name, http_port=0, cluster=cluster, no_system_account=True)
    handle = await start_node(nursery, config)
    assert handle.http_port is not None
    return Member(handle, Node(handle.server, handle.port, handle.http_port))


@pytest.fixture
async def mesh(nursery: trio.Nursery) -> AsyncIterator[list[Member]]:
    """Three nodes, fully meshed with ``POOL`` connections between every two of them."""
    alpha = await start_member(nursery, NAMES[0])
    members = [alpha, *[await start_member(nursery, name, alpha) for name in NAMES[1:]]]
    for member in members:
        await poll_routez(member, routes_count(POOL * PEERS))
    yield members
    for member in members:
        for client in member.view.clients:
            await trio.aclose_forcefully(client.stream)


async def test_routez_lists_every_pooled_connection_as_both_ends_see_it(mesh: list[Member]) -> None:
    seed = mesh[0]
    docs = {m.server_id: await m.view.json("/routez") for m in mesh}
    for member in mesh:
        doc = docs[member.server_id]
        assert list(doc) == ["server_id", "server_name", "now", "num_routes", "routes"]
        assert (doc["server_id"], doc["server_name"]) == (
            member.server_id,
            member.view.server.broker.server_name,
        )
        assert re.fullmatch(GO_TIME, doc["now"])
        routes = doc["routes"]
        assert doc["num_routes"] == len(routes) == POOL * PEERS
        assert [r["rid"] for r in routes] == sorted({r["rid"] for r in routes})
        for peer in mesh:
            if peer is member:
                continue
            links = [r for r in routes if r["remote_id"] == peer.server_id]
            assert len(links) == POOL
            for link in links:
                assert list(link) == ROUTE_INFO_KEYS  # no interest yet, so no lists
                assert link["remote_name"] == peer.view.server.broker.server_name
                # Only a node's connections to the seed it was given count as configured.
                assert link["is_configured"] is (member is not seed and peer is seed)
                assert link["ip"] == "127.0.0.1"
                # A dialed connection goes to the peer's route port; an accepted one comes from
                # wherever the peer dialed from.
                assert (link["port"] == peer.handle.cluster_port) is link["did_solicit"]
                assert re.fullmatch(GO_TIME, link["start"])
                assert re.fullmatch(GO_TIME, link["last_activity"])
                assert re.fullmatch(r"\d+(\.\d+)?(ns|µs|ms|s)", link["rtt"])
                assert re.fullmatch(r"\d+s", link["uptime"])
                assert re.fullmatch(r"\d+s", link["idle"])
                assert [link[key] for key in ROUTE_INFO_KEYS[-6:]] == [0] * 6  # pending, traffic, subs
            # Each connection was dialed by exactly one of its two ends.
            theirs = [
                r["did_solicit"]
                for r in docs[peer.server_id]["routes"]
                if r["remote_id"] == member.server_id
            ]
            assert sorted(link["did_solicit"] for link in links) == sorted(not s for s in theirs)


async def test_routez_shows_the_interest_and_the_messages_each_connection_carried(
    mesh: list[Member],
) -> None:
    alpha, beta, gamma = mesh
    subscriber = await alpha.view.client()
    await subscriber.send(w.sub(b"orders.>", b"1") + w.sub(b"jobs", b"2", b"workers"))
    await subscriber.flush()

    async def carrier(member: Member, query: str) -> dict[str, Any]:
        """The one connection from alpha that brought alpha's interest, once both entries came."""

        def from_alpha(doc: dict[str, Any]) -> list[dict[str, Any]]:
            return [link for link in doc["routes"] if link["remote_id"] == alpha.server_id]

        doc = await poll_routez(
            member, lambda doc: sum(link["subscriptions"] for link in from_alpha(doc)) == 2, query
        )
        links = from_alpha(doc)
        [found] = [link for link in links if link["subscriptions"]]  # one account, one connection
        assert found["subscriptions"] == 2
        for other in links:
            if other is not found:
                assert not {"subscriptions_list", "subscriptions_list_detail"} & set(other)
        return found

    for member in (beta, gamma):
        listed = await carrier(member, "?subs=1")
        assert listed["subscriptions_list"] == ["jobs", "orders.>"]
        assert "subscriptions_list_detail" not in listed
    detailed = await carrier(beta, "?subs=detail")
    assert detailed["subscriptions_list_detail"] == [
        {"account": "$G", "subject": "jobs", "qgroup": "workers"},
        {"account": "$G", "subject": "orders.>"},
    ]
    assert "subscriptions_list" not in detailed
    plain = await carrier(beta, "")
    assert list(plain) == ROUTE_INFO_KEYS
    assert (plain["out_msgs"], plain["out_bytes"]) == (0, 0)  # nothing published yet
    assert (await beta.routes_to(gamma))[0]["subscriptions"] == 0  # gamma has no subscribers

    publisher = await beta.view.client()
    await publisher.publish("orders.eu", b"0123456789", 5)
    await publisher.flush()
    received: list[Msg] = []
    with trio.fail_after(WAIT):
        while len(received) < 5:
            received += await subscriber.flush()
    assert [m.subject for m in received] == [b"orders.eu"] * 5

    # beta sent them on the connection alpha's interest for the account arrived on.
    sent = {link["rid"]: link for link in await beta.routes_to(alpha)}
    assert (sent[plain["rid"]]["out_msgs"], sent[plain["rid"]]["out_bytes"]) == (5, 50)
    assert sum(link["out_msgs"] for link in sent.values()) == 5
    assert sum(link["out_msgs"] + link["in_msgs"] for link in await beta.routes_to(gamma)) == 0
    # alpha took them in on one connection from beta: the other end of that one.
    [arrived] = [link for link in await alpha.routes_to(beta) if link["in_msgs"]]
    assert (arrived["in_msgs"], arrived["in_bytes"], arrived["out_msgs"]) == (5, 50, 0)
    assert arrived["did_solicit"] is not sent[plain["rid"]]["did_solicit"]


async def test_varz_and_metrics_report_the_cluster(mesh: list[Member]) -> None:
    alpha, beta, _ = mesh
    seeded = await beta.view.json("/varz")
    assert seeded["cluster"] == {
        "name": "mesh",
        "addr": "127.0.0.1",
        "cluster_port": beta.handle.cluster_port,
        "urls": [f"127.0.0.1:{alpha.handle.cluster_port}"],
        "pool_size": POOL,
    }
    assert list(seeded["cluster"]) == ["name", "addr", "cluster_port", "urls", "pool_size"]
    # nats-server counts every pooled connection as a route, and each peer once as a remote.
    assert (seeded["routes"], seeded["remotes"]) == (POOL * PEERS, PEERS)
    seed = await alpha.view.json("/varz")
    assert list(seed["cluster"]) == ["name", "addr", "cluster_port", "pool_size"]  # no routes given
    assert (seed["routes"], seed["remotes"]) == (POOL * PEERS, PEERS)

    series = parse_metrics((await beta.view.get("/metrics")).body)

    def value(key: str) -> float:
        return series[key][2]

    assert value("gnatsd_routez_num_routes") == value("gnatsd_varz_routes") == POOL * PEERS
    assert value("gnatsd_varz_remotes") == PEERS
    assert value("gnatsd_varz_cluster_pool_size") == POOL
    assert value("gnatsd_varz_cluster_name|mesh") == 1


async def test_a_peer_that_goes_away_leaves_routez_and_the_counts(nursery: trio.Nursery) -> None:
    alpha = await start_member(nursery, "alpha")
    beta = await start_member(nursery, "beta", alpha)
    async with trio.open_nursery() as doomed:
        gamma = await start_member(doomed, "gamma", alpha)
        for member in (alpha, beta, gamma):
            await poll_routez(member, routes_count(POOL * PEERS))
        doomed.cancel_scope.cancel()  # the node stops at once: its connections just end
    for member, other in ((alpha, beta), (beta, alpha)):
        doc = await poll_routez(member, routes_count(POOL))
        assert {link["remote_id"] for link in doc["routes"]} == {other.server_id}
        varz = await member.view.json("/varz")
        assert (varz["routes"], varz["remotes"]) == (POOL, 1)
