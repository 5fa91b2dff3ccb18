"""A node whose store is lost comes back empty under its own name: three ``pubmesh serve``
processes, writes acknowledged by two of them while the third is paused (so it lacks them), then
the store of one of the two deleted and the other SIGKILLed.

What must hold: the node back on an empty store votes for no one (``/raftz`` says it recovers), so
the lagging node cannot be elected with its vote and lead without the writes (plain Raft would let
it, and the writes would be overwritten everywhere once their last holder returned); once that
holder returns, it leads again, the emptied node catches up and its recovery ends, and every
acknowledged write is read back, with its ID, from every node's own replica.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from cluster.placement import layout
from tests.cluster.replication.jepsen import Node, cluster, keys_by_group, leaders, wait

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

NAMES = ("a", "b", "c")
WRITES = 40


def recovering(node: Node) -> bool | None:
    """Whether some group of ``node`` recovers from an empty store (None: no answer)."""
    groups = node.raftz()
    return None if groups is None else any(group["recovering"] for group in groups.values())


def leads(node: Node, group: str) -> bool:
    groups = node.raftz()
    return groups is not None and groups[group]["role"] == "leader"


def test_a_lost_store_costs_no_acknowledged_write(tmp_path: Path) -> None:
    plan = layout(NAMES, 3)
    with cluster(NAMES, tmp_path) as nodes:
        everyone = list(nodes.values())
        led = wait(lambda: leaders(everyone, len(plan.groups)), "every group to form")
        key = keys_by_group(plan, "s", 1)[0]
        group = plan.group_of(key.encode()).name
        holder = nodes[led[group]]
        lost, lagging = (node for node in everyone if node is not holder)

        lagging.pause()
        client = holder.redis()
        ids = [client.execute_command("XADD", key, "*", "n", n) for n in range(WRITES)]
        client.close()
        lost.kill()
        shutil.rmtree(lost.store)  # (its disk, gone: it comes back under its name, empty)
        lost.store.mkdir()
        holder.kill()
        lagging.resume()
        lost.start()
        wait(lambda: recovering(lost), "the emptied node to say it recovers")
        time.sleep(3.0)  # (some elections' worth: 0.5 to 1 s each)
        assert not leads(lagging, group), "the lagging node was elected without the writes"
        assert not leads(lost, group)
        assert recovering(lost)

        holder.start()
        wait(lambda: leaders(everyone, len(plan.groups)), "the holder to lead, the lost to recover")
        for node in everyone:
            client = node.redis()
            client.execute_command("READONLY")
            wait(lambda: client.xlen(key) == WRITES, f"{node.name}'s replica to hold every write")  # noqa: B023
            got = [entry[0] for entry in client.execute_command("XRANGE", key, "-", "+")]
            client.close()
            assert got == ids, node.name
        codes = {node.name: node.stop() for node in everyone}
    assert all(code == 0 for code in codes.values()), codes
