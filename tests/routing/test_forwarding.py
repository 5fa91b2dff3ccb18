"""Forwarding rules: one copy per link, no loops, one queue member per message, fair weights."""

import random
from collections import Counter
from collections.abc import Mapping

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from routing import (
    InterestTracker,
    Message,
    Origin,
    RemoteInterest,
    SubList,
    Subscription,
    plan_delivery,
    subject_matches,
)

G = "$G"


def local_list(*subs: Subscription) -> SubList:
    sl = SubList()
    for sub in subs:
        sl.insert(sub)
    return sl


def remote(*entries: tuple[str, str, str | None, int]) -> RemoteInterest[str]:
    ri: RemoteInterest[str] = RemoteInterest()
    for link, subject, queue, weight in entries:
        ri.apply_remote_sub(link, G, subject, queue, weight)
    return ri


def test_client_message_goes_everywhere_once_per_link() -> None:
    a, b = Subscription("foo.*"), Subscription("foo.bar")
    routes = remote(("r1", "foo.*", None, 1), ("r1", "foo.>", None, 1), ("r2", ">", None, 1))
    gateways = remote(("gwB", "foo.bar", None, 1))
    local, links = plan_delivery(
        Origin.CLIENT,
        local_list(a, b).match("foo.bar"),
        random.Random(1),
        routes=routes.match_remote(G, "foo.bar"),
        gateways=gateways.match_remote(G, "foo.bar"),
    )
    assert set(local) == {a, b}
    assert links == {"r1": (), "r2": (), "gwB": ()}


def test_route_message_stays_local() -> None:
    a = Subscription("foo")
    routes = remote(("r1", "foo", None, 1))
    gateways = remote(("gwB", "foo", None, 1))
    local, links = plan_delivery(
        Origin.ROUTE,
        local_list(a).match("foo"),
        random.Random(1),
        routes=routes.match_remote(G, "foo"),
        gateways=gateways.match_remote(G, "foo"),
    )
    assert list(local) == [a]
    assert links == {}


def test_gateway_message_reaches_routes_but_never_gateways() -> None:
    routes = remote(("r1", "foo", None, 1), ("r2", "foo", "q", 2))
    gateways = remote(("gwB", "foo", None, 1), ("gwC", "foo", "q", 1))
    _, links = plan_delivery(
        Origin.GATEWAY,
        SubList().match("foo"),
        random.Random(1),
        routes=routes.match_remote(G, "foo"),
        gateways=gateways.match_remote(G, "foo"),
        queues={"q"},
    )
    assert links == {"r1": (), "r2": ("q",)}


def test_routed_message_serves_only_named_groups_from_local_members() -> None:
    q1, q2 = Subscription("foo", "q1"), Subscription("foo", "q2")
    result = local_list(q1, q2).match("foo")
    rng = random.Random(1)
    assert list(plan_delivery(Origin.ROUTE, result, rng)[0]) == []
    assert list(plan_delivery(Origin.ROUTE, result, rng, queues=["q2"])[0]) == [q2]


def test_queue_group_only_remote_is_sent_to_the_link_holding_it() -> None:
    routes = remote(("r1", "foo", "q", 3))
    local, links = plan_delivery(
        Origin.CLIENT,
        SubList().match("foo"),
        random.Random(1),
        routes=routes.match_remote(G, "foo"),
    )
    assert local == ()
    assert links == {"r1": ("q",)}


def test_queue_weights_are_respected() -> None:
    member = Subscription("foo", "q")
    result = local_list(member).match("foo")
    routes = remote(("r1", "foo", "q", 3), ("r2", "foo", "q", 6)).match_remote(G, "foo")
    rng = random.Random(7)
    picks: Counter[str] = Counter()
    trials = 10_000
    for _ in range(trials):
        local, links = plan_delivery(Origin.CLIENT, result, rng, routes=routes)
        chosen = [link for link, queues in links.items() if "q" in queues]
        if local:
            chosen.append("local")
        assert len(chosen) == 1
        picks[chosen[0]] += 1
    for name, share in (("local", 0.1), ("r1", 0.3), ("r2", 0.6)):
        assert abs(picks[name] / trials - share) < 0.02, picks


@given(
    plain=st.integers(0, 3),
    groups=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_single_nodes_groups_are_served_as_anywhere(plain: int, groups: list[int], seed: int) -> None:
    """Without links, a client's message takes the quick path (no mapping made): every plain
    subscriber, then one member per group, picked from the same random draws as when the full
    rules run (an ``exclude`` that owns nothing sends it through them)."""
    subs = [Subscription("foo") for _ in range(plain)]
    subs += [Subscription("foo", f"q{g}") for g, size in enumerate(groups) for _ in range(size)]
    result = local_list(*subs).match("foo")
    links: Mapping[str, tuple[str, ...]]
    quick, links = plan_delivery(Origin.CLIENT, result, random.Random(seed))
    full, _ = plan_delivery(Origin.CLIENT, result, random.Random(seed), exclude=Taker())
    assert list(quick) == list(full)
    assert not links
    assert len(quick) == plain + len(groups)
    assert Counter(sub.queue for sub in quick if sub.queue) == {f"q{g}": 1 for g in range(len(groups))}


def test_group_served_in_cluster_is_not_sent_to_gateways() -> None:
    member = Subscription("foo", "q")
    gateways = remote(("gwB", "foo", "q", 1)).match_remote(G, "foo")
    for _ in range(50):
        local, links = plan_delivery(
            Origin.CLIENT,
            local_list(member).match("foo"),
            random.Random(),
            gateways=gateways,
        )
        assert list(local) == [member]
        assert links == {}


def test_remote_only_group_goes_to_the_preferred_gateway() -> None:
    gateways = remote(("gwB", "foo", "q", 1), ("gwC", "foo", "q", 1), ("gwD", "foo", None, 1))
    match = gateways.match_remote(G, "foo")
    rng = random.Random(1)
    _, links = plan_delivery(Origin.CLIENT, SubList().match("foo"), rng, gateways=match)
    assert links == {"gwD": (), "gwB": ("q",)}
    _, links = plan_delivery(
        Origin.CLIENT,
        SubList().match("foo"),
        rng,
        gateways=match,
        gateway_order=["gwD", "gwC", "gwB"],
    )
    assert links == {"gwD": (), "gwC": ("q",)}


class Taker:
    """A subscriber the forwarding rules only tell apart from another by identity."""

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        return True


def test_excluded_owner_gets_nothing() -> None:
    me, other = Taker(), Taker()
    mine, theirs = Subscription("foo", owner=me), Subscription("foo", owner=other)
    my_member = Subscription("foo", "q", owner=me)
    result = local_list(mine, theirs, my_member).match("foo")
    for seed in range(20):
        local = plan_delivery(Origin.CLIENT, result, random.Random(seed), exclude=me)[0]
        assert list(local) == [theirs]


# -- the rules together: a simulated super-cluster -------------------------------------------

Where = tuple[int, int]  # (cluster, node)


@attrs.define
class Net:
    """Nodes with local subscriptions, and the interest each node learned from its peers."""

    sizes: list[int]
    local: dict[Where, SubList]
    routes: dict[Where, RemoteInterest[Where]]
    gateways: dict[Where, RemoteInterest[Where]]

    @classmethod
    def build(cls, sizes: list[int], placed: list[tuple[Where, Subscription]]) -> "Net":
        nodes = [(c, n) for c, size in enumerate(sizes) for n in range(size)]
        local = {w: SubList() for w in nodes}
        node_interest = {w: InterestTracker() for w in nodes}
        cluster_interest = [InterestTracker(queue_weights=False) for _ in sizes]
        for where, sub in placed:
            local[where].insert(sub)
            node_interest[where].update(G, sub.subject, sub.queue)
            cluster_interest[where[0]].update(G, sub.subject, sub.queue)
        routes: dict[Where, RemoteInterest[Where]] = {w: RemoteInterest() for w in nodes}
        gateways: dict[Where, RemoteInterest[Where]] = {w: RemoteInterest() for w in nodes}
        for w in nodes:
            for peer in nodes:
                if peer[0] == w[0] and peer != w:
                    for ch in node_interest[peer].snapshot():
                        routes[w].apply_remote_sub(peer, G, ch.subject, ch.queue, ch.weight)
            for c in range(len(sizes)):
                if c != w[0]:
                    entry = (c, w[1] % sizes[c])  # the node of cluster c that w dials
                    for ch in cluster_interest[c].snapshot():
                        gateways[w].apply_remote_sub(entry, G, ch.subject, ch.queue, ch.weight)
        return cls(sizes, local, routes, gateways)

    def publish(self, source: Where, subject: str, rng: random.Random) -> Counter[Subscription]:
        got: Counter[Subscription] = Counter()
        work: list[tuple[Where, Origin, tuple[str, ...]]] = [(source, Origin.CLIENT, ())]
        hops = 0
        while work:
            where, origin, queues = work.pop()
            hops += 1
            assert hops <= 100, "message is looping"
            local, links = plan_delivery(
                origin,
                self.local[where].match(subject),
                rng,
                routes=self.routes[where].match_remote(G, subject),
                gateways=self.gateways[where].match_remote(G, subject),
                queues=queues,
            )
            got.update(local)
            for link, names in links.items():
                if link[0] == where[0]:
                    work.append((link, Origin.ROUTE, names))
                else:
                    work.append((link, Origin.GATEWAY, names))
        return got


PATTERNS = st.sampled_from(["a", "a.b", "a.*", "a.>", "*.b", ">", "b"])
PLACEMENT = st.tuples(
    st.tuples(st.integers(0, 2), st.integers(0, 2)),
    PATTERNS,
    st.none() | st.sampled_from(["q1", "q2"]),
)


@pytest.mark.timeout(60)
@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=3),
    st.lists(PLACEMENT, max_size=12),
    st.tuples(st.integers(0, 2), st.integers(0, 2)),
    st.sampled_from(["a", "a.b", "b", "c.b"]),
    st.integers(0, 1000),
)
def test_super_cluster_delivers_exactly_once(
    sizes: list[int],
    placements: list[tuple[Where, str, str | None]],
    source: Where,
    subject: str,
    seed: int,
) -> None:
    """Every matching plain subscriber once, every matching queue group once across all clusters."""
    nodes = [(c, n) for c, size in enumerate(sizes) for n in range(size)]
    placed = [
        (nodes[(c * 3 + n) % len(nodes)], Subscription(pattern, queue))
        for (c, n), pattern, queue in placements
    ]
    net = Net.build(sizes, placed)
    src = nodes[(source[0] * 3 + source[1]) % len(nodes)]
    got = net.publish(src, subject, random.Random(seed))
    matching = [sub for _, sub in placed if subject_matches(sub.subject, subject)]
    assert set(got) <= set(matching)
    for sub in matching:
        if sub.queue is None:
            assert got[sub] == 1, sub
    groups = {sub.queue for sub in matching if sub.queue is not None}
    for group in groups:
        assert sum(n for sub, n in got.items() if sub.queue == group) == 1, group
