"""A command forwarded to a group's leader that dies before answering is answered
``-CLUSTERDOWN`` as soon as the forwarding node learns of the new leader, not after the whole
proposal timeout, so its client's next write goes to the new leader."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import redis
from redis.exceptions import ClusterDownError

from cluster.placement import layout
from tests.cluster.replication.jepsen import Node, keys_by_group, leaders, wait

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

NAMES = ("a", "b", "c")


def test_a_forwarded_write_whose_leader_dies_is_answered_once_another_leads(tmp_path: Path) -> None:
    plan = layout(NAMES, 3)
    keys = keys_by_group(plan, "s", 1)
    nodes = [Node(name, tmp_path) for name in NAMES]
    for node in nodes:
        # (a proposal timeout far longer than the client's: only the new leader can answer it)
        node.configure(NAMES, [n.route_port for n in nodes], "50ms", propose_timeout="300s")
        node.start()
    try:
        led = wait(lambda: leaders(nodes, len(plan.groups)), "every group to elect a leader")
        group = plan.groups[0]
        key = next(k for k in keys if plan.group_of(k.encode()) == group)
        victim = next(n for n in nodes if n.name == led[group.name])
        through = next(n for n in nodes if n is not victim)
        replies: list[object] = []
        done = threading.Event()

        def write() -> None:
            with through.redis(timeout=60) as client:
                while not done.is_set():
                    try:
                        replies.append(client.execute_command("XADD", key, "*", "f", "v"))
                    except redis.ResponseError as exc:
                        replies.append(exc)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        wait(lambda: len(replies) > 20 or None, "writes through a follower")
        victim.kill()
        killed_at = len(replies)
        wait(
            lambda: any(isinstance(r, bytes) for r in replies[killed_at:]) or None,
            "a write after the kill",
            45,
        )
        done.set()
        writer.join(60)
        assert not writer.is_alive()
        refused = [r for r in replies if not isinstance(r, bytes)]
        assert all(isinstance(r, ClusterDownError) for r in refused), refused
    finally:
        for node in nodes:
            if node.process is not None:
                node.stop()
