"""Chaos, by Hypothesis: random faults and interest changes, then the cluster must heal exactly.

Each example runs a fresh three-node harness cluster in virtual time through a random sequence of
steps: subscribe and unsubscribe anywhere (two accounts, plain and queue), cut, black-hole or slow a
pair of nodes, heal, kill a node, start it again. Then every fault is healed and the cluster must
converge: each node's picture of each live peer's interest exactly that peer's interest, nothing
left from the dead. Finally every node publishes on every subject, and each must reach exactly the
matching subscribers, once, and each queue group exactly once across the whole cluster.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.config import ClusterConfig
from cluster.harness import Cluster, Inbox, open_cluster
from routing import subject_matches

NODES = ["n1", "n2", "n3"]
PATTERNS = ["a", "a.b", "a.*", "a.>", ">", "b"]
SUBJECTS = ["a", "a.b", "b", "c.d"]
ACCOUNTS = ["$G", "A"]

node = st.sampled_from(NODES)
pair = st.tuples(node, node).filter(lambda p: p[0] != p[1])
STEP = st.one_of(
    st.tuples(st.just("sub"), node, st.sampled_from(PATTERNS), st.sampled_from([None, "q"]),
              st.sampled_from(ACCOUNTS)),
    st.tuples(st.just("unsub"), st.integers(0, 50)),
    st.tuples(st.just("cut"), pair),
    st.tuples(st.just("blackhole"), pair),
    st.tuples(st.just("delay"), pair),
    st.tuples(st.just("heal"),),
    st.tuples(st.just("kill"), node),
    st.tuples(st.just("restart"), node),
    st.tuples(st.just("wait"), st.sampled_from([0.1, 1.0, 5.0])),
)  # fmt: skip

Placed = tuple[str, str, Inbox]  # node name, account, inbox


async def play(steps: list[tuple[Any, ...]]) -> None:
    config = ClusterConfig(name="chaos", ping_interval=0.5, ping_max=3)
    async with open_cluster(3, config=config) as cluster:
        placed: list[Placed] = []
        for step in steps:
            await apply(cluster, placed, step)
        cluster.heal_all()
        for name in NODES:
            if not cluster[name].alive:
                await cluster.start_node(name)
        with trio.move_on_after(120):
            await cluster.wait_converged()
        assert not cluster.disagreements(), cluster.disagreements()
        await check_delivery(cluster, [p for p in placed if cluster[p[0]].alive])


async def apply(cluster: Cluster, placed: list[Placed], step: tuple[Any, ...]) -> None:
    kind = step[0]
    if kind == "sub":
        _, name, pattern, queue, account = step
        if cluster[name].alive:
            placed.append((name, account, cluster[name].subscribe(pattern, queue, account=account)))
    elif kind == "unsub":
        live = [p for p in placed if cluster[p[0]].alive]
        if live:
            name, account, inbox = live[step[1] % len(live)]
            cluster[name].unsubscribe(inbox, account=account)
            placed.remove((name, account, inbox))
    elif kind in ("cut", "blackhole", "delay"):
        a, b = step[1]
        if kind == "cut":
            cluster.network.cut(a, b)
        elif kind == "blackhole":
            cluster.network.blackhole(a, b)
        else:
            cluster.network.delay(a, b, 0.2)
    elif kind == "heal":
        cluster.heal_all()
    elif kind == "kill":
        if cluster[step[1]].alive and len(cluster.nodes) > 1:
            await cluster.kill(cluster[step[1]])
            placed[:] = [p for p in placed if p[0] != step[1]]
    elif kind == "restart":
        if not cluster[step[1]].alive:
            await cluster.start_node(step[1])
    else:
        await trio.sleep(step[1])


async def check_delivery(cluster: Cluster, placed: list[Placed]) -> None:
    for _, _, inbox in placed:
        inbox.messages.clear()
    sent = []
    for source in cluster.nodes:
        for account in ACCOUNTS:
            for subject in SUBJECTS:
                payload = f"{source.name}:{account}:{subject}".encode()
                source.publish(subject, payload, account=account)
                sent.append((account, subject, payload))
    with trio.fail_after(30):
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
    for account, subject, payload in sent:
        matching = [
            inbox for _, acc, inbox in placed
            if acc == account and subject_matches(inbox.subscription.subject, subject)
        ]  # fmt: skip
        got = {id(inbox): inbox.payloads.count(payload) for inbox in matching}
        for _, _, inbox in placed:
            if inbox not in matching:
                assert payload not in inbox.payloads, (payload, inbox.subscription)
        plain = [i for i in matching if i.subscription.queue is None]
        assert all(got[id(i)] == 1 for i in plain), (
            payload,
            [(i.subscription, got[id(i)]) for i in plain],
        )
        groups = Counter(i.subscription.queue for i in matching if i.subscription.queue is not None)
        for group in groups:
            delivered = sum(got[id(i)] for i in matching if i.subscription.queue == group)
            assert delivered == 1, (payload, group, delivered)


@pytest.mark.timeout(600)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, max_size=25))
def test_the_cluster_heals_exactly_after_any_chaos(steps: list[tuple[Any, ...]]) -> None:
    trio.run(play, steps, clock=trio.testing.MockClock(autojump_threshold=0))
