"""Attacks on the route and gateway ports of real nodes on 127.0.0.1, each answered on its own link
while the node keeps serving its clients.

The attacker is a raw TCP connection (``Impostor``): without the secret it learns nothing but a
nonce; with it (a peer gone bad) it cannot crash the node, make it dial without end, create
accounts without bound, or make it allocate for what a header merely announces.
"""

from __future__ import annotations

import contextlib
import gc
import os

import msgpack
import pytest
import trio
from nats.aio.msg import Msg

from cluster.config import ClusterConfig, GatewayConfig
from cluster.frames import (
    MAX_PEERS,
    Challenge,
    Err,
    Gateways,
    Gossip,
    MessageFrame,
    PeerInfo,
    Snapshot,
    SubAdd,
    encode,
)
from cluster.routes import MAX_UNMET_PEERS
from node.config.options import Config
from node.run.launch import NodeHandle
from routing import Message
from tests.cluster.impostor import Impostor, frames_in, peers, route_hello
from tests.support import connect, eventually, in_asyncio, start_node, until

pytestmark = pytest.mark.timeout(60)

SECRET = "s3cret-Route-Key"
ROUTES = ClusterConfig(
    name="guarded", host="127.0.0.1", port=0, secret=SECRET, ping_interval=0.5, ping_max=3
)
GATEWAYS = GatewayConfig(
    name="guarded", host="127.0.0.1", port=0, secret=SECRET, ping_interval=0.5, ping_max=3
)


async def start_pair(nursery: trio.Nursery) -> tuple[NodeHandle, NodeHandle]:
    """Two nodes of one cluster, joined, each with gateways: plenty for a leak to show."""
    a = await start_node(nursery, Config(server_name="alpha", cluster=ROUTES, gateway=GATEWAYS))
    seeds = (f"nats://127.0.0.1:{a.cluster_port}",)
    b = await start_node(
        nursery,
        Config(server_name="bravo", cluster=ROUTES.evolve(seeds=seeds), gateway=GATEWAYS),
    )
    await until(lambda: a.routes is not None and any(p.slots for p in a.routes.peers.values()))
    return a, b


async def dial(port: int | None, kind: str, secret: str = SECRET) -> Impostor:
    assert port is not None
    return Impostor(await trio.open_tcp_stream("127.0.0.1", port), kind, secret)


async def serves(node: NodeHandle) -> None:
    """A nats-py client of ``node`` gets an answer to a request (from another client of it)."""

    async def scenario() -> bytes:
        responder, requester = await connect(node), await connect(node)

        async def echo(msg: Msg) -> None:
            await msg.respond(b"alive:" + msg.data)

        await responder.subscribe("canary", cb=echo)
        await responder.flush()
        await eventually(lambda: subscribed(node, "canary"))
        reply = await requester.request("canary", b"hi", timeout=5)
        await responder.close()
        await requester.close()
        return reply.data

    assert await in_asyncio(scenario) == b"alive:hi"


def subscribed(node: NodeHandle, subject: str) -> bool:
    """Whether a client of ``node`` subscribed to ``subject`` (a PONG can come back before the
    node has applied a SUB sent ahead of it: waiting for that is not what these tests are about)."""
    return bool(node.server.broker.accounts["$G"].match(subject.encode())[0].plain)


def rss() -> int:
    """This process's resident memory in bytes (the nodes run in it)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- 1. the secret, and everything else, stays with the node until the peer proves itself --------


async def test_a_wrong_secret_learns_nothing(nursery: trio.Nursery) -> None:
    a, b = await start_pair(nursery)
    secrets = [SECRET, a.server.broker.server_id, b.server.broker.server_id, "alpha", "bravo",
               "guarded", str(a.cluster_port), str(b.cluster_port), str(a.gateway_port),
               str(b.gateway_port), "nats://"]  # fmt: skip
    for port, kind in ((a.cluster_port, "route"), (a.gateway_port, "gateway")):
        for attempt in ("guess", ""):
            impostor = await dial(port, kind, attempt)
            assert await impostor.authenticate(route_hello("Z" * 56, "guarded")) is None
            received = await impostor.drain()
            await impostor.aclose()
            frames = frames_in(received)
            assert [type(f) for f in frames] == [Challenge, Err], frames
            assert frames[1] == Err(f"{kind} credential refused")
            for secret in secrets:
                assert secret.encode() not in received, (kind, secret)
        impostor = await dial(port, kind)  # says nothing: still hears nothing but a nonce
        received = await impostor.drain(1.0)
        await impostor.aclose()
        assert [type(f) for f in frames_in(received)] == [Challenge]
        assert not any(secret.encode() in received for secret in secrets)
    await serves(a)


async def test_a_reflected_proof_is_refused(nursery: trio.Nursery) -> None:
    """The node's own proof, sent back on the same link, does not pass for the dialer's."""
    a = await start_node(nursery, Config(server_name="alpha", cluster=ROUTES))
    impostor = await dial(a.cluster_port, "route", "")
    challenge = await impostor.next_frame()
    assert isinstance(challenge, Challenge)
    await impostor.send(encode(challenge))  # its own nonce back: a listener would now prove...
    received = await impostor.drain()
    assert b"PROOF" not in received  # ...but a listener proves nothing before the dialer has
    await impostor.aclose()
    await serves(a)


# -- 2. HELLO fields are typed ----------------------------------------------------------------------


@pytest.mark.parametrize("peers_field", [None, 7, "x", [None], [{"id": 1}], {"a": "b"}])
async def test_a_hello_with_bad_peers_closes_only_that_link(
    nursery: trio.Nursery, peers_field: object
) -> None:
    a = await start_node(nursery, Config(server_name="alpha", cluster=ROUTES))
    impostor = await dial(a.cluster_port, "route")
    fields = {"kind": "route", "id": "Z" * 56, "name": "z", "cluster": "guarded",
              "url": "nats://127.0.0.1:1", "pool_size": 3, "slot": 0, "peers": peers_field}  # fmt: skip
    assert await impostor.authenticate(msgpack.packb(["HELLO", fields])) is not None
    received = await impostor.drain()
    await impostor.aclose()
    assert b"protocol error" in received
    assert a.routes is not None
    assert not a.routes.peers
    await serves(a)


async def test_a_gateway_hello_with_bad_fields_closes_only_that_link(nursery: trio.Nursery) -> None:
    a = await start_node(nursery, Config(server_name="alpha", gateway=GATEWAYS))
    for bad in ({"urls": None}, {"gateways": ["x"]}, {"gateways": {"c": [1]}}, {"id": 5}):
        impostor = await dial(a.gateway_port, "gateway")
        fields = {"kind": "gateway", "id": "I" * 56, "name": "i", "gateway": "other",
                  "url": "nats://127.0.0.1:1"} | bad  # fmt: skip
        assert await impostor.authenticate(msgpack.packb(["HELLO", fields])) is not None
        assert b"protocol error" in await impostor.drain()
        await impostor.aclose()
    assert a.gateways is not None
    assert "other" not in a.gateways.remotes
    await serves(a)


# -- 3. gossip: only from registered peers, bounded, and unmet peers are given up -------------------


async def test_gossip_before_the_handshake_is_refused(nursery: trio.Nursery) -> None:
    a = await start_node(nursery, Config(server_name="alpha", cluster=ROUTES))
    impostor = await dial(a.cluster_port, "route", "guess")
    await impostor.send(encode(Gossip(list(peers(10)))))
    assert b"before the handshake" in await impostor.drain()
    await impostor.aclose()
    assert a.routes is not None
    assert not a.routes.peers


async def test_too_many_peers_in_one_frame_are_refused(nursery: trio.Nursery) -> None:
    a = await start_node(nursery, Config(server_name="alpha", cluster=ROUTES))
    impostor = await dial(a.cluster_port, "route")
    assert await impostor.authenticate(route_hello("Z" * 56, "guarded")) is not None
    lots = [PeerInfo(f"p{i}", f"p{i}", f"nats://127.0.0.1:{i + 1}") for i in range(MAX_PEERS + 44)]
    await impostor.send(encode(Gossip(lots)))
    assert b"protocol error" in await impostor.drain()
    await impostor.aclose()
    assert a.routes is not None
    assert not [peer for peer in a.routes.peers if peer.startswith("p")]
    await serves(a)


async def test_peers_heard_of_are_bounded_and_dialed_once_each(nursery: trio.Nursery) -> None:
    """A registered peer names far more peers than a node keeps: the node keeps a bounded number
    unmet, dials each on one connection only, and keeps serving."""
    # The impostor's id sorts first, so the node does not own (or dial) the impostor's own slots.
    a = await start_node(nursery, Config(server_name="alpha", cluster=ROUTES))
    assert a.routes is not None
    impostor = await dial(a.cluster_port, "route")
    assert (
        await impostor.authenticate(route_hello("0" * 56, "guarded", peers=peers(200, "h"))) is not None
    )
    for batch in range(1, 4):
        await impostor.send(encode(Gossip(list(peers(200, f"g{batch}", 1 + 200 * batch)))))
    await until(lambda: len(a.routes.peers) > MAX_UNMET_PEERS)  # type: ignore[union-attr]
    await trio.sleep(0.5)
    unmet = [p for p in a.routes.peers.values() if not p.met]
    assert len(unmet) == MAX_UNMET_PEERS
    # (the impostor's "0000..." id sorts below the node's, so its slots are not the node's to dial)
    assert len(a.routes._dialing) <= MAX_UNMET_PEERS
    await impostor.aclose()
    await serves(a)


async def test_gateway_news_from_a_stranger_is_ignored(nursery: trio.Nursery) -> None:
    a = await start_node(nursery, Config(server_name="alpha", cluster=ROUTES, gateway=GATEWAYS))
    impostor = await dial(a.cluster_port, "route", "guess")
    await impostor.send(encode(Gateways({"evil": ("nats://127.0.0.1:1",)})))
    assert b"before the handshake" in await impostor.drain()
    await impostor.aclose()
    assert a.gateways is not None
    assert "evil" not in a.gateways.remotes
    await serves(a)


# -- 4. accounts links may create are capped ---------------------------------------------------------


async def test_a_route_cannot_create_accounts_without_bound(nursery: trio.Nursery) -> None:
    routes = ROUTES.evolve(max_accounts=50)
    a = await start_node(nursery, Config(server_name="alpha", cluster=routes))
    assert a.routes is not None
    before = len(a.server.broker.accounts)
    impostor = await dial(a.cluster_port, "route")
    assert await impostor.authenticate(route_hello("0" * 56, "guarded")) is not None
    frames = [encode(MessageFrame(f"acc{i}", Message(b"x", None, None, b""), ())) for i in range(500)]
    frames += [encode(SubAdd(f"sub{i}", "x", None, 1)) for i in range(500)]
    frames += [encode(Snapshot(f"snap{i}", [("x", None, 1)])) for i in range(500)]
    await impostor.send(b"".join(frames))
    await until(lambda: a.routes is not None and a.routes._refused_accounts == 1450)
    assert len(a.server.broker.accounts) <= before + 50
    assert len(a.routes.link_accounts) == 50
    assert len({e.account for e in a.server.broker.route_interest.entries()}) <= 50
    assert not a.routes.admits("one-more")
    assert a.routes.admits("$G")  # an account the node has is always fine
    await impostor.aclose()
    await serves(a)


# -- 5. decoded size is bounded, before and after the handshake ------------------------------------


async def test_a_huge_header_before_the_handshake_costs_nothing(nursery: trio.Nursery) -> None:
    """The attack that used to grow a node by over a gigabyte: an array header announcing 60
    million elements, then 16 MB of small items, on a route and on a gateway port."""
    a = await start_node(nursery, Config(server_name="alpha", cluster=ROUTES, gateway=GATEWAYS))
    gc.collect()
    before = rss()
    for port, kind in ((a.cluster_port, "route"), (a.gateway_port, "gateway")):
        impostor = await dial(port, kind)
        try:
            await impostor.send(b"\xdd\x03\x93\x87\x00")
            for _ in range(256):
                await impostor.send(b"\x01" * 65536)
        except trio.BrokenResourceError:
            pass  # refused and closed mid-way, as it should be
        received = await impostor.drain()
        await impostor.aclose()
        assert b"protocol error" in received
    grown = rss() - before
    assert grown < 32 * 1024 * 1024, grown
    await serves(a)


async def test_a_deep_or_wide_frame_after_the_handshake_is_refused(nursery: trio.Nursery) -> None:
    a = await start_node(nursery, Config(server_name="alpha", cluster=ROUTES))
    for attack in (b"\x91" * 100_000, b"\xdd\x03\x93\x87\x00" + b"\x01" * 100_000,
                   b"\xdf\x00\x10\x00\x00" + b"\x01" * 100_000):  # fmt: skip
        impostor = await dial(a.cluster_port, "route")
        assert await impostor.authenticate(route_hello("0" * 56, "guarded")) is not None
        with contextlib.suppress(trio.BrokenResourceError):
            await impostor.send(attack)
        assert b"protocol error" in await impostor.drain()
        await impostor.aclose()
    await serves(a)


async def test_a_silent_stranger_is_closed(nursery: trio.Nursery) -> None:
    a = await start_node(nursery, Config(server_name="alpha", cluster=ROUTES))
    impostor = await dial(a.cluster_port, "route")
    with trio.fail_after(10):
        received = await impostor.drain(8.0)
    await impostor.aclose()
    assert Err("handshake timeout") in frames_in(received)
