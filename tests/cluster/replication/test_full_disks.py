"""Replicated keys on disks that fill up: three ``pubmesh serve`` processes, each with its store on a
small tmpfs of its own, writers on every node, and the disks filled to the last byte one after the
other (one node's, then a second's: no majority can save) and emptied again, the last one alone.

What must hold: no node stops; the full disks are noticed (``/raftz`` names a disk error) and writes
are refused meanwhile (a disk that is full to the last page may still take a few appends into the
room its files' last pages leave: those are saved, and may be acknowledged); once there is room
again writes are acknowledged again without any restart; and after every node is SIGKILLed and
restarted, every acknowledged write is there exactly once, on every replica (checked as
``test_jepsen`` checks).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import pytest

from cluster.placement import layout
from tests.cluster.replication.jepsen import (
    Node,
    Op,
    Writer,
    keys_by_group,
    leaders,
    settled,
    stop_all,
    wait,
)
from tests.cluster.replication.test_jepsen import check_outcome, read_through
from tests.node.data.test_store_full_disk import fill, tmpfs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

NAMES = ("a", "b", "c")
SNAPSHOT = 200
"""Entries between a group's snapshots (compactions write files too: some meet a full disk)."""


@contextmanager
def filled(device: Path) -> Iterator[None]:
    """The device full (to the last byte) while inside."""
    path = device / "filler"
    with path.open("wb", buffering=0) as file:
        fill(file)
    try:
        yield
    finally:
        path.unlink()


def acked_after(ops: list[Op], start: float) -> list[Op]:
    return [op for op in ops if op.outcome == "acked" and start <= op.start]


def disk_error(node: Node) -> bool | None:
    """Whether some group of ``node`` names a disk error (None: no answer yet)."""
    groups = node.raftz()
    return None if groups is None else any(group["disk_error"] for group in groups.values())


def test_acknowledged_writes_survive_disks_that_fill_and_empty(tmp_path: Path) -> None:
    plan = layout(NAMES, 3)
    groups = [group.name for group in plan.groups]
    streams, counters = keys_by_group(plan, "s", 1), keys_by_group(plan, "c", 1)
    nodes = [Node(name, tmp_path) for name in NAMES]
    writers: list[Writer] = []
    with ExitStack() as stack:
        devices = {node.name: stack.enter_context(tmpfs(16)) for node in nodes}
        stack.callback(stop_all, nodes)  # (whatever fails: no node outlives the test, or its disk)
        for node in nodes:
            node.store.symlink_to(devices[node.name], target_is_directory=True)
            node.configure(NAMES, [n.route_port for n in nodes], "50ms", snapshot_entries=SNAPSHOT)
        try:
            for node in nodes:
                node.start()
            wait(lambda: leaders(nodes, len(groups)), "every group to elect a leader")
            for n, node in enumerate(nodes):
                writers.append(Writer(node.name, node, streams, counters, 7 + n))
                writers[-1].start()
            time.sleep(1.0)

            with filled(devices["a"]):  # (one full disk: a majority still saves)
                time.sleep(1.5)
                with filled(devices["b"]):  # (two: no majority can)
                    for full in nodes[:2]:
                        wait(partial(disk_error, full), f"{full.name} to notice its disk")
                    refused_from = time.monotonic()
                    time.sleep(3.0)  # (longer than a proposal's timeout)
            emptied = time.monotonic()
            wait(lambda: leaders(nodes, len(groups)), "the groups to agree on leaders again")
            time.sleep(1.5)
            with filled(devices["c"]):
                time.sleep(1.5)
            time.sleep(1.5)
            assert all(node.alive for node in nodes), "a node stopped on a full disk"
        finally:
            for writer in writers:
                writer.halt.set()
            for writer in writers:
                writer.join(15)

        ops = [op for writer in writers for op in writer.ops]
        unknown = [op for op in ops if op.outcome == "unknown" and refused_from <= op.end <= emptied]
        assert unknown, "no write was refused while two disks were full"
        assert acked_after(ops, emptied), "no write acknowledged once the disks had room"

        try:
            for node in nodes:  # (every node dies at once, and restarts on what its disk holds)
                node.kill()
            for node in nodes:
                node.start()
            wait(lambda: settled(nodes, len(groups)), "every replica to apply the same entries")
            answers = {node.name: read_through(node, streams, counters) for node in nodes}
        finally:
            codes = {node.name: node.stop() for node in nodes if node.process is not None}
        assert all(code == 0 for code in codes.values()), codes

        check_outcome(nodes, plan, (streams, counters), ops, answers)
