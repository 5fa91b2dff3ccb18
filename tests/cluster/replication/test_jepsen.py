"""Jepsen-style: three ``pubmesh serve`` processes hold every key on replica groups of all three,
writers on every node add to streams and increment counters while a nemesis SIGKILLs nodes (often
a group's leader) and restarts them on their stores, or pauses them (SIGSTOP: cut off, as seen from
outside) and resumes them. After healing, every replica's committed state is read from its own
storage and checked against what the writers were told:

* every acknowledged XADD is in its stream exactly once, with exactly its acknowledged ID; an
  entry whose outcome is unknown at most once; no entry nobody wrote; IDs strictly increasing;
* every counter is at least its acknowledged increments and at most those plus the unknown ones,
  and no two acknowledged increments of a counter were answered with the same value;
* every replica holds the same committed entries as the others where their logs overlap and the
  same keys, and every node answers the same (all reads go to a group's leader);
* every node stops cleanly and none logged a fatal error or a group stopped by a failed state
  machine.

An operation is acked when a node answered it, unknown when the connection broke or timed out
after it was sent or a node answered ``-CLUSTERDOWN`` (a proposal that timed out may still commit,
so that error does not say the write was not made). No operation counts as failed for sure.

The fault schedule (kinds, groups whose leader is hit, durations) comes from a fixed seed; which
node leads a group when it is hit is the run's.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path

import attrs
import pytest

from cluster.placement import Layout, layout
from tests.cluster.replication.jepsen import (
    Node,
    Op,
    Writer,
    keys_by_group,
    leaders,
    replica_state,
    settled,
    wait,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NAMES = ("a", "b", "c")
SEED = 21
FAULTS = 6
WRITERS_PER_NODE = 2
SNAPSHOT = 300
"""Entries after which a group snapshots and compacts its log (several times in a run)."""


def schedule(rng: random.Random) -> list[tuple[str, int, float, float]]:
    """The faults: (kind, which group's leader or node, how long it lasts, the pause after)."""
    kinds = ["kill-leader", "kill-leader", "kill-node", "pause-leader"]
    return [
        (rng.choice(kinds), rng.randrange(len(NAMES)), rng.uniform(1.0, 2.5), rng.uniform(0.5, 1.5))
        for _ in range(FAULTS)
    ]


def test_acknowledged_writes_survive_kills_and_pauses(tmp_path: Path) -> None:
    plan = layout(NAMES, 3)
    groups = [group.name for group in plan.groups]
    streams = keys_by_group(plan, "s", 1)
    counters = keys_by_group(plan, "c", 1)
    nodes = [Node(name, tmp_path) for name in NAMES]
    for node in nodes:
        node.configure(NAMES, [n.route_port for n in nodes], "50ms", snapshot_entries=SNAPSHOT)
    writers: list[Writer] = []
    faults: list[tuple[float, str, str, list[str], float]] = []
    try:
        marks, answers, codes = run_with_faults(nodes, groups, streams, counters, writers, faults)
    finally:  # (whatever failed: no node outlives the test)
        for node in nodes:
            if node.process is not None:
                node.stop()
    ops = [op for writer in writers for op in writer.ops]
    (tmp_path / "ops.json").write_text(json.dumps([attrs.asdict(op) for op in ops], default=repr))
    report(ops, faults, plan, streams, counters, marks)
    assert all(code == 0 for code in codes.values()), codes

    check_outcome(nodes, plan, (streams, counters), ops, answers, marks)


def check_outcome(
    nodes: list[Node],
    plan: Layout,
    keys: tuple[list[str], list[str]],
    ops: list[Op],
    answers: dict[str, Answers],
    marks: dict[str, tuple[int, int]] | None = None,
) -> None:
    """Once the nodes stopped: every replica's committed state (read from its storage) is the
    same, every node answered the same, none logged a fatal error or a failed state machine, and
    what the writers were told holds in that state (``check_streams``, ``check_counters``).
    ``keys``: the streams and the counters; ``marks``: each group's settled commit index."""
    streams, counters = keys
    groups = [group.name for group in plan.groups]
    replicas = {
        node.name: {g.name: replica_state(node.store, g, streams, counters) for g in plan.groups}
        for node in nodes
    }
    first = nodes[0].name
    reference = replicas[first]
    for node in nodes:
        for group in groups:
            mine, theirs = replicas[node.name][group], reference[group]
            if marks is not None:
                assert mine.commit >= marks[group][0], (node.name, group)  # (a stop may add a no-op)
            common = mine.entries.keys() & theirs.entries.keys()
            assert all(mine.entries[i] == theirs.entries[i] for i in common), (node.name, group)
            assert (mine.streams, mine.counters) == (theirs.streams, theirs.counters), (node.name, group)
        assert answers[node.name] == answers[first], node.name
        log = (node.root / f"{node.name}.log").read_text()
        assert "[FTL]" not in log, node.name
        assert "state machine failed" not in log, node.name
    final = {key: s for g in groups for key, s in reference[g].streams.items()}
    values = {key: v for g in groups for key, v in reference[g].counters.items()}
    check_streams(ops, streams, final)
    check_counters(ops, counters, values)
    assert answers[first] == (final, values)


def run_with_faults(
    nodes: list[Node],
    groups: list[str],
    streams: list[str],
    counters: list[str],
    writers: list[Writer],
    faults: list[tuple[float, str, str, list[str], float]],
) -> tuple[dict[str, tuple[int, int]], dict[str, Answers], dict[str, int]]:
    """Start the nodes and writers, apply the fault schedule, let the groups settle: the settled
    marks, each node's answers, and the nodes' exit codes once stopped."""
    try:
        for node in nodes:
            node.start()
        wait(lambda: leaders(nodes, len(groups)), "every group to elect a leader")
        for node in nodes:
            for i in range(WRITERS_PER_NODE):
                writer = Writer(f"{node.name}{i}", node, streams, counters, SEED * 100 + len(writers))
                writers.append(writer)
                writer.start()
        time.sleep(1.0)

        rng = random.Random(SEED)
        for kind, which, lasts, after in schedule(rng):
            led = leaders(nodes, len(groups)) or {}
            if kind == "kill-node" or not led:
                victim = nodes[which]
            else:
                victim = next(n for n in nodes if n.name == led[groups[which]])
            hit = sorted(group for group, leader in led.items() if leader == victim.name)
            at = time.monotonic()
            faults.append((at, kind, victim.name, hit, lasts))
            if kind.startswith("kill"):
                victim.kill()
                time.sleep(lasts)
                victim.start()
            else:
                victim.pause()
                time.sleep(lasts)
                victim.resume()
            wait(lambda: leaders(nodes, len(groups)), "the groups to agree on leaders again")
            time.sleep(after)

        time.sleep(1.0)
    finally:
        for writer in writers:
            writer.halt.set()
        for writer in writers:
            writer.join(15)
    try:
        marks = wait(lambda: settled(nodes, len(groups)), "every replica to apply the same entries")
        answers = {node.name: read_through(node, streams, counters) for node in nodes}
    finally:
        codes = {node.name: node.stop() for node in nodes if node.process is not None}
    return marks, answers, codes


Answers = tuple[dict[str, list[tuple[bytes, tuple[bytes, ...]]]], dict[str, bytes | None]]
"""A node's streams (entries by key) and counters, as it answers them."""


def read_through(node: Node, streams: list[str], counters: list[str]) -> Answers:
    """The streams and counters as ``node`` answers them (from each group's leader)."""
    with node.redis() as client:
        got = {}
        for key in streams:
            rows = client.execute_command("XRANGE", key, "-", "+")
            got[key] = [(i, tuple(x for pair in fields.items() for x in pair)) for i, fields in rows]
        return got, {key: client.execute_command("GET", key) for key in counters}


def check_streams(
    ops: list[Op], streams: list[str], final: dict[str, list[tuple[bytes, tuple[bytes, ...]]]]
) -> None:
    adds = {(op.writer, op.seq): op for op in ops if op.kind == "xadd"}
    for key in streams:
        entries = final.get(key, [])
        ids = [entry_id for entry_id, _ in entries]
        assert ids == sorted(set(ids), key=_id_key), f"{key}: IDs not strictly increasing"
        seen: Counter[tuple[str, int]] = Counter()
        for entry_id, fields in entries:
            assert fields[::2] == (b"w", b"n"), fields
            tag = (fields[1].decode(), int(fields[3]))
            op = adds.get(tag)
            assert op is not None, f"{key}: {entry_id!r} {fields} nobody wrote"
            assert op.key == key, f"{key}: {entry_id!r} {fields} written to {op.key}"
            seen[tag] += 1
            if op.outcome == "acked":
                assert op.value == entry_id, f"{key}: {tag} acked as {op.value!r}, holds {entry_id!r}"
        assert all(count == 1 for count in seen.values()), f"{key}: {seen.most_common(3)} duplicated"
        lost = [
            op
            for op in adds.values()
            if op.key == key and op.outcome == "acked" and (op.writer, op.seq) not in seen
        ]
        assert not lost, f"{key}: acknowledged writes lost: {lost[:3]}"


def check_counters(ops: list[Op], counters: list[str], values: dict[str, bytes | None]) -> None:
    for key in counters:
        incrs = [op for op in ops if op.kind == "incr" and op.key == key]
        acked = [op.value for op in incrs if op.outcome == "acked"]
        unknown = len(incrs) - len(acked)
        value = int(values.get(key) or b"0")
        assert len(acked) <= value <= len(acked) + unknown, (key, value, len(acked), unknown)
        assert len(set(acked)) == len(acked), f"{key}: two acknowledged increments, one value"
        assert all(isinstance(v, int) and 1 <= v <= value for v in acked), key


def _id_key(entry_id: bytes) -> tuple[int, int]:
    ms, seq = entry_id.split(b"-")
    return int(ms), int(seq)


def report(
    ops: list[Op],
    faults: list[tuple[float, str, str, list[str], float]],
    plan: Layout,
    streams: list[str],
    counters: list[str],
    marks: dict[str, tuple[int, int]],
) -> None:
    """What the run did, printed (pytest -s shows it)."""
    group_of = {key: plan.group_of(key.encode()).name for key in streams + counters}
    outcomes = Counter((op.kind, op.outcome) for op in ops)
    errors = Counter(op.error.split(":")[0][:60] for op in ops if op.error)
    print(f"\nops: {dict(outcomes)}; errors: {dict(errors)}; commit/applied: {marks}")
    for at, kind, victim, hit, lasts in faults:
        failover = []
        for group in hit:
            after = [
                op.end
                for op in ops
                if op.outcome == "acked" and op.start >= at and group_of[op.key] == group
            ]
            failover.append(f"{group} {min(after) - at:.2f}s" if after else f"{group} none")
        print(f"{kind} {victim} for {lasts:.1f}s, leading {hit}: first acked write after: {failover}")
