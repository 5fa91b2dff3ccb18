"""Chaos, by Hypothesis: random faults and interest changes, then everything must heal exactly.

Each example runs a fresh harness in virtual time (a three-node cluster, or three clusters of two,
one and one nodes joined by gateways) through a random sequence of steps: subscribe and unsubscribe
anywhere (two accounts; plain, queue and Redis pattern subscriptions), cut, black-hole or slow a
pair of nodes (in one cluster or across), heal, kill a node, start it again. Then every fault is
healed and the harness must converge: each node's picture of each live peer's interest exactly that
peer's interest, each node's picture of each other cluster's interest exactly that cluster's,
nothing left from the dead. Finally every node publishes on every subject (one of them a channel
only Redis can name), and each must reach exactly the matching subscribers, once, and each queue
group exactly once in all.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.config import ClusterConfig, GatewayConfig
from pubmesh_testing.harness import (
    Cluster,
    Inbox,
    PatternInbox,
    SuperCluster,
    open_cluster,
    open_supercluster,
)
from routing import channel_subject, glob_match, subject_channel, subject_matches

NODES = ["n1", "n2", "n3"]
SUPER_NODES = ["east1", "east2", "west1", "south1"]
PATTERNS = ["a", "a.b", "a.*", "a.>", ">", "b"]
GLOBS = [b"a*", b"*b", b"?", b"c.[d]", b"[^a]*"]
"""Redis pattern subscriptions, for the channels below (one of them only Redis can name)."""
SUBJECTS = ["a", "a.b", "b", "c.d", channel_subject(b"a b").decode()]
ACCOUNTS = ["$G", "A"]


def steps(names: list[str]) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    node = st.sampled_from(names)
    pair = st.permutations(names).map(lambda p: (p[0], p[1]))
    step = st.one_of(
        st.tuples(st.just("sub"), node, st.sampled_from(PATTERNS), st.sampled_from([None, "q"]),
                  st.sampled_from(ACCOUNTS)),
        st.tuples(st.just("psub"), node, st.sampled_from(GLOBS), st.sampled_from(ACCOUNTS)),
        st.tuples(st.just("unsub"), st.integers(0, 50)),
        st.tuples(st.just("cut"), pair),
        st.tuples(st.just("blackhole"), pair),
        st.tuples(st.just("delay"), pair),
        st.tuples(st.just("heal"),),
        st.tuples(st.just("kill"), node),
        st.tuples(st.just("restart"), node),
        st.tuples(st.just("wait"), st.sampled_from([0.1, 1.0, 5.0])),
    )  # fmt: skip
    return st.lists(step, max_size=25)


Placed = tuple[str, str, Inbox | PatternInbox]  # node name, account, inbox
Harness = Cluster | SuperCluster


async def play(harness: Harness, names: list[str], steps: list[tuple[Any, ...]]) -> None:
    placed: list[Placed] = []
    for step in steps:
        await apply(harness, placed, step)
    harness.heal_all()
    for name in names:
        if not node(harness, name).alive:
            await cluster_of(harness, name).start_node(name)
    with trio.move_on_after(120):
        await harness.wait_converged()
    assert not harness.disagreements(), harness.disagreements()
    await check_delivery(harness, [p for p in placed if node(harness, p[0]).alive])


def node(harness: Harness, name: str) -> Any:
    return harness.node(name) if isinstance(harness, SuperCluster) else harness[name]


def cluster_of(harness: Harness, name: str) -> Cluster:
    return harness.cluster_of(name) if isinstance(harness, SuperCluster) else harness


async def apply(harness: Harness, placed: list[Placed], step: tuple[Any, ...]) -> None:
    kind = step[0]
    if kind == "sub":
        _, name, pattern, queue, account = step
        if node(harness, name).alive:
            inbox = node(harness, name).subscribe(pattern, queue, account=account)
            placed.append((name, account, inbox))
    elif kind == "psub":
        _, name, glob, account = step
        if node(harness, name).alive:
            placed.append((name, account, node(harness, name).psubscribe(glob, account=account)))
    elif kind == "unsub":
        live = [p for p in placed if node(harness, p[0]).alive]
        if live:
            name, account, inbox = live[step[1] % len(live)]
            node(harness, name).unsubscribe(inbox, account=account)
            placed.remove((name, account, inbox))
    elif kind in ("cut", "blackhole", "delay"):
        a, b = step[1]
        if kind == "cut":
            harness.network.cut(a, b)
        elif kind == "blackhole":
            harness.network.blackhole(a, b)
        else:
            harness.network.delay(a, b, 0.2)
    elif kind == "heal":
        harness.heal_all()
    elif kind == "kill":
        victim = node(harness, step[1])
        if victim.alive and len(cluster_of(harness, step[1]).nodes) > 1:
            await harness.kill(victim)
            placed[:] = [p for p in placed if p[0] != step[1]]
    elif kind == "restart":
        if not node(harness, step[1]).alive:
            await cluster_of(harness, step[1]).start_node(step[1])
    else:
        await trio.sleep(step[1])


async def check_delivery(cluster: Harness, placed: list[Placed]) -> None:
    for _, _, inbox in placed:
        inbox.messages.clear()
    sent = []
    for source in cluster.nodes:
        for account in ACCOUNTS:
            for subject in SUBJECTS:
                payload = f"{source.name}:{account}:{subject}".encode()
                source.publish(subject, payload, account=account)
                sent.append((account, subject, payload))
    # (A write that began while its path was slowed may still be waiting out the delay.)
    await trio.sleep(1)
    with trio.fail_after(30):
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
    for account, subject, payload in sent:
        matching = [inbox for _, acc, inbox in placed if acc == account and wants(inbox, subject)]
        got = {id(inbox): inbox.payloads.count(payload) for inbox in matching}
        for _, _, inbox in placed:
            if inbox not in matching:
                assert payload not in inbox.payloads, (payload, inbox)
        plain = [i for i in matching if queue_of(i) is None]
        assert all(got[id(i)] == 1 for i in plain), (payload, [(i, got[id(i)]) for i in plain])
        groups = Counter(queue_of(i) for i in matching if queue_of(i) is not None)
        for group in groups:
            delivered = sum(got[id(i)] for i in matching if queue_of(i) == group)
            assert delivered == 1, (payload, group, delivered)


def wants(inbox: Inbox | PatternInbox, subject: str) -> bool:
    if isinstance(inbox, PatternInbox):
        return glob_match(inbox.pattern, subject_channel(subject.encode()))
    return subject_matches(inbox.subscription.subject, subject)


def queue_of(inbox: Inbox | PatternInbox) -> str | None:
    return inbox.subscription.queue if isinstance(inbox, Inbox) else None


async def play_cluster(steps: list[tuple[Any, ...]]) -> None:
    config = ClusterConfig(name="chaos", ping_interval=0.5, ping_max=3)
    async with open_cluster(3, config=config) as cluster:
        await play(cluster, NODES, steps)


async def play_supercluster(steps: list[tuple[Any, ...]]) -> None:
    config = ClusterConfig(ping_interval=0.5, ping_max=3)
    gateway = GatewayConfig(name="", ping_interval=0.5, ping_max=3)
    sizes = {"east": 2, "west": 1, "south": 1}
    async with open_supercluster(sizes, config=config, gateway=gateway) as supercluster:
        await play(supercluster, SUPER_NODES, steps)


CHAOS_SETTINGS = settings(
    max_examples=int(os.environ.get("CHAOS_EXAMPLES", 60)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
"""A quick sample by default; set CHAOS_EXAMPLES for a long soak."""


@pytest.mark.slow
@pytest.mark.timeout(600)
@CHAOS_SETTINGS
@given(steps(NODES))
def test_the_cluster_heals_exactly_after_any_chaos(steps: list[tuple[Any, ...]]) -> None:
    trio.run(play_cluster, steps, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.slow
@pytest.mark.timeout(600)
@CHAOS_SETTINGS
@given(steps(SUPER_NODES))
def test_the_supercluster_heals_exactly_after_any_chaos(steps: list[tuple[Any, ...]]) -> None:
    trio.run(play_supercluster, steps, clock=trio.testing.MockClock(autojump_threshold=0))
