"""``/healthz?links=true``: a node reports itself unhealthy while it is cut off from its cluster (routed
to no majority of the nodes its seeds name) or from a configured cluster (no outbound gateway), for
real nodes on 127.0.0.1 that all share one list of seeds naming every node, themselves included."""

from __future__ import annotations

import json

import pytest
import trio

from cluster.config import ClusterConfig, GatewayConfig
from cluster.peer import Peer
from cluster.routes import RouteManager
from node.accounts.account import Account
from node.config.options import Config
from node.run.launch import NodeHandle
from pipeline.local import free_port
from tests.node.monitoring.test_monitor import Reply, _http_get
from tests.support import start_node, until

pytestmark = pytest.mark.timeout(60)

WAIT = 20.0


async def health(handle: NodeHandle, query: str = "?links=true&details=true") -> Reply:
    assert handle.http_port is not None
    return await trio.to_thread.run_sync(_http_get, handle.http_port, "/healthz" + query)


async def wait_health(handle: NodeHandle, status: int) -> dict[str, object]:
    """The first /healthz?links answer with ``status``."""
    with trio.fail_after(WAIT):
        while (reply := await health(handle)).status != status:  # noqa: ASYNC110 (seen only from outside)
            await trio.sleep(0.05)
    doc: dict[str, object] = json.loads(reply.body)
    return doc


def linked(routes: RouteManager[Account]) -> list[Peer[Account]]:
    return [peer for peer in routes.peers.values() if peer.slots]


def cluster_config(name: str, port: int, seeds: tuple[str, ...]) -> Config:
    cluster = ClusterConfig(
        name="c", host="127.0.0.1", port=port, seeds=seeds, ping_interval=0.2, reconnect_max=0.2
    )
    return Config(server_name=name, http_port=0, cluster=cluster)


async def test_a_node_is_unhealthy_only_when_cut_off_from_a_majority_of_its_cluster(
    nursery: trio.Nursery,
) -> None:
    ports = [free_port() for _ in range(3)]
    seeds = tuple(f"nats://127.0.0.1:{port}" for port in ports)
    nodes = [
        await start_node(nursery, cluster_config(f"n{i}", port, seeds)) for i, port in enumerate(ports)
    ]
    for node in nodes:
        assert await wait_health(node, 200) == {"status": "ok"}
        assert (await health(node, "")).status == 200  # (without the option: up is healthy)
    # Each node found itself among the seeds, stopped dialing it, and does not count it.
    await until(lambda: all(n.routes and n.routes.seed_ids.get(seeds[i]) for i, n in enumerate(nodes)))
    for i, node in enumerate(nodes):
        assert node.routes is not None
        assert node.routes.seed_ids[seeds[i]] == node.server.broker.server_id

    nodes[0].shutdown()  # one of three down: the other two are a majority, and healthy
    await nodes[0].finished.wait()
    await until(lambda: all(n.routes and len(linked(n.routes)) == 1 for n in nodes[1:]))
    for node in nodes[1:]:
        assert (await health(node)).status == 200

    nodes[1].shutdown()  # the last one is alone
    await nodes[1].finished.wait()
    doc = await wait_health(nodes[2], 503)
    problem = "routed to 0 of the 2 other nodes of cluster 'c': not a majority"
    assert doc == {
        "status": "unavailable",
        "status_code": 503,
        "error": problem,
        "errors": [{"type": "route", "error": problem}],
    }
    reply = await health(nodes[2], "?links=1")
    assert reply.status == 503
    assert "errors" not in json.loads(reply.body)  # (listed only with details, as there)
    assert (await health(nodes[2], "?links=maybe")).status == 400

    revived = await start_node(nursery, cluster_config("n0", ports[0], seeds))
    for node in (revived, nodes[2]):
        await wait_health(node, 200)


async def test_a_node_without_its_outbound_gateway_is_unhealthy(nursery: trio.Nursery) -> None:
    west_port = free_port()
    east = await start_node(
        nursery,
        Config(
            server_name="east",
            http_port=0,
            gateway=GatewayConfig(
                name="east",
                host="127.0.0.1",
                port=0,
                gateways=(("west", (f"nats://127.0.0.1:{west_port}",)),),
                reconnect_max=0.2,
            ),
        ),
    )
    doc = await wait_health(east, 503)
    assert doc["errors"] == [{"type": "gateway", "error": "no outbound gateway to cluster 'west'"}]
    west = await start_node(
        nursery,
        Config(
            server_name="west",
            http_port=0,
            gateway=GatewayConfig(name="west", host="127.0.0.1", port=west_port),
        ),
    )
    await wait_health(east, 200)
    await wait_health(west, 200)  # (west configures no gateway: nothing it must hold)
    west.shutdown()
    await wait_health(east, 503)
