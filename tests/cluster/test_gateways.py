"""Gateways, on the in-process harness in virtual time: clusters joined into a super-cluster.

Interest-only forwarding (nothing crosses without interest, each interested cluster gets one copy),
cluster-wide interest, local-first queue groups, mapped replies, faults and healing, and the link
protocol's rules (direction, credentials, names).
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from cluster.config import ClusterConfig, GatewayConfig
from cluster.frames import MessageFrame, SubAdd, encode
from cluster.replies import short_hash
from node.config.options import AccountConfig, Config
from pubmesh_testing.harness import HarnessNode, SuperCluster, open_supercluster
from routing import Message, Origin, Subscription
from tests.cluster.impostor import Impostor, gateway_hello

CLUSTER = ClusterConfig(ping_interval=0.5, ping_max=3)
GATEWAY = GatewayConfig(name="", ping_interval=0.5, ping_max=3)

PLAIN = Config(no_system_account=True)
"""Nodes whose only interest is the tests' own (no system account announcing its requests)."""


async def converged(supercluster: SuperCluster, seconds: float = 30) -> None:
    with trio.fail_after(seconds):
        await supercluster.wait_converged()


async def settled() -> None:
    await trio.testing.wait_all_tasks_blocked(cushion=0.05)


def sent_to(node: HarnessNode, cluster: str) -> int:
    """Messages ``node`` has sent over its outbound link to ``cluster``."""
    assert node.gateways is not None
    link = node.gateways.remotes[cluster].outbound
    assert link is not None
    return link.out_msgs


class Responder:
    """A subscriber inside a node that answers every request at once, from that node."""

    def __init__(self, node: HarnessNode, subject: str, queue: str | None = None) -> None:
        self.node = node
        self.subscription = Subscription(subject, queue, owner=self)
        self.answered = 0
        node.broker.subscribe(node.broker.account("$G"), self.subscription)

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        assert msg.reply is not None
        assert not msg.reply.startswith(b"_GR_.")  # clients see the original
        self.answered += 1
        self.node.publish(msg.reply.decode(), b"re:" + msg.payload)
        return True


async def test_a_publish_reaches_every_cluster_once_per_subscriber(autojump_clock: MockClock) -> None:
    async with open_supercluster(
        {"east": 3, "west": 2, "south": 2}, config=CLUSTER, gateway=GATEWAY
    ) as sc:
        inboxes = [
            (node, node.subscribe(pattern))
            for cluster in sc.clusters
            for node, pattern in zip(cluster.nodes, ["orders.*", "orders.>", "orders.eu"], strict=False)
        ]
        inboxes += [(sc["west"].nodes[1], sc["west"].nodes[1].subscribe("orders.*"))]
        await converged(sc)
        for publisher in sc.nodes:
            publisher.publish("orders.eu", publisher.name.encode())
        await settled()
        for _, inbox in inboxes:
            assert sorted(inbox.payloads) == sorted(n.name.encode() for n in sc.nodes), inbox


async def test_nothing_crosses_toward_a_cluster_without_interest(autojump_clock: MockClock) -> None:
    async with open_supercluster(
        {"east": 2, "west": 2, "south": 1}, config=CLUSTER, gateway=GATEWAY
    ) as sc:
        e1, e2 = sc["east"].nodes
        w2 = sc["west"].nodes[1]
        inbox = w2.subscribe("wanted.*")
        await converged(sc)
        before = {(n, c): sent_to(n, c) for n in (e1, e2) for c in ("west", "south")}
        for i in range(100):
            e1.publish("unwanted.x", b"%d" % i)
            e2.publish("wanted.x", b"%d" % i)
        await settled()
        assert sent_to(e1, "west") == before[e1, "west"]
        assert sent_to(e2, "west") == before[e2, "west"] + 100  # one copy however many nodes want it
        assert sent_to(e1, "south") == before[e1, "south"]
        assert sent_to(e2, "south") == before[e2, "south"]
        assert len(inbox.messages) == 100


async def test_interest_is_announced_once_per_cluster_and_withdrawn_with_the_last(
    autojump_clock: MockClock,
) -> None:
    async with open_supercluster(
        {"east": 1, "west": 3}, config=CLUSTER, gateway=GATEWAY, node_config=PLAIN
    ) as sc:
        (e1,) = sc["east"].nodes
        w1, w2, w3 = sc["west"].nodes
        subs = [(w, w.subscribe("x")) for w in (w1, w2, w2, w3)]
        await converged(sc)
        west = e1.gateways.remotes["west"]  # type: ignore[union-attr]
        assert [(e.subject, e.weight) for e in e1.broker.gateway_interest.entries(west)] == [("x", 1)]
        for node, inbox in subs[:-1]:
            node.unsubscribe(inbox)
            await converged(sc)
            assert e1.broker.gateway_interest.weight(west, "$G", "x") == 1
        node, inbox = subs[-1]
        node.unsubscribe(inbox)
        await converged(sc)
        assert not list(e1.broker.gateway_interest.entries(west))


async def test_interest_learned_over_a_route_goes_when_the_route_does(autojump_clock: MockClock) -> None:
    async with open_supercluster(
        {"east": 1, "west": 2}, config=CLUSTER, gateway=GATEWAY, node_config=PLAIN
    ) as sc:
        (e1,) = sc["east"].nodes
        w2 = sc["west"].nodes[1]
        w2.subscribe("only.on.w2")
        await converged(sc)
        west = e1.gateways.remotes["west"]  # type: ignore[union-attr]
        assert e1.broker.gateway_interest.weight(west, "$G", "only.on.w2") == 1
        await sc["west"].kill(w2)
        await converged(sc)
        assert not list(e1.broker.gateway_interest.entries(west))


async def test_queue_groups_are_served_in_the_local_cluster_first(autojump_clock: MockClock) -> None:
    async with open_supercluster({"east": 2, "west": 2}, config=CLUSTER, gateway=GATEWAY) as sc:
        e1, e2 = sc["east"].nodes
        w1, w2 = sc["west"].nodes
        local = e2.subscribe("work", "q")
        remote = [w.subscribe("work", "q") for w in (w1, w2)]
        await converged(sc)
        for i in range(200):
            e1.publish("work", b"%d" % i)
        await settled()
        assert len(local.messages) == 200
        assert not any(r.messages for r in remote)
        e2.unsubscribe(local)  # the last local member: the group fails over to the other cluster
        await converged(sc)
        for i in range(200):
            e1.publish("work", b"%d" % i)
        await settled()
        assert sum(len(r.messages) for r in remote) == 200
        assert all(r.messages for r in remote)  # spread over west's members


async def test_a_group_only_served_remotely_goes_to_the_nearest_cluster(
    autojump_clock: MockClock,
) -> None:
    async with open_supercluster(
        {"east": 1, "west": 1, "south": 1}, config=CLUSTER, gateway=GATEWAY
    ) as sc:
        (e1,), (w1,), (s1,) = (c.nodes for c in sc.clusters)
        sc.delay(e1, w1, 0.05)  # west is far from east; south is near
        west, south = w1.subscribe("work", "q"), s1.subscribe("work", "q")
        await converged(sc)
        await trio.sleep(3)  # a few heartbeats: round trips measured
        for i in range(50):
            e1.publish("work", b"%d" % i)
        await settled()
        await trio.sleep(1)
        assert (len(south.messages), len(west.messages)) == (50, 0)
        s1.unsubscribe(south)
        await converged(sc)
        for i in range(50):
            e1.publish("work", b"%d" % i)
        await trio.sleep(1)
        assert len(west.messages) == 50


async def test_a_thousand_requests_to_another_cluster_lose_no_reply(autojump_clock: MockClock) -> None:
    async with open_supercluster({"east": 3, "west": 2}, config=CLUSTER, gateway=GATEWAY) as sc:
        e1, e2, e3 = sc["east"].nodes
        w2 = sc["west"].nodes[1]
        responder = Responder(w2, "service")
        await converged(sc)
        # East's routes are slow: its interest in each fresh inbox reaches west long after the request.
        for a, b in ((e1, e2), (e1, e3), (e2, e3)):
            sc.delay(a, b, 0.5)
        inboxes = []
        for i in range(1000):
            requester = (e1, e2, e3)[i % 3]
            inbox = requester.subscribe(f"_INBOX.{i}")
            requester.publish("service", b"%d" % i, reply=f"_INBOX.{i}")
            inboxes.append(inbox)
        with trio.fail_after(30):
            for i, inbox in enumerate(inboxes):
                assert await inbox.wait_for(1) == [(f"_INBOX.{i}".encode(), b"re:%d" % i)]
        assert responder.answered == 1000
        await trio.sleep(5)
        assert all(len(inbox.messages) == 1 for inbox in inboxes)  # and no reply twice
        assert all(n.gateways and not len(n.gateways.replies) for n in sc.nodes)  # mappings expire


async def test_a_mapped_reply_lands_on_the_requesters_node(autojump_clock: MockClock) -> None:
    async with open_supercluster({"east": 2, "west": 1}, config=CLUSTER, gateway=GATEWAY) as sc:
        e1, e2 = sc["east"].nodes
        (w1,) = sc["west"].nodes
        seen = w1.subscribe("ask")
        await converged(sc)
        e2.publish("ask", b"?", reply="_INBOX.me")
        await seen.wait_for(1)
        assert seen.replies == [b"_INBOX.me"]  # clients never see the mapped form
        mapped = w1.broker.replies._recent["$G"][b"_INBOX.me"][0]  # type: ignore[union-attr]
        assert mapped.startswith(b"_GR_." + short_hash("east") + b"." + short_hash(e2.server_id))
        inbox = e2.subscribe("_INBOX.me")
        other = e1.subscribe("_INBOX.me")  # interest elsewhere in the cluster gets it too, once
        w1.publish("_INBOX.me", b"!")  # before east's interest could have arrived
        with trio.fail_after(5):
            await inbox.wait_for(1)
            await other.wait_for(1)
        await settled()
        assert inbox.payloads == other.payloads == [b"!"]


async def test_mapped_subjects_for_other_clusters_or_nodes_go_nowhere(
    autojump_clock: MockClock,
) -> None:
    async with open_supercluster({"east": 1, "west": 1}, config=CLUSTER, gateway=GATEWAY) as sc:
        (e1,) = sc["east"].nodes
        everything = e1.subscribe(">")
        await converged(sc)
        account = e1.broker.account("$G")
        node = e1.broker
        for subject in (
            b"_GR_." + short_hash("west") + b"." + short_hash(e1.server_id) + b".x",
            b"_GR_." + short_hash("east") + b".AAAAAA.x",
            b"_GR_.short",
        ):
            assert not node.publish(account, Message(subject, None, None, b""), origin=Origin.GATEWAY)
        await settled()
        assert not everything.messages


async def test_a_cut_gateway_drops_its_interest_and_heals(autojump_clock: MockClock) -> None:
    async with open_supercluster({"east": 2, "west": 2}, config=CLUSTER, gateway=GATEWAY) as sc:
        e1, e2 = sc["east"].nodes
        w1, w2 = sc["west"].nodes
        inbox = w1.subscribe("x.>")
        await converged(sc)
        for west_node in (w1, w2):
            sc.cut(e1, west_node)  # e1 can reach no node of west
        await settled()
        west = e1.gateways.remotes["west"]  # type: ignore[union-attr]
        assert west.outbound is None
        assert not list(e1.broker.gateway_interest.entries(west))  # the slice went with the link
        e1.publish("x.1", b"lost")  # nowhere to send it: dropped, not queued
        e2.publish("x.1", b"via e2")
        await settled()
        assert inbox.payloads == [b"via e2"]
        sc.heal_all()
        await converged(sc)
        e1.publish("x.2", b"back")
        with trio.fail_after(5):
            await inbox.wait_for(2)
        assert inbox.payloads == [b"via e2", b"back"]


async def test_a_blackholed_gateway_is_noticed_and_healed(autojump_clock: MockClock) -> None:
    async with open_supercluster({"east": 1, "west": 1}, config=CLUSTER, gateway=GATEWAY) as sc:
        (e1,), (w1,) = sc["east"].nodes, sc["west"].nodes
        inbox = w1.subscribe("x")
        await converged(sc)
        sc.blackhole(e1, w1)
        await trio.sleep(5)  # heartbeats unanswered: the links are declared dead
        assert e1.gateways.remotes["west"].outbound is None  # type: ignore[union-attr]
        assert not list(e1.broker.gateway_interest.entries())
        w1.unsubscribe(inbox)
        again = w1.subscribe("y")
        sc.heal_all()
        await converged(sc)
        e1.publish("x", b"stale?")
        e1.publish("y", b"fresh")
        with trio.fail_after(5):
            await again.wait_for(1)
        assert not inbox.messages


async def test_accounts_stay_apart_across_gateways(autojump_clock: MockClock) -> None:
    accounts = Config(accounts=(AccountConfig("A"), AccountConfig("B")))
    async with open_supercluster(
        {"east": 1, "west": 1}, config=CLUSTER, gateway=GATEWAY, node_config=accounts
    ) as sc:
        (e1,), (w1,) = sc["east"].nodes, sc["west"].nodes
        a, b = w1.subscribe("x", account="A"), w1.subscribe("x", account="B")
        await converged(sc)
        e1.publish("x", b"for A", account="A")
        e1.publish("x", b"for B", account="B")
        e1.publish("x", b"for nobody")
        await settled()
        assert (a.payloads, b.payloads) == ([b"for A"], [b"for B"])


async def test_clusters_are_learned_from_the_links(autojump_clock: MockClock) -> None:
    """Only east is configured (with west1's URL); every node learns the rest."""
    remotes = {"east": {"west": ["nats://west1:7222"]}, "west": {}}
    # (A HELLO sent before its node's route formed lists only that node: what is known of a
    # cluster is added to, never replaced, whatever order the links form in.)
    async with open_supercluster(
        {"east": 2, "west": 2}, config=CLUSTER, gateway=GATEWAY, remotes=remotes
    ) as sc:
        await converged(sc)
        for node in sc.nodes:
            assert node.gateways is not None
            other = "west" if node.name.startswith("east") else "east"
            assert sorted(node.gateways.remotes[other].urls) == sorted(
                f"nats://{n.name}:7222" for n in sc[other].nodes
            )
        await sc["west"].start_node()  # a node joining later finds its way to every cluster
        await converged(sc)


async def test_a_third_cluster_is_discovered_through_the_others(autojump_clock: MockClock) -> None:
    async with open_supercluster({"east": 2, "west": 2}, config=CLUSTER, gateway=GATEWAY) as sc:
        await converged(sc)
        south = sc.add_cluster("south", remotes={"west": ["nats://west2:7222"]})
        await south.start_node()
        await south.start_node()
        await converged(sc)
        inbox = south.nodes[1].subscribe("z")
        await converged(sc)
        sc["east"].nodes[0].publish("z", b"from east, which was told nothing of south")
        with trio.fail_after(5):
            await inbox.wait_for(1)


# -- the link protocol -------------------------------------------------------------------------


async def talk_to_gateway(
    sc: SuperCluster, node: HarnessNode, as_: str, hello: bytes | None, *frames: bytes
) -> bytes:
    """Dial ``node``'s gateway port as an impostor (``kind`` or ``kind/secret``), authenticate and
    send ``hello`` if given, then send raw frames; what came back."""
    kind, _, secret = as_.partition("/")
    stream = await sc.network.dialer("impostor")(node.name, 7222)
    impostor = Impostor(stream, kind, secret)
    if hello is not None:
        await impostor.authenticate(hello)
    await impostor.send(*frames)
    received = await impostor.drain()
    await impostor.aclose()
    return received


@pytest.mark.parametrize(
    ("impostor", "hello", "frames", "answer"),
    [
        ("gateway", gateway_hello("other"), [encode(SubAdd("$G", "x", None, 1))],
         b"interest on an inbound gateway link"),
        ("gateway", gateway_hello("east"), [], b'gateway "east" is this cluster'),
        ("gateway/guess", gateway_hello("other"), [], b"gateway credential refused"),
        ("route", gateway_hello("other"), [], b"expected a gateway"),
        ("gateway", None, [encode(MessageFrame("$G", Message(b"x", None, None, b""), ()))],
         b"the first frame must be HELLO"),
    ],
)  # fmt: skip
async def test_broken_gateway_protocol_closes_only_that_link(
    autojump_clock: MockClock,
    caplog: pytest.LogCaptureFixture,
    impostor: str,
    hello: bytes | None,
    frames: list[bytes],
    answer: bytes,
) -> None:
    caplog.set_level(logging.INFO, logger="pubmesh")
    async with open_supercluster({"east": 1, "west": 1}, config=CLUSTER, gateway=GATEWAY) as sc:
        (e1,), (w1,) = sc["east"].nodes, sc["west"].nodes
        inbox = w1.subscribe("ok")
        await converged(sc)
        received = await talk_to_gateway(sc, e1, impostor, hello, *frames)
        assert answer in received
        e1.publish("ok", b"still fine")
        with trio.fail_after(5):
            await inbox.wait_for(1)
        assert not sc.disagreements()


async def test_a_message_sent_the_wrong_way_is_a_protocol_error(autojump_clock: MockClock) -> None:
    """An impostor that accepts east's outbound link and sends it a message gets an ERR."""
    async with open_supercluster({"east": 1}, config=CLUSTER, gateway=GATEWAY) as sc:
        (e1,) = sc["east"].nodes
        listener = sc.network.listen("fake", ("fake", 7222))
        assert e1.gateways is not None
        e1.gateways.learn({"fake": ("nats://fake:7222",)})
        with trio.fail_after(10):
            stream = await listener.accept()
        impostor = Impostor(stream, "gateway", listener=True)
        assert await impostor.authenticate(gateway_hello("fake")) is not None
        await impostor.send(encode(MessageFrame("$G", Message(b"x", None, None, b""), ())))
        received = await impostor.drain()
        assert b"a message on a link that carries none this way" in received


async def test_a_gateway_of_another_name_at_a_configured_url_is_refused(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pubmesh")
    async with open_supercluster({"east": 1, "west": 1}, config=CLUSTER, gateway=GATEWAY) as sc:
        (e1,) = sc["east"].nodes
        assert e1.gateways is not None
        e1.gateways.learn({"north": ("nats://west1:7222",)})  # wrong: that is west
        await trio.sleep(3)
        assert e1.gateways.remotes["north"].outbound is None
        assert any('expected gateway "north", reached "west"' in r.getMessage() for r in caplog.records)
        await converged(sc)


async def test_a_cluster_only_heard_of_is_forgotten_if_never_reached(autojump_clock: MockClock) -> None:
    """News of a cluster nobody can reach is dialed with growing pauses, then forgotten."""
    async with open_supercluster({"east": 1}, config=CLUSTER, gateway=GATEWAY) as sc:
        (e1,) = sc["east"].nodes
        assert e1.gateways is not None
        e1.gateways.learn({"ghost": ("nats://ghost:7222",)})
        assert "ghost" in e1.gateways.remotes
        await trio.sleep(600)
        assert "ghost" not in e1.gateways.remotes
