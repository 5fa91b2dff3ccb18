"""Routes, on the in-process harness in virtual time: mesh, interest, forwarding, faults, healing.

Every async test takes ``autojump_clock``: heartbeats, backoff and partitions play out instantly and
the same way every time. Waits are still bounded (in virtual seconds) so a bug fails, not hangs.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from cluster.config import ClusterConfig
from cluster.frames import Err, Gossip, MessageFrame, PeerInfo, SubAdd, encode
from cluster.link import Link
from cluster.peer import fnv1a32
from cluster.routes import RouteManager
from node.accounts.account import Account
from node.config.options import AccountConfig, Config
from pubmesh_testing.harness import Cluster, HarnessNode, open_cluster
from routing import Message, Origin
from tests.cluster.impostor import Impostor, route_hello

CONFIG = ClusterConfig(name="test", ping_interval=0.5, ping_max=3)


async def converged(cluster: Cluster, seconds: float = 30) -> None:
    with trio.fail_after(seconds):
        await cluster.wait_converged()


async def eventually(predicate: Callable[[], bool], step: float = 0.05) -> None:
    """Wait (in virtual time; bound it with ``fail_after``) until ``predicate()`` holds."""
    while not predicate():  # noqa: ASYNC110 (a condition on state no event announces)
        await trio.sleep(step)


def registered(node: HarnessNode, other: HarnessNode) -> dict[int | str, Link[Account]]:
    peer = node.routes.peers[other.server_id]
    return dict(peer.slots)


async def test_a_full_mesh_forms_from_one_seed(autojump_clock: MockClock) -> None:
    async with open_cluster(4, config=CONFIG) as cluster:
        await converged(cluster)
        for x in cluster.nodes:
            assert len(x.routes.peers) == 3
            for y in cluster.nodes:
                if x is not y:
                    assert sorted(registered(x, y)) == [0, 1, 2]  # the pool, every slot once


async def test_both_ends_agree_on_every_pooled_connection(autojump_clock: MockClock) -> None:
    async with open_cluster(3, config=CONFIG) as cluster:
        await converged(cluster)
        for x in cluster.nodes:
            for y in cluster.nodes:
                if x is y:
                    continue
                for slot, link in registered(x, y).items():
                    other = registered(y, x)[slot]
                    assert link.solicited != other.solicited  # one dialed, the other accepted
                    if min(x.server_id, y.server_id) == x.server_id:
                        assert link.solicited or slot == 0  # the lower id dials (slot 0 may be a seed)


async def test_a_message_reaches_each_matching_subscriber_once(autojump_clock: MockClock) -> None:
    async with open_cluster(3, config=CONFIG) as cluster:
        a, b, c = cluster.nodes
        exact, wild, tail, other = (
            b.subscribe("orders.eu"),
            c.subscribe("orders.*"),
            c.subscribe(">"),
            a.subscribe("invoices"),
        )
        local = a.subscribe("orders.>")
        await converged(cluster)
        for i in range(20):
            assert a.publish("orders.eu", b"%d" % i)
        with trio.fail_after(5):
            for inbox in (exact, wild, tail, local):
                await inbox.wait_for(20)
        await trio.testing.wait_all_tasks_blocked()
        for inbox in (exact, wild, tail, local):
            assert inbox.payloads == [b"%d" % i for i in range(20)]  # once each, in order
        assert other.messages == []


async def test_no_message_crosses_a_route_without_interest(autojump_clock: MockClock) -> None:
    async with open_cluster(2, config=CONFIG) as cluster:
        a, _ = cluster.nodes
        await converged(cluster)
        assert not a.publish("nobody.home")
        await trio.testing.wait_all_tasks_blocked()
        assert sum(link.out_msgs for link in a.routes.links) == 0


async def test_queue_groups_get_each_message_once_cluster_wide_weighted_by_members(
    autojump_clock: MockClock,
) -> None:
    async with open_cluster(3, config=CONFIG) as cluster:
        a, b, c = cluster.nodes
        members = [a.subscribe("jobs", "workers")] + [b.subscribe("jobs", "workers") for _ in range(3)]
        await converged(cluster)
        total = 2000
        for i in range(total):
            c.publish("jobs", b"%d" % i)
        await trio.testing.wait_all_tasks_blocked()
        got = sorted(int(p) for m in members for p in m.payloads)
        assert got == list(range(total))  # exactly one member each
        share_b = sum(len(m.messages) for m in members[1:]) / total
        assert 0.70 < share_b < 0.80  # b has 3 of the 4 members


async def test_a_routed_message_serves_only_the_named_group_and_never_loops(
    autojump_clock: MockClock,
) -> None:
    async with open_cluster(3, config=CONFIG) as cluster:
        _, b, c = cluster.nodes
        inbox_b, inbox_c = b.subscribe("x"), c.subscribe("x")
        await converged(cluster)
        # A route's message goes to local subscribers only: c must not relay what b sends it.
        msg = Message(b"x", None, None, b"via-route")
        b.broker.publish(b.broker.account("$G"), msg, origin=Origin.ROUTE)
        await trio.testing.wait_all_tasks_blocked()
        assert inbox_b.payloads == [b"via-route"]
        assert inbox_c.payloads == []


async def test_accounts_stay_apart_across_routes(autojump_clock: MockClock) -> None:
    accounts = Config(accounts=(AccountConfig("A"), AccountConfig("B")))
    async with open_cluster(2, config=CONFIG, node_config=accounts) as cluster:
        a, b = cluster.nodes
        in_a, in_b = b.subscribe("shared", account="A"), b.subscribe("shared", account="B")
        await converged(cluster)
        a.publish("shared", b"for A", account="A")
        with trio.fail_after(5):
            await in_a.wait_for(1)
        await trio.testing.wait_all_tasks_blocked()
        assert in_b.messages == []


async def test_interest_follows_subscribe_and_unsubscribe(autojump_clock: MockClock) -> None:
    async with open_cluster(2, config=CONFIG) as cluster:
        a, b = cluster.nodes
        await converged(cluster)
        first, second = b.subscribe("t"), b.subscribe("t")
        queue = [b.subscribe("t", "q") for _ in range(3)]
        await converged(cluster)
        b.unsubscribe(first)
        b.unsubscribe(queue[0])
        await converged(cluster)  # still interested (second), queue weight now 2
        assert ("$G", "t", "q", 2) in b.local_interest()
        b.unsubscribe(second)
        for inbox in queue[1:]:
            b.unsubscribe(inbox)
        await converged(cluster)
        assert not a.broker.route_interest.has_remote_interest("$G", "t")


async def test_rapid_unsubscribe_resubscribe_keeps_interest(autojump_clock: MockClock) -> None:
    """The reordering that lost interest in nats-server (#8233) cannot happen: changes go out in
    order, on one connection per account."""
    async with open_cluster(2, config=CONFIG) as cluster:
        a, b = cluster.nodes
        await converged(cluster)
        for _ in range(50):
            inbox = b.subscribe("svc")
            b.unsubscribe(inbox)
        last = b.subscribe("svc")
        await converged(cluster)
        a.publish("svc", b"still there")
        with trio.fail_after(5):
            await last.wait_for(1)


async def test_a_cut_drops_the_peers_interest_and_healing_restores_it(autojump_clock: MockClock) -> None:
    async with open_cluster(3, config=CONFIG) as cluster:
        a, b, c = cluster.nodes
        inbox = c.subscribe("data.>")
        await converged(cluster)
        cluster.cut(a, c)
        await trio.testing.wait_all_tasks_blocked()
        assert not a.broker.route_interest.has_remote_interest("$G", "data.x")
        assert not a.publish("data.x", b"lost")  # at most once: nobody reachable wants it
        assert b.broker.route_interest.has_remote_interest("$G", "data.x")  # b-c unaffected
        cluster.heal(a, c)
        await converged(cluster)
        a.publish("data.x", b"back")
        with trio.fail_after(5):
            await inbox.wait_for(1)
        assert inbox.payloads == [b"back"]


async def test_a_partition_is_detected_by_silence(autojump_clock: MockClock) -> None:
    async with open_cluster(2, config=CONFIG) as cluster:
        a, b = cluster.nodes
        b.subscribe("p")
        await converged(cluster)
        cluster.blackhole(a, b)  # TCP stays open; only heartbeats can tell
        start = trio.current_time()
        with trio.fail_after(10):
            await eventually(lambda: not registered(a, b) and not registered(b, a))
        assert trio.current_time() - start <= CONFIG.ping_interval * (CONFIG.ping_max + 2)
        assert not a.broker.route_interest.has_remote_interest("$G", "p")
        cluster.heal_all()
        await converged(cluster)


async def test_a_dead_node_disappears_and_a_new_one_takes_its_place(autojump_clock: MockClock) -> None:
    async with open_cluster(3, config=CONFIG) as cluster:
        a, _, c = cluster.nodes
        c.subscribe("c.things")
        await converged(cluster)
        await cluster.kill(c)
        await converged(cluster)
        assert not a.broker.route_interest.has_remote_interest("$G", "c.things")
        new_c = await cluster.start_node("n3")
        inbox = new_c.subscribe("c.things")
        await converged(cluster)
        assert new_c.server_id != c.server_id
        assert c.server_id not in a.routes.peers  # forgotten once its address answered as another
        a.publish("c.things", b"hello again")
        with trio.fail_after(5):
            await inbox.wait_for(1)


async def test_dropping_one_pooled_connection_drops_only_its_accounts(autojump_clock: MockClock) -> None:
    names = [f"acct{i}" for i in range(12)]
    node_config = Config(accounts=tuple(AccountConfig(n) for n in names))
    async with open_cluster(2, config=CONFIG, node_config=node_config) as cluster:
        a, b = cluster.nodes
        for name in names:
            b.subscribe("news", account=name)
        await converged(cluster)
        link = registered(a, b)[1]
        on_slot = {n for n in names if fnv1a32(n) % CONFIG.pool_size == 1}
        assert on_slot
        assert on_slot != set(names)
        link.close("test: dropping one pooled connection", flush=False)
        await trio.testing.wait_all_tasks_blocked()  # both ends noticed; the redial waits its turn
        for name in names:
            assert a.broker.route_interest.has_remote_interest(name, "news") == (name not in on_slot)
        await converged(cluster)  # redialed, snapshot for that slot's accounts resent
        assert all(a.broker.route_interest.has_remote_interest(n, "news") for n in names)


async def test_a_large_interest_snapshot_goes_in_batches(autojump_clock: MockClock) -> None:
    # (no system account: the snapshot counted is the test's own interest)
    async with open_cluster(1, config=CONFIG, node_config=Config(no_system_account=True)) as cluster:
        (a,) = cluster.nodes
        for i in range(5000):
            a.subscribe(f"s.{i}")
        b = await cluster.start_node()
        await converged(cluster, 60)
        frames = sum(link.out_msgs for link in registered(a, b).values())
        assert frames == 0  # snapshots are interest frames, not messages
        assert b.broker.route_interest.count(b.routes.peers[a.server_id]) == 5000


async def test_simultaneous_dials_leave_one_connection_per_slot(autojump_clock: MockClock) -> None:
    async with open_cluster(1, config=CONFIG) as cluster:
        (a,) = cluster.nodes
        # b seeds a and a learns b at once; whoever dials each slot, one connection survives.
        b = await cluster.start_node(seeds=(f"nats://{a.name}:6222",))
        a.routes._learn(PeerInfo(b.server_id, b.name, f"nats://{b.name}:6222"))
        await converged(cluster)
        for x, y in ((a, b), (b, a)):
            assert len(registered(x, y)) == CONFIG.pool_size
        await trio.sleep(5)  # and it stays that way: no duel of redials
        assert len(a.routes.links) == len(b.routes.links) == CONFIG.pool_size


async def test_a_node_of_another_cluster_is_refused(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pubmesh")
    async with open_cluster(1, config=CONFIG) as cluster:
        (a,) = cluster.nodes
        cluster._config = ClusterConfig(name="other", ping_interval=0.5, ping_max=3)
        stranger = await cluster.start_node("x")
        await trio.sleep(2)
        assert not a.routes.peers
        assert not stranger.routes.peers
        refusals = [r.getMessage() for r in caplog.records if "cluster name mismatch" in r.getMessage()]
        # Both sides read the other's HELLO at once, so each refuses, saying why.
        assert any('this is "test", the peer "other"' in m for m in refusals)
        assert any('this is "other", the peer "test"' in m for m in refusals)


async def test_a_wrong_route_credential_is_refused(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pubmesh")
    secret = ClusterConfig(name="test", secret="s3cret", ping_interval=0.5, ping_max=3)
    async with open_cluster(1, config=secret) as cluster:
        (a,) = cluster.nodes
        cluster._config = ClusterConfig(name="test", secret="guess", ping_interval=0.5, ping_max=3)
        await cluster.start_node("x")
        await trio.sleep(2)
        assert not a.routes.peers
        assert any("route credential refused" in r.getMessage() for r in caplog.records)


async def talk_to_routes(
    cluster: Cluster, node: HarnessNode, *frames: bytes, hello: bytes | None = None
) -> bytes:
    """Dial ``node``'s route port as an impostor, authenticate and send ``hello`` if given, then
    send raw frames; what came back."""
    stream = await cluster.network.dialer("impostor")(node.name, 6222)
    impostor = Impostor(stream, "route")
    if hello is not None:
        assert await impostor.authenticate(hello) is not None
    await impostor.send(*frames)
    received = await impostor.drain()
    await impostor.aclose()
    return received


async def test_garbage_on_a_route_closes_only_that_link(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pubmesh")
    async with open_cluster(2, config=CONFIG) as cluster:
        a, b = cluster.nodes
        inbox = b.subscribe("ok")
        await converged(cluster)
        answer = await talk_to_routes(cluster, a, b"\xc1\xc1\xc1", hello=route_hello("Z" * 56))
        assert b"protocol error" in answer
        answer = await talk_to_routes(cluster, a, encode(SubAdd("$G", "before.hello", None, 1)))
        assert b"before the handshake" in answer
        assert any("Route protocol error" in r.getMessage() for r in caplog.records)
        a.publish("ok", b"still fine")
        with trio.fail_after(5):
            await inbox.wait_for(1)


async def test_a_message_for_a_bad_subject_from_a_peer_does_no_harm(autojump_clock: MockClock) -> None:
    async with open_cluster(1, config=CONFIG) as cluster:
        (a,) = cluster.nodes
        inbox = a.subscribe(">")
        await talk_to_routes(
            cluster,
            a,
            encode(SubAdd("$G", "bad..subject", None, 1)),
            encode(MessageFrame("$G", Message(b"a..b", None, None, b"x"), ())),
            encode(Err("bye")),
            hello=route_hello("Y" * 56),
        )
        assert inbox.messages == []  # an empty token matches nothing, not even ">"


async def test_route_manager_dials_nothing_while_alone(autojump_clock: MockClock) -> None:
    async with open_cluster(1, config=CONFIG) as cluster:
        (a,) = cluster.nodes
        await trio.sleep(10)
        assert isinstance(a.routes, RouteManager)
        assert a.routes.links == []
        assert a.routes.peers == {}


def test_fnv1a32_matches_the_reference_values() -> None:
    # FNV-1a test vectors.
    assert fnv1a32("") == 0x811C9DC5
    assert fnv1a32("a") == 0xE40C292C
    assert fnv1a32("foobar") == 0xBF9CF968


def test_account_slots_spread() -> None:
    counts = Counter(fnv1a32(f"account-{i}") % 3 for i in range(300))
    assert min(counts.values()) > 60


async def test_a_pinned_account_has_a_connection_of_its_own(autojump_clock: MockClock) -> None:
    pinned = ClusterConfig(name="test", ping_interval=0.5, ping_max=3, pinned_accounts=("VIP",))
    node_config = Config(accounts=(AccountConfig("VIP"), AccountConfig("other")))
    async with open_cluster(2, config=pinned, node_config=node_config) as cluster:
        a, b = cluster.nodes
        vip, other = b.subscribe("news", account="VIP"), b.subscribe("news", account="other")
        await converged(cluster)
        assert sorted(registered(a, b), key=str) == [0, 1, 2, "VIP"]
        vip_link = registered(a, b)["VIP"]
        assert vip_link.accounts == {"VIP"}  # the account's interest came over its own connection
        a.publish("news", b"for VIP", account="VIP")
        with trio.fail_after(5):
            await vip.wait_for(1)
        assert vip_link.out_msgs == 1
        vip_link.close("test: dropping the pinned connection", flush=False)
        await trio.testing.wait_all_tasks_blocked()
        assert not a.broker.route_interest.has_remote_interest("VIP", "news")
        assert a.broker.route_interest.has_remote_interest("other", "news")
        await converged(cluster)
        a.publish("news", b"again", account="VIP")
        with trio.fail_after(5):
            await vip.wait_for(2)
        assert other.messages == []


async def test_peers_only_heard_of_are_dialed_a_few_times_then_forgotten(
    autojump_clock: MockClock,
) -> None:
    """A registered peer names peers that do not exist: each is dialed (on one connection, with
    growing pauses) a bounded number of times, then forgotten; the real peer stays."""
    async with open_cluster(2, config=CONFIG) as cluster:
        a, b = cluster.nodes
        await converged(cluster)
        stream = await cluster.network.dialer("impostor")(a.name, 6222)
        impostor = Impostor(stream, "route")
        # ("0..." sorts below every server id: the fake peers are a's to dial, the impostor is not.)
        named = tuple(PeerInfo(f"z{i:03d}", f"z{i}", f"nats://ghost{i}:6222") for i in range(40))
        assert await impostor.authenticate(route_hello("0" * 56, peers=named)) is not None
        await impostor.send(encode(Gossip(list(named[:5]))))
        with trio.fail_after(5):
            await eventually(lambda: all(p.id in a.routes.peers for p in named))
        await impostor.aclose()
        assert all(key[1] == 0 for key in a.routes._dialing if key[0].startswith("z"))
        with trio.fail_after(600):
            await eventually(lambda: not any(p.startswith("z") for p in a.routes.peers), step=1.0)
        assert b.server_id in a.routes.peers
        assert not any(key[0].startswith("z") for key in a.routes._dialing)
