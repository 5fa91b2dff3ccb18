"""Routes and gateways over TLS between real nodes on 127.0.0.1: both ends present certificates
from one CA and check the other's, from the first byte of the connection.

Certificates come from ``deploy/make-certs`` (a second run into another directory makes a CA no
node trusts). Messages are carried between nats-py clients in plain text on the client ports.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from cluster.config import ClusterConfig, GatewayConfig
from node.config.options import Config
from node.run.launch import NodeHandle
from tests.certs import Certs, make_certs
from tests.cluster import test_real_gateways
from tests.cluster.test_real_cluster import knows, meshed
from tests.cluster.test_real_gateways import linked, url
from tests.support import Box, connect, eventually, in_asyncio, start_node, until

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 0.5
ROUTES = ClusterConfig(name="tls", host="127.0.0.1", port=0, ping_interval=0.5, ping_max=3)
GATEWAYS = GatewayConfig(name="east", host="127.0.0.1", port=0, ping_interval=0.5, ping_max=3)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"), "n1", "n2", "n3")


@pytest.fixture(scope="module")
def strangers(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """Certificates from a CA the others do not trust (which trusts only itself)."""
    return make_certs(tmp_path_factory.mktemp("strangers"), "n2")


async def route_node(
    nursery: trio.Nursery, certs: Certs, name: str, seed: NodeHandle | None = None
) -> NodeHandle:
    seeds = (url(seed.cluster_port),) if seed is not None else ()
    routes = ROUTES.evolve(seeds=seeds, tls=certs.tls(name, timeout=TIMEOUT))
    return await start_node(nursery, Config(server_name=name, cluster=routes))


async def crosses(sender: NodeHandle, receiver: NodeHandle, ready: Callable[[], bool]) -> list[bytes]:
    """What a subscriber on ``receiver`` gets of ten messages published on ``sender`` once
    ``ready`` (the subscriber's interest has reached ``sender``)."""

    async def scenario() -> list[bytes]:
        box = Box()
        sub = await connect(receiver)
        await sub.subscribe("over.tls", cb=box.take)
        await sub.flush()
        await eventually(ready)
        pub = await connect(sender)
        for i in range(10):
            await pub.publish("over.tls", b"%d" % i)
        await pub.flush()
        await box.wait_for(10)
        await pub.close()
        await sub.close()
        return box.data

    return await in_asyncio(scenario)


async def test_a_message_crosses_a_tls_route(nursery: trio.Nursery, certs: Certs) -> None:
    n1 = await route_node(nursery, certs, "n1")
    n2 = await route_node(nursery, certs, "n2", seed=n1)
    n3 = await route_node(nursery, certs, "n3", seed=n1)  # meets n2 by gossip, dials it over TLS
    await until(lambda: all(meshed(n, 3) for n in (n1, n2, n3)))
    assert await crosses(n2, n3, knows(n2, "over.tls")) == [b"%d" % i for i in range(10)]


async def test_a_node_from_another_ca_is_refused_both_ways(
    nursery: trio.Nursery, certs: Certs, strangers: Certs
) -> None:
    dialed = await route_node(nursery, strangers, "n2")
    n1 = await route_node(nursery, certs, "n1", seed=dialed)  # n1 dials an intruder
    dialing = await route_node(nursery, strangers, "n2", seed=n1)  # and an intruder dials n1
    await trio.sleep(1.5)  # several dials each way, every one refused
    for node in (n1, dialed, dialing):
        assert node.routes is not None
        assert not any(p.slots for p in node.routes.peers.values())
    n2 = await route_node(nursery, certs, "n2", seed=n1)  # while a trusted node joins as usual
    await until(lambda: meshed(n1, 2) and meshed(n2, 2))


async def test_a_route_connection_that_never_handshakes_is_dropped(
    nursery: trio.Nursery, certs: Certs
) -> None:
    n1 = await route_node(nursery, certs, "n1")
    assert n1.cluster_port is not None
    silent = await trio.open_tcp_stream("127.0.0.1", n1.cluster_port)
    plain = await trio.open_tcp_stream("127.0.0.1", n1.cluster_port)
    started = trio.current_time()
    await plain.send_all(b"CONNECT {}\r\n")  # plain text on a TLS route port
    with trio.fail_after(5):
        assert await plain.receive_some() == b""
        assert await silent.receive_some() == b""
    assert trio.current_time() - started >= TIMEOUT * 0.9
    await silent.aclose()
    await plain.aclose()
    n2 = await route_node(nursery, certs, "n2", seed=n1)
    await until(lambda: meshed(n1, 2) and meshed(n2, 2))


async def test_a_route_dialer_without_a_certificate_is_refused(
    nursery: trio.Nursery, certs: Certs
) -> None:
    n1 = await route_node(nursery, certs, "n1")
    assert n1.cluster_port is not None
    tcp = await trio.open_tcp_stream("127.0.0.1", n1.cluster_port)
    stream = trio.SSLStream(tcp, certs.client_context(), server_hostname="127.0.0.1")
    with trio.fail_after(5):
        try:
            await stream.do_handshake()  # (with TLS 1.3 the client's side of it completes)
            answer = await stream.receive_some()  # and the refusal arrives here
        except trio.BrokenResourceError:
            answer = b""
    assert answer == b""  # not even the HELLO of a route
    await tcp.aclose()


async def test_a_message_crosses_a_tls_gateway(nursery: trio.Nursery, certs: Certs) -> None:
    east = GATEWAYS.evolve(tls=certs.tls("n1", timeout=TIMEOUT))
    e1 = await start_node(nursery, Config(server_name="n1", gateway=east))
    west = GATEWAYS.evolve(
        name="west", gateways=(("east", (url(e1.gateway_port),)),), tls=certs.tls("n2", timeout=TIMEOUT)
    )
    w1 = await start_node(nursery, Config(server_name="n2", gateway=west))
    await until(lambda: linked(e1, "west", inbound=1) and linked(w1, "east", inbound=1))
    assert await crosses(e1, w1, test_real_gateways.knows(e1, "over.tls")) == [
        b"%d" % i for i in range(10)
    ]


async def test_a_gateway_from_another_ca_is_refused(
    nursery: trio.Nursery, certs: Certs, strangers: Certs
) -> None:
    east = GATEWAYS.evolve(tls=certs.tls("n1", timeout=TIMEOUT))
    e1 = await start_node(nursery, Config(server_name="n1", gateway=east))
    west = GATEWAYS.evolve(
        name="west",
        gateways=(("east", (url(e1.gateway_port),)),),
        tls=strangers.tls("n2", timeout=TIMEOUT),
    )
    w1 = await start_node(nursery, Config(server_name="n2", gateway=west))
    await trio.sleep(1.5)
    assert not linked(w1, "east")
    assert e1.gateways is not None
    assert not e1.gateways.remotes.get("west")
