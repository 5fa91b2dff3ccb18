"""A write whose client went away while it was pending, then replaced by another leader's entry:
three ``pubmesh serve`` processes; the leader of a key's group makes the change on its own keys
and proposes it while the other two are down, and the client closes its connection before any
answer (so no one awaits the proposal's outcome). The leader is then paused, the other two restart
on their stores and elect a successor, whose first (empty) entry takes the abandoned one's place,
then perhaps a write of its own; the old leader resumes.

What must hold: the old leader, finding its own uncommitted change replaced, rebuilds the group's
keys from the log on its own (no failed answer tells it to, nor, without a write after the
election, any entry with data), so its replica holds exactly what the others hold, and it takes
writes on those keys again.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import redis

from cluster.placement import layout
from tests.cluster.replication.jepsen import Node, cluster, keys_by_group, leaders, wait

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NAMES = ("a", "b", "c")


def replica(node: Node, key: str) -> list[bytes] | None:
    """The IDs of stream ``key`` in the node's own replica (None: no answer yet)."""
    client = node.redis(timeout=2.0)
    try:
        client.execute_command("READONLY")
        return [entry[0] for entry in client.execute_command("XRANGE", key, "-", "+")]
    except (OSError, redis.RedisError):
        return None
    finally:
        client.close()


def leader_among(nodes: list[Node], group: str) -> Node | None:
    """The node all of ``nodes`` name as ``group``'s leader, if one of them."""
    named = {status[group]["leader"] if (status := node.raftz()) else None for node in nodes}
    return next((node for node in nodes if named == {node.name}), None)


def abandon(node: Node, key: str) -> None:
    """Send an XADD and close the connection before its answer can come."""
    with socket.create_connection(("127.0.0.1", node.redis_port), timeout=5) as conn:
        conn.sendall(f"XADD {key} * n abandoned\r\n".encode())
        time.sleep(0.2)


@pytest.mark.parametrize("then_write", [True, False], ids=["then-a-write", "no-write"])
def test_an_abandoned_write_replaced_by_another_leader_is_taken_back(
    tmp_path: Path, then_write: bool
) -> None:
    plan = layout(NAMES, 3)
    # (no proposal times out on its own here: only the successor's entries undo the change)
    with cluster(NAMES, tmp_path, propose_timeout="30s") as nodes:
        everyone = list(nodes.values())
        led = wait(lambda: leaders(everyone, len(plan.groups)), "every group to form")
        key = keys_by_group(plan, "s", 1)[0]
        group = plan.group_of(key.encode()).name
        old = nodes[led[group]]
        others = [node for node in everyone if node is not old]
        client = old.redis()
        acked = [client.execute_command("XADD", key, "*", "n", n) for n in range(5)]
        client.close()
        wait(lambda: all(replica(node, key) == acked for node in everyone), "every replica")

        for node in others:
            node.kill()  # (not paused: what the leader sent before would wait in their sockets)
        abandon(old, key)  # (well inside the leader's election timeout: it still leads)
        held = wait(lambda: replica(old, key), "the old leader's replica")
        assert len(held) == len(acked) + 1, "the leader made the change before proposing it"
        old.pause()
        for node in others:
            node.start()  # (on their stores: without the abandoned write)
        successor = wait(lambda: leader_among(others, group), "the other two to elect a leader")
        wanted = list(acked)
        if then_write:
            client = successor.redis(timeout=10.0)
            wanted.append(client.execute_command("XADD", key, "*", "n", "replacing"))
            client.close()
        old.resume()

        for node in everyone:
            wait(lambda: replica(node, key) == wanted, f"{node.name}'s replica")  # noqa: B023
        wait(lambda: leaders(everyone, len(plan.groups)), "every group to have a leader")
        assert b"rebuilding its keys from the log" in (tmp_path / f"{old.name}.log").read_bytes()
        client = old.redis(timeout=10.0)
        after = client.execute_command("XADD", key, "*", "n", "after")
        client.close()
        for node in everyone:
            wait(lambda: replica(node, key) == [*wanted, after], f"{node.name} after")  # noqa: B023
        codes = {node.name: node.stop() for node in everyone}
    assert all(code == 0 for code in codes.values()), codes
